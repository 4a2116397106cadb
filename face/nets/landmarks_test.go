package nets

import (
	"math"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/imaging"
)

var (
	lmOnce [2]sync.Once
	lmNet  [2]*Landmarker
	lmErr  [2]error
)

// testLandmarker loads each landmark network once per test binary.
func testLandmarker(t testing.TB, tiny bool) *Landmarker {
	t.Helper()
	i := 0
	if tiny {
		i = 1
	}
	lmOnce[i].Do(func() { lmNet[i], lmErr[i] = NewLandmarker(DefaultModelDir(), tiny, nil) })
	if lmErr[i] != nil {
		t.Fatal(lmErr[i])
	}
	return lmNet[i]
}

func TestLandmarksMatchFaceAPI(t *testing.T) {
	u := loadFaRef(t)
	in := loadFaRGB(t, "sample1_face0_landmark_input_112.rgb", LandmarkSize)
	tests := []struct {
		name string
		tiny bool
		want []float64
	}{
		{"68", false, u.Landmark68Raw},
		{"68 tiny", true, u.Landmark68TinyRaw},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := testLandmarker(t, tc.tiny)
			got, err := l.Compute([]*imaging.Float{in})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || len(tc.want) != 136 {
				t.Fatalf("got %d results; reference has %d values", len(got), len(tc.want))
			}
			var worst float64
			for p := range 68 {
				for c := range 2 {
					// Compare in pixels of the 112 input.
					d := math.Abs(float64(got[0][p][c])-tc.want[2*p+c]) * LandmarkSize
					worst = max(worst, d)
				}
			}
			if worst > 0.01 {
				t.Errorf("largest landmark difference %.4g px, want ≤ 0.01", worst)
			}
			t.Logf("largest landmark difference %.3g px of the 112 input", worst)
		})
	}
}

func TestLandmarksBatchAndConcurrency(t *testing.T) {
	in := loadFaRGB(t, "sample1_face0_landmark_input_112.rgb", LandmarkSize)
	mirror := &imaging.Float{W: 112, H: 112, C: 3, Pix: make([]float32, len(in.Pix))}
	for y := 0; y < 112; y++ {
		for x := 0; x < 112; x++ {
			copy(mirror.Pix[(y*112+x)*3:(y*112+x)*3+3], in.Pix[(y*112+111-x)*3:(y*112+111-x)*3+3])
		}
	}
	inputs := []*imaging.Float{in, mirror, faConst(112, 90), in}
	for _, tiny := range []bool{false, true} {
		l := testLandmarker(t, tiny)
		var single [][]float32
		for _, x := range inputs {
			r, err := l.Compute([]*imaging.Float{x})
			if err != nil {
				t.Fatal(err)
			}
			single = append(single, flatLM(r[0]))
		}
		batch, err := l.Compute(inputs)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]float32
		for _, r := range batch {
			got = append(got, flatLM(r))
		}
		faSame(t, "batch vs single", got, single, 1e-6)
		var wg sync.WaitGroup
		res := make([][][68][2]float32, 2)
		errs := make([]error, 2)
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[g], errs[g] = l.Compute(inputs[:2])
			}()
		}
		wg.Wait()
		for g := range 2 {
			if errs[g] != nil {
				t.Fatal(errs[g])
			}
			faSame(t, "concurrent", [][]float32{flatLM(res[g][0]), flatLM(res[g][1])}, single[:2], 1e-6)
		}
		// The mirrored face's landmark 0 (jaw, image left) mirrors landmark
		// 16 (jaw, image right): a check that the output order is (x, y).
		a, b := single[0], single[1]
		if d := math.Abs(float64(a[0]) - (1 - float64(b[32]))); d > 0.03 {
			t.Errorf("tiny=%v: mirrored jaw point x differs by %.3f", tiny, d)
		}
	}
}

func flatLM(p [68][2]float32) []float32 {
	out := make([]float32, 0, 136)
	for _, q := range p {
		out = append(out, q[0], q[1])
	}
	return out
}

func TestLandmarksToImage(t *testing.T) {
	// Values from faceapi-reference/faces.json, sample1 ssd face 0, point 0:
	// the raw output for the 177×238 crop maps to x = rel·177 + 413.99.
	var raw [68][2]float32
	raw[0] = [2]float32{0.5, 0.5}
	tests := []struct {
		name         string
		crop         LandmarkCrop
		raw          [2]float32
		wantX, wantY float64
	}{
		// Centre of the padded square is the centre of the crop.
		{"centre tall", LandmarkCrop{W: 177, H: 238}, [2]float32{0.5, 0.5}, 88.5 + 10, 119 + 20},
		{"centre wide", LandmarkCrop{W: 300, H: 100}, [2]float32{0.5, 0.5}, 150 + 10, 50 + 20},
		// Left edge of a tall crop sits at the padding: x = pad/112.
		{"left edge", LandmarkCrop{W: 56, H: 112}, [2]float32{0.25, 0}, 0 + 10, 0 + 20},
		{"bottom right square", LandmarkCrop{W: 50, H: 50}, [2]float32{1, 1}, 50 + 10, 50 + 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw[0] = tc.raw
			got := LandmarksToImage(raw, tc.crop, 10, 20)
			if math.Abs(got[0][0]-tc.wantX) > 1e-4 || math.Abs(got[0][1]-tc.wantY) > 1e-4 {
				t.Errorf("got (%g, %g), want (%g, %g)", got[0][0], got[0][1], tc.wantX, tc.wantY)
			}
		})
	}
}
