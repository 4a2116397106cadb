package imaging

import "testing"

func TestGrey(t *testing.T) {
	// Expectations are 0.299 R + 0.587 G + 0.114 B rounded half up.
	tests := []struct {
		name    string
		r, g, b uint8
		want    uint8
	}{
		{"black", 0, 0, 0, 0},
		{"white", 255, 255, 255, 255},
		{"red", 255, 0, 0, 76},    // 76.245
		{"green", 0, 255, 0, 150}, // 149.685
		{"blue", 0, 0, 255, 29},   // 29.07
		{"grey stays grey", 93, 93, 93, 93},
		{"skin", 224, 172, 150, 185},    // 185.04
		{"rounds up", 10, 1, 0, 4},      // 3.577
		{"rounds down", 3, 1, 0, 1},     // 1.484
		{"half rounds up", 0, 12, 4, 8}, // 7.5 exactly
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewRGB(2, 1)
			m.Set(0, 0, tc.r, tc.g, tc.b)
			m.Set(1, 0, 5, 5, 5)
			g := m.Grey()
			r0, g0, b0 := g.At(0, 0)
			if r0 != tc.want || g0 != tc.want || b0 != tc.want {
				t.Errorf("Grey(%d,%d,%d) = (%d,%d,%d), want %d replicated", tc.r, tc.g, tc.b, r0, g0, b0, tc.want)
			}
			if r1, _, _ := g.At(1, 0); r1 != 5 {
				t.Errorf("second pixel %d, want 5", r1)
			}
			if !g.IsGrey() {
				t.Error("IsGrey false on a Grey() result")
			}
			if r, _, _ := m.At(0, 0); r != tc.r {
				t.Error("Grey modified its receiver")
			}
		})
	}
	c := NewRGB(1, 1)
	c.Set(0, 0, 1, 2, 3)
	if c.IsGrey() {
		t.Error("IsGrey true on a coloured pixel")
	}
}
