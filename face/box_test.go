package face

import (
	"math"
	"testing"
)

func TestBoxIoUAndIntersection(t *testing.T) {
	unit := Box{X: 0, Y: 0, Width: 2, Height: 2}
	tests := []struct {
		name    string
		a, b    Box
		in, iou float64
	}{
		{"same", unit, unit, 4, 1},
		{"half overlap", unit, Box{X: 1, Y: 0, Width: 2, Height: 2}, 2, 2.0 / 6},
		{"contained", unit, Box{X: 0.5, Y: 0.5, Width: 1, Height: 1}, 1, 0.25},
		{"disjoint", unit, Box{X: 5, Y: 5, Width: 1, Height: 1}, 0, 0},
		{"touching edge", unit, Box{X: 2, Y: 0, Width: 2, Height: 2}, 0, 0},
		{"zero width", unit, Box{X: 0, Y: 0, Width: 0, Height: 2}, 0, 0},
		{"negative size", unit, Box{X: 1, Y: 1, Width: -1, Height: -1}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range [][2]Box{{tc.a, tc.b}, {tc.b, tc.a}} {
				if got := p[0].Intersection(p[1]); math.Abs(got-tc.in) > 1e-12 {
					t.Errorf("Intersection = %v, want %v", got, tc.in)
				}
				if got := p[0].IoU(p[1]); math.Abs(got-tc.iou) > 1e-12 {
					t.Errorf("IoU = %v, want %v", got, tc.iou)
				}
			}
		})
	}
}
