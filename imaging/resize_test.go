package imaging

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

func TestResizeBilinearHand(t *testing.T) {
	tests := []struct {
		name       string
		src        *Float
		outW, outH int
		want       []float32
	}{
		{
			// scale 0.5: src x = 0, .5, 1, 1.5 (ceil clamps to the last column).
			name: "2x2-to-4x4", src: &Float{W: 2, H: 2, C: 1, Pix: []float32{0, 10, 20, 30}}, outW: 4, outH: 4,
			want: []float32{
				0, 5, 10, 10,
				10, 15, 20, 20,
				20, 25, 30, 30,
				20, 25, 30, 30,
			},
		},
		{
			// scale 4/3: src x = 0, 1.333…, 2.666…; 3 + 3·0.33333333333333326 =
			// 3.9999999999999996 in float64, stored as float32 4.
			name: "4-to-3-row", src: &Float{W: 4, H: 1, C: 1, Pix: []float32{0, 3, 6, 9}}, outW: 3, outH: 1,
			want: []float32{0, 4, 8},
		},
		{
			name: "identity-size", src: &Float{W: 3, H: 2, C: 2, Pix: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}, outW: 3, outH: 2,
			want: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		},
		{
			// 3 → 2: src = 0, 1.5; channels interpolate independently.
			name: "3x1-to-2x1-rgb", src: &Float{W: 3, H: 1, C: 3, Pix: []float32{0, 100, 200, 10, 110, 210, 20, 120, 220}}, outW: 2, outH: 1,
			want: []float32{0, 100, 200, 15, 115, 215},
		},
		{
			// Upscale 1 pixel: every output equals it.
			name: "1x1-to-2x3", src: &Float{W: 1, H: 1, C: 1, Pix: []float32{7.5}}, outW: 2, outH: 3,
			want: []float32{7.5, 7.5, 7.5, 7.5, 7.5, 7.5},
		},
		{name: "empty-output", src: &Float{W: 1, H: 1, C: 1, Pix: []float32{1}}, outW: 0, outH: 3, want: []float32{}},
		{name: "malformed-source", src: &Float{W: 2, H: 2, C: 1, Pix: []float32{1}}, outW: 1, outH: 1, want: []float32{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ResizeBilinear(tc.src, tc.outW, tc.outH)
			if got.W != max(tc.outW, 0) || got.H != max(tc.outH, 0) || len(got.Pix) != len(tc.want) {
				t.Fatalf("shape %d×%d×%d (%d values), want %d values", got.H, got.W, got.C, len(got.Pix), len(tc.want))
			}
			for i := range tc.want {
				if got.Pix[i] != tc.want[i] {
					t.Fatalf("value %d = %v, want %v (all %v)", i, got.Pix[i], tc.want[i], got.Pix)
				}
			}
		})
	}
}

// tfjsResizeBilinear transcribes the TF.js cpu kernel literally (per output
// value, no precomputation) to check the optimised loop.
func tfjsResizeBilinear(x *Float, newW, newH int) []float32 {
	out := make([]float32, 0, newW*newH*x.C)
	rowRatio := float64(x.H) / float64(newH)
	colRatio := float64(x.W) / float64(newW)
	for r := 0; r < newH; r++ {
		sourceFracRow := rowRatio * float64(r)
		sourceRowFloor := math.Max(0, math.Floor(sourceFracRow))
		rowFrac := sourceFracRow - sourceRowFloor
		sourceRowCeil := math.Min(float64(x.H-1), math.Ceil(sourceFracRow))
		for c := 0; c < newW; c++ {
			sourceFracCol := colRatio * float64(c)
			sourceColFloor := math.Max(0, math.Floor(sourceFracCol))
			colFrac := sourceFracCol - sourceColFloor
			sourceColCeil := math.Min(float64(x.W-1), math.Ceil(sourceFracCol))
			at := func(row, col float64, d int) float64 {
				return float64(x.Pix[(int(row)*x.W+int(col))*x.C+d])
			}
			for d := 0; d < x.C; d++ {
				topLeft := at(sourceRowFloor, sourceColFloor, d)
				bottomLeft := at(sourceRowCeil, sourceColFloor, d)
				topRight := at(sourceRowFloor, sourceColCeil, d)
				bottomRight := at(sourceRowCeil, sourceColCeil, d)
				top := topLeft + (topRight-topLeft)*colFrac
				bottom := bottomLeft + (bottomRight-bottomLeft)*colFrac
				out = append(out, float32(top+(bottom-top)*rowFrac))
			}
		}
	}
	return out
}

func TestResizeBilinearMatchesKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := [][4]int{{7, 5, 3, 11}, {13, 9, 4, 4}, {100, 37, 17, 64}, {3, 3, 150, 150}, {640, 480, 416, 416}}
	for _, c := range []int{1, 3, 4} {
		for _, s := range sizes {
			src := NewFloat(s[0], s[1], c)
			for i := range src.Pix {
				src.Pix[i] = float32(rng.Float64() * 255)
			}
			got := ResizeBilinear(src, s[2], s[3])
			want := tfjsResizeBilinear(src, s[2], s[3])
			for i := range want {
				if math.Float32bits(got.Pix[i]) != math.Float32bits(want[i]) {
					t.Fatalf("C=%d %v: value %d = %v, want %v", c, s, i, got.Pix[i], want[i])
				}
			}
		}
	}
}

// TestTFJSUnitInputs reproduces the network inputs face-api computed with
// TF.js (stored rounded half-to-even to uint8) from the decoded sample1.jpg:
// the detectors' inputs (pad bottom/right, resize) and the landmark and
// recognition inputs of face 0 (crop, centred pad, resize).
func TestTFJSUnitInputs(t *testing.T) {
	img, _, err := DecodeFile(datadir.ForTest(t, "faceapi-reference", "images", "sample1.jpg"), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file       string
		size       int
		crop       [4]int // x, y, w, h; zero = whole image
		centred    bool
		offX, offY int
	}{
		{"sample1_ssd_input_512.rgb", 512, [4]int{}, false, 0, 0},
		{"sample1_tiny_input_416.rgb", 416, [4]int{}, false, 0, 0},
		// faces.json sample1 ssd[0] landmark_crop_box 177×238: diff 61, 31 after, 30 before.
		{"sample1_face0_landmark_input_112.rgb", 112, [4]int{413, 355, 177, 238}, true, 30, 0},
		// dlib_align_rect_clipped, already square.
		{"sample1_face0_recognition_input_150.rgb", 150, [4]int{369, 394, 213, 213}, true, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			ref, err := os.ReadFile(datadir.ForTest(t, "faceapi-reference", "unit", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			m := img
			if tc.crop != [4]int{} {
				if m, err = img.Crop(tc.crop[0], tc.crop[1], tc.crop[2], tc.crop[3]); err != nil {
					t.Fatal(err)
				}
			}
			sq, ox, oy := PadToSquare(m.ToFloat(), tc.centred)
			if ox != tc.offX || oy != tc.offY {
				t.Errorf("offset %d,%d, want %d,%d", ox, oy, tc.offX, tc.offY)
			}
			r := ResizeBilinear(sq, tc.size, tc.size)
			if len(r.Pix) != len(ref) {
				t.Fatalf("%d values, reference %d", len(r.Pix), len(ref))
			}
			bad := 0
			for i, v := range r.Pix {
				if uint8(math.RoundToEven(float64(v))) != ref[i] {
					if bad++; bad <= 3 {
						t.Errorf("value %d: %v rounds to %d, reference %d", i, v, uint8(math.RoundToEven(float64(v))), ref[i])
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d values differ", bad, len(ref))
			}
		})
	}
}

func TestPadToSquare(t *testing.T) {
	mk := func(w, h int) *Float {
		f := NewFloat(w, h, 1)
		for i := range f.Pix {
			f.Pix[i] = float32(i + 1)
		}
		return f
	}
	tests := []struct {
		name       string
		w, h       int
		centred    bool
		offX, offY int
		want       []float32 // nil: only check shape and offsets
	}{
		{"wide-topleft", 3, 1, false, 0, 0, []float32{1, 2, 3, 0, 0, 0, 0, 0, 0}},
		{"tall-topleft", 1, 2, false, 0, 0, []float32{1, 0, 2, 0}},
		{"wide-centred-odd", 4, 1, true, 0, 1, []float32{0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0}}, // diff 3: 2 after, 1 before
		{"tall-centred-even", 1, 3, true, 1, 0, []float32{0, 1, 0, 0, 2, 0, 0, 3, 0}},                     // diff 2: 1 after, 1 before
		{"tall-centred-diff1", 1, 2, true, 0, 0, []float32{1, 0, 2, 0}},                                   // round(0.5)=1 after, 0 before
		{"wide-centred-diff61", 238, 177, true, 0, 30, nil},
		{"square", 2, 2, true, 0, 0, []float32{1, 2, 3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, ox, oy := PadToSquare(mk(tc.w, tc.h), tc.centred)
			side := max(tc.w, tc.h)
			if out.W != side || out.H != side || ox != tc.offX || oy != tc.offY {
				t.Fatalf("%d×%d offset %d,%d, want %d² offset %d,%d", out.W, out.H, ox, oy, side, tc.offX, tc.offY)
			}
			if tc.want != nil {
				for i := range tc.want {
					if out.Pix[i] != tc.want[i] {
						t.Fatalf("got %v, want %v", out.Pix, tc.want)
					}
				}
			}
			// The original sits at the offset.
			if out.Pix[oy*side+ox] != 1 {
				t.Errorf("first pixel not at the offset")
			}
		})
	}
}

func TestCrop(t *testing.T) {
	m := NewRGB(4, 3)
	for i := range m.Pix {
		m.Pix[i] = uint8(i)
	}
	tests := []struct {
		x, y, w, h int
		ok         bool
		wantW      int
		wantH      int
		first      uint8
	}{
		{1, 1, 2, 2, true, 2, 2, 15},
		{-2, -1, 4, 3, true, 2, 2, 0}, // clipped at the top-left
		{3, 2, 10, 10, true, 1, 1, 33},
		{4, 0, 1, 1, false, 0, 0, 0},
		{0, 0, 0, 1, false, 0, 0, 0},
		{-5, -5, 2, 2, false, 0, 0, 0},
	}
	for _, tc := range tests {
		c, err := m.Crop(tc.x, tc.y, tc.w, tc.h)
		if (err == nil) != tc.ok {
			t.Errorf("Crop(%d,%d,%d,%d) err = %v", tc.x, tc.y, tc.w, tc.h, err)
			continue
		}
		if !tc.ok {
			continue
		}
		if c.W != tc.wantW || c.H != tc.wantH || c.Pix[0] != tc.first || c.Validate() != nil {
			t.Errorf("Crop(%d,%d,%d,%d) = %d×%d first %d", tc.x, tc.y, tc.w, tc.h, c.W, c.H, c.Pix[0])
		}
		// Every pixel equals the source pixel at the clipped offset.
		x0, y0 := max(tc.x, 0), max(tc.y, 0)
		for y := 0; y < c.H; y++ {
			for x := 0; x < c.W; x++ {
				r, _, _ := c.At(x, y)
				if sr, _, _ := m.At(x0+x, y0+y); r != sr {
					t.Fatalf("pixel (%d,%d) = %d, want %d", x, y, r, sr)
				}
			}
		}
	}
}
