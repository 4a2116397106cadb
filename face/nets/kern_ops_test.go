package nets

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/imaging"
)

// kernTestInputs returns five distinct size×size inputs: a face crop, its
// mirror, a darker copy, a constant grey and a saturated checkerboard.
func kernTestInputs(face *imaging.Float) []*imaging.Float {
	s := face.W
	mirror := &imaging.Float{W: s, H: s, C: 3, Pix: make([]float32, len(face.Pix))}
	dark := &imaging.Float{W: s, H: s, C: 3, Pix: make([]float32, len(face.Pix))}
	check := &imaging.Float{W: s, H: s, C: 3, Pix: make([]float32, len(face.Pix))}
	for y := range s {
		for x := range s {
			for c := range 3 {
				i := (y*s+x)*3 + c
				mirror.Pix[i] = face.Pix[(y*s+s-1-x)*3+c]
				dark.Pix[i] = face.Pix[i] * 0.6
				if (x/4+y/4)%2 == 0 {
					check.Pix[i] = 255
				}
			}
		}
	}
	return []*imaging.Float{face, mirror, dark, faConst(s, 128), check}
}

// TestKernMatchesGraph checks each network's Go-kernel runner against the
// whole-graph path (the implementation the kernels replaced, itself checked
// against face-api) on five distinct inputs in one call (split over the
// cores and into chunks of 2 and 1).
func TestKernMatchesGraph(t *testing.T) {
	recog := loadFaRGB(t, "sample1_face0_recognition_input_150.rgb", DescriptorSize)
	lmIn := loadFaRGB(t, "sample1_face0_landmark_input_112.rgb", LandmarkSize)
	tests := []struct {
		name   string
		kern   func(t *testing.T) *netRunner
		graph  func(t *testing.T) (*netRunner, error)
		in     *imaging.Float
		maxAbs float64
	}{
		{"descriptor", func(t *testing.T) *netRunner { return testDescriptor(t).r },
			func(t *testing.T) (*netRunner, error) {
				return newNetRunner(testEngine(t), "descriptor", DescriptorSize, DescriptorDim, testDescriptor(t).w.build)
			}, recog, 1e-5},
		{"landmarks", func(t *testing.T) *netRunner { return testLandmarker(t, false).r },
			func(t *testing.T) (*netRunner, error) {
				return newNetRunner(testEngine(t), "landmarks", LandmarkSize, 136, testLandmarker(t, false).w.build)
			}, lmIn, 1e-5},
		{"landmarks tiny", func(t *testing.T) *netRunner { return testLandmarker(t, true).r },
			func(t *testing.T) (*netRunner, error) {
				return newNetRunner(testEngine(t), "landmarks", LandmarkSize, 136, testLandmarker(t, true).w.build)
			}, lmIn, 1e-5},
		{"age/gender", func(t *testing.T) *netRunner { return testAgeGender(t).r },
			func(t *testing.T) (*netRunner, error) {
				return newNetRunner(testEngine(t), "age_gender_model", AgeGenderSize, 3, testAgeGender(t).w.build)
			}, lmIn, 1e-4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.graph(t)
			if err != nil {
				t.Fatal(err)
			}
			inputs := kernTestInputs(tc.in)
			want, err := g.run(inputs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.kern(t).run(inputs)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for i := range want {
				for j := range want[i] {
					worst = max(worst, math.Abs(float64(got[i][j]-want[i][j])))
				}
			}
			t.Logf("largest difference kern vs graph: %.3g", worst)
			if worst > tc.maxAbs {
				t.Errorf("largest difference kern vs graph %.3g > %g", worst, tc.maxAbs)
			}
			if faL2(got[0], faF64(got[1])) < 1e-4 {
				t.Error("face and mirror gave the same output: inputs are not reaching the network")
			}
		})
	}
}

// TestKernIm2col checks the im2col kernel against a direct definition for
// both paddings, strides 1 and 2 and odd sizes.
func TestKernIm2col(t *testing.T) {
	tests := []struct {
		n, h, w, c, k, s int
		p                Padding
	}{
		{1, 5, 5, 2, 3, 1, Same}, {2, 6, 7, 3, 3, 2, Same}, {1, 7, 7, 3, 7, 2, Valid},
		{2, 9, 8, 4, 3, 2, Valid}, {1, 6, 6, 2, 1, 2, Same}, {1, 4, 4, 1, 3, 1, Same},
	}
	for _, tc := range tests {
		in := make([]float32, tc.n*tc.h*tc.w*tc.c)
		for i := range in {
			in[i] = float32(i + 1)
		}
		oh, pt, _ := outSize(tc.h, tc.k, tc.s, tc.p)
		ow, pl, _ := outSize(tc.w, tc.k, tc.s, tc.p)
		row := tc.k * tc.k * tc.c
		got := make([]float32, tc.n*oh*ow*row)
		for i := range got {
			got[i] = -1 // every value must be written
		}
		gh, gw := kernIm2col(newKernPar(nil), got, in, tc.n, tc.h, tc.w, tc.c, tc.k, tc.s, tc.p)
		if gh != oh || gw != ow {
			t.Fatalf("%+v: output %d×%d, want %d×%d", tc, gh, gw, oh, ow)
		}
		for img := range tc.n {
			for oy := range oh {
				for ox := range ow {
					for ky := range tc.k {
						for kx := range tc.k {
							for ch := range tc.c {
								iy, ix := oy*tc.s+ky-pt, ox*tc.s+kx-pl
								var want float32
								if iy >= 0 && iy < tc.h && ix >= 0 && ix < tc.w {
									want = in[((img*tc.h+iy)*tc.w+ix)*tc.c+ch]
								}
								g := got[((img*oh+oy)*ow+ox)*row+(ky*tc.k+kx)*tc.c+ch]
								if g != want {
									t.Fatalf("%+v: image %d out (%d,%d) tap (%d,%d) ch %d = %v, want %v", tc, img, oy, ox, ky, kx, ch, g, want)
								}
							}
						}
					}
				}
			}
		}
	}
}
