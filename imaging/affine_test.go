package imaging

import (
	"bytes"
	"image/png"
	"math"
	"math/rand/v2"
	"testing"
)

func similarity(scale, theta, tx, ty float64) Affine {
	a, b := scale*math.Cos(theta), scale*math.Sin(theta)
	return Affine{a, -b, tx, b, a, ty}
}

func TestEstimateSimilarityExact(t *testing.T) {
	from := [][2]float64{{30.5, 40}, {70, 41.2}, {50, 60}, {35, 80}, {66, 79}}
	tests := []Affine{
		Identity,
		similarity(1, 0, 12.5, -3),
		similarity(2.5, 0.3, -100, 250),
		similarity(0.37, -2.9, 5, 7),
		similarity(1.2, math.Pi, 0, 0),
	}
	for _, want := range tests {
		to := make([][2]float64, len(from))
		for i, p := range from {
			to[i][0], to[i][1] = want.Apply(p[0], p[1])
		}
		got, err := EstimateSimilarity(from, to)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-9 {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
		if got[0] != got[4] || got[1] != -got[3] {
			t.Errorf("not a similarity: %v", got)
		}
	}
}

// TestEstimateSimilarityNoisy checks the least-squares property: on noisy
// points the estimate has a smaller residual than the true transform and
// than small perturbations of the estimate, and it lands near the truth.
func TestEstimateSimilarityNoisy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	truth := similarity(1.7, 0.4, 20, -10)
	from := make([][2]float64, 68)
	to := make([][2]float64, 68)
	for i := range from {
		from[i] = [2]float64{rng.Float64() * 100, rng.Float64() * 100}
		x, y := truth.Apply(from[i][0], from[i][1])
		to[i] = [2]float64{x + rng.NormFloat64(), y + rng.NormFloat64()}
	}
	residual := func(a Affine) float64 {
		s := 0.0
		for i, p := range from {
			x, y := a.Apply(p[0], p[1])
			s += (x-to[i][0])*(x-to[i][0]) + (y-to[i][1])*(y-to[i][1])
		}
		return s
	}
	est, err := EstimateSimilarity(from, to)
	if err != nil {
		t.Fatal(err)
	}
	r := residual(est)
	if r > residual(truth) {
		t.Errorf("residual %g above the true transform's %g", r, residual(truth))
	}
	// Perturb each similarity parameter (a, b, tx, ty) both ways.
	for k, idx := range [][]int{{0, 4}, {3}, {2}, {5}} {
		for _, d := range []float64{-1e-3, 1e-3} {
			p := est
			for _, j := range idx {
				p[j] += d
			}
			if k == 1 {
				p[1] -= d // keep [a -b; b a]
			}
			if residual(p) < r {
				t.Errorf("perturbing parameter %d by %g lowers the residual", k, d)
			}
		}
	}
	if s := math.Hypot(est[0], est[3]); math.Abs(s-1.7) > 0.02 {
		t.Errorf("scale %g, want ≈1.7", s)
	}
	if th := math.Atan2(est[3], est[0]); math.Abs(th-0.4) > 0.02 {
		t.Errorf("angle %g, want ≈0.4", th)
	}
}

// TestEstimateSimilarityNoReflection fits mirrored points: the result must
// still be a proper rotation (positive determinant), never a reflection.
func TestEstimateSimilarityNoReflection(t *testing.T) {
	from := [][2]float64{{0, 0}, {10, 0}, {0, 10}, {7, 3}}
	to := make([][2]float64, len(from))
	for i, p := range from {
		to[i] = [2]float64{-p[0], p[1]} // mirror in x
	}
	a, err := EstimateSimilarity(from, to)
	if err != nil {
		t.Fatal(err)
	}
	if det := a[0]*a[4] - a[1]*a[3]; det < 0 {
		t.Errorf("reflection produced: %v (det %g)", a, det)
	}
	if a[0] != a[4] || a[1] != -a[3] {
		t.Errorf("not a similarity: %v", a)
	}
}

func TestEstimateSimilarityErrors(t *testing.T) {
	tests := []struct {
		name     string
		from, to [][2]float64
	}{
		{"length-mismatch", [][2]float64{{0, 0}, {1, 1}}, [][2]float64{{0, 0}}},
		{"one-point", [][2]float64{{0, 0}}, [][2]float64{{1, 1}}},
		{"empty", nil, nil},
		{"source-coincide", [][2]float64{{2, 2}, {2, 2}, {2, 2}}, [][2]float64{{0, 0}, {1, 0}, {0, 1}}},
		{"target-coincide", [][2]float64{{0, 0}, {1, 0}}, [][2]float64{{5, 5}, {5, 5}}},
		{"nan", [][2]float64{{0, 0}, {math.NaN(), 0}}, [][2]float64{{0, 0}, {1, 0}}},
		{"inf", [][2]float64{{0, 0}, {1, 0}}, [][2]float64{{0, 0}, {math.Inf(1), 0}}},
		{"zero-scale", [][2]float64{{-1, 0}, {1, 0}, {0, -1}, {0, 1}}, [][2]float64{{0, 1}, {0, 1}, {0, -1}, {0, -1}}},
	}
	for _, tc := range tests {
		if a, err := EstimateSimilarity(tc.from, tc.to); err == nil {
			t.Errorf("%s: no error, got %v", tc.name, a)
		}
	}
}

func TestAffineInvert(t *testing.T) {
	for _, a := range []Affine{Identity, similarity(2, 1, 3, 4), {1, 2, 3, 4, 5, 6}, {0, -1, 5, 1, 0, -2}} {
		inv, err := a.Invert()
		if err != nil {
			t.Fatal(err)
		}
		id := a.Then(inv)
		for i := range id {
			if math.Abs(id[i]-Identity[i]) > 1e-12 {
				t.Errorf("%v then inverse = %v", a, id)
			}
		}
		x, y := a.Apply(3, -7)
		if bx, by := inv.Apply(x, y); math.Abs(bx-3) > 1e-12 || math.Abs(by+7) > 1e-12 {
			t.Errorf("round trip (3,-7) = (%g,%g)", bx, by)
		}
	}
	for _, a := range []Affine{{}, {1, 2, 0, 2, 4, 0}, {math.NaN(), 0, 0, 0, 1, 0}, {1e-320, 0, 0, 0, 1e-320, 0}} {
		if _, err := a.Invert(); err == nil {
			t.Errorf("%v inverted", a)
		}
	}
}

func testImage(w, h int) *RGB {
	m := NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = uint8(i*7 + i/3)
	}
	return m
}

func TestWarpAffine(t *testing.T) {
	src := testImage(7, 5)
	tests := []struct {
		name string
		a    Affine
		w, h int
		want func(x, y int) (uint8, uint8, uint8)
	}{
		{"identity", Identity, 7, 5, src.At},
		{"translate", Affine{1, 0, 2, 0, 1, -1}, 7, 5, func(x, y int) (uint8, uint8, uint8) { return src.At(x+2, y-1) }},
		// Output 5×7 is the source rotated 90° clockwise: out(x,y) = src(y, H-1-x).
		{"rotate-90", Affine{0, 1, 0, -1, 0, 4}, 5, 7, func(x, y int) (uint8, uint8, uint8) { return src.At(y, 4-x) }},
		{"rotate-180", Affine{-1, 0, 6, 0, -1, 4}, 7, 5, func(x, y int) (uint8, uint8, uint8) { return src.At(6-x, 4-y) }},
		{"far-outside", Affine{1, 0, 1000, 0, 1, 0}, 3, 3, func(x, y int) (uint8, uint8, uint8) { return 0, 0, 0 }},
		{"nan", Affine{math.NaN(), 0, 0, 0, 1, 0}, 3, 3, func(x, y int) (uint8, uint8, uint8) { return 0, 0, 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := WarpAffine(src, tc.a, tc.w, tc.h)
			if out.W != tc.w || out.H != tc.h {
				t.Fatalf("size %d×%d", out.W, out.H)
			}
			for y := 0; y < tc.h; y++ {
				for x := 0; x < tc.w; x++ {
					r, g, b := out.At(x, y)
					wr, wg, wb := tc.want(x, y)
					if r != wr || g != wg || b != wb {
						t.Fatalf("(%d,%d) = %d %d %d, want %d %d %d", x, y, r, g, b, wr, wg, wb)
					}
				}
			}
		})
	}
	// Half-pixel shift blends neighbours; at the border it blends with black.
	row := &RGB{W: 2, H: 1, Pix: []uint8{100, 0, 0, 201, 0, 0}}
	out := WarpAffine(row, Affine{1, 0, 0.5, 0, 1, 0}, 2, 1)
	if out.Pix[0] != 151 || out.Pix[3] != 101 { // (100+201)/2 = 150.5 → 151; 201/2 = 100.5 → 101
		t.Errorf("half-pixel warp %v", out.Pix)
	}
}

func TestDraw(t *testing.T) {
	m := NewRGB(10, 8)
	m.DrawRect(1, 1, 6, 5, 1, 255, 0, 0)
	for y := 0; y < 8; y++ {
		for x := 0; x < 10; x++ {
			onEdge := (x >= 1 && x <= 6 && (y == 1 || y == 5)) || (y >= 1 && y <= 5 && (x == 1 || x == 6))
			r, _, _ := m.At(x, y)
			if (r == 255) != onEdge {
				t.Fatalf("(%d,%d) red=%v, want %v", x, y, r == 255, onEdge)
			}
		}
	}
	m = NewRGB(10, 8)
	m.DrawRect(-5, -5, 100, 100, 2, 0, 255, 0) // clipped, no panic
	m.DrawRect(math.NaN(), 0, math.Inf(1), 3, 3, 0, 255, 0)
	m.DrawDot(4, 4, 1, 0, 0, 255)
	want := map[[2]int]bool{{4, 4}: true, {3, 4}: true, {5, 4}: true, {4, 3}: true, {4, 5}: true}
	for y := 2; y <= 6; y++ {
		for x := 2; x <= 6; x++ {
			_, _, b := m.At(x, y)
			if (b == 255) != want[[2]int{x, y}] {
				t.Errorf("dot pixel (%d,%d) blue=%v", x, y, b == 255)
			}
		}
	}
	m.DrawDot(-100, 1e300, 3, 1, 1, 1) // off-image, no panic
}

func TestEncodePNGRoundTrip(t *testing.T) {
	src := testImage(9, 4)
	var buf bytes.Buffer
	if err := src.EncodePNG(&buf); err != nil {
		t.Fatal(err)
	}
	back, info, err := Decode(buf.Bytes(), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Pix, src.Pix) || info.HadAlpha || info.Format != "png" {
		t.Errorf("round trip differs (info %+v)", info)
	}
	// Image() view encodes to the same pixels.
	buf.Reset()
	if err := png.Encode(&buf, src.Image()); err != nil {
		t.Fatal(err)
	}
	if back, _, err = Decode(buf.Bytes(), DefaultLimits()); err != nil || !bytes.Equal(back.Pix, src.Pix) {
		t.Errorf("Image() view round trip: %v", err)
	}
	if err := NewRGB(0, 3).EncodePNG(&buf); err == nil {
		t.Error("empty image encoded")
	}
	if err := (&RGB{W: 2, H: 2, Pix: make([]uint8, 3)}).EncodePNG(&buf); err == nil {
		t.Error("malformed image encoded")
	}
}

// TestWarpAffineMatchesNaive compares WarpAffine with a direct per-pixel
// bilinear sampler (black outside) on random similarity transforms that
// cover the interior and the borders.
func TestWarpAffineMatchesNaive(t *testing.T) {
	src := testImage(40, 30)
	rng := rand.New(rand.NewPCG(5, 6))
	for k := 0; k < 20; k++ {
		a := similarity(0.3+rng.Float64()*2, rng.Float64()*2*math.Pi, rng.Float64()*60-10, rng.Float64()*50-10)
		out := WarpAffine(src, a, 25, 20)
		for y := 0; y < 20; y++ {
			for x := 0; x < 25; x++ {
				sx, sy := a.Apply(float64(x), float64(y))
				x0, y0 := int(math.Floor(sx)), int(math.Floor(sy))
				ax, ay := sx-math.Floor(sx), sy-math.Floor(sy)
				var want [3]uint8
				for c := 0; c < 3; c++ {
					get := func(px, py int) float64 {
						r, g, b := src.At(px, py)
						return float64([3]uint8{r, g, b}[c])
					}
					v := (1-ax)*(1-ay)*get(x0, y0) + ax*(1-ay)*get(x0+1, y0) + (1-ax)*ay*get(x0, y0+1) + ax*ay*get(x0+1, y0+1)
					want[c] = uint8(math.Min(255, math.Floor(v+0.5)))
				}
				r, g, b := out.At(x, y)
				if [3]uint8{r, g, b} != want {
					t.Fatalf("transform %v pixel (%d,%d) = %d %d %d, want %v", a, x, y, r, g, b, want)
				}
			}
		}
	}
}
