package imaging

import (
	"strconv"
	"testing"
)

func TestDrawLabel(t *testing.T) {
	for _, n := range []int{0, 1, 7, 10, 42, 123, 9876} {
		for _, scale := range []int{1, 3} {
			m := NewRGB(80, 40)
			for i := range m.Pix {
				m.Pix[i] = 200
			}
			m.DrawLabel(5, 4, n, scale, 0, 255, 0)
			digits := len(strconv.Itoa(n))
			if got, ok := m.ReadLabel(5, 4, scale, digits); !ok || got != n {
				t.Errorf("label %d at scale %d reads %d (%v)", n, scale, got, ok)
			}
			w, h := LabelSize(n, scale)
			// The tag's corners are in the box colour, outside it untouched.
			for _, p := range [][2]int{{5, 4}, {5 + w - 1, 4 + h - 1}} {
				if i := 3 * (p[1]*m.W + p[0]); m.Pix[i+1] != 255 || m.Pix[i] != 0 {
					t.Errorf("label %d: corner %v is %v", n, p, m.Pix[i:i+3])
				}
			}
			if i := 3 * ((4+h)*m.W + 5 + w); m.Pix[i] != 200 {
				t.Errorf("label %d: drew outside its %d×%d box", n, w, h)
			}
		}
	}
	m := NewRGB(10, 10)
	m.DrawLabel(-50, 1e300, 12345, 4, 1, 2, 3) // off-image: clipped, no panic
	m.DrawLabel(8, 8, 99, 2, 1, 2, 3)
	if _, ok := m.ReadLabel(8, 8, 2, 2); ok {
		t.Error("a clipped label was read")
	}
	if _, ok := NewRGB(30, 30).ReadLabel(0, 0, 1, 1); ok {
		t.Error("a blank image was read as a label")
	}
}
