package nets

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/internal/engine"
)

// refConv is a direct TensorFlow-semantics convolution used to check conv2d
// and depthwise. depthwise: w is [k,k,C,1] and each channel uses its own filter.
func refConv(x []float32, h, w, c int, k []float32, ks, cout, s int, p Padding, dw bool) ([]float32, int, int) {
	oh, pt, _ := outSize(h, ks, s, p)
	ow, pl, _ := outSize(w, ks, s, p)
	if dw {
		cout = c
	}
	out := make([]float32, oh*ow*cout)
	for oy := 0; oy < oh; oy++ {
		for ox := 0; ox < ow; ox++ {
			for co := 0; co < cout; co++ {
				var sum float64
				for ky := 0; ky < ks; ky++ {
					for kx := 0; kx < ks; kx++ {
						iy, ix := oy*s+ky-pt, ox*s+kx-pl
						if iy < 0 || ix < 0 || iy >= h || ix >= w {
							continue
						}
						if dw {
							sum += float64(x[(iy*w+ix)*c+co]) * float64(k[(ky*ks+kx)*c+co])
							continue
						}
						for ci := 0; ci < c; ci++ {
							sum += float64(x[(iy*w+ix)*c+ci]) * float64(k[((ky*ks+kx)*c+ci)*cout+co])
						}
					}
				}
				out[(oy*ow+ox)*cout+co] = float32(sum)
			}
		}
	}
	return out, oh, ow
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func TestConvAndDepthwiseMatchReference(t *testing.T) {
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := eng.Backend()
	r := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name          string
		h, w, c, cout int
		k, s          int
		p             Padding
		dw            bool
	}{
		{"3x3 same s1", 7, 6, 3, 4, 3, 1, Same, false},
		{"3x3 same s2 odd", 7, 7, 2, 3, 3, 2, Same, false},
		{"3x3 same s2 even", 8, 6, 2, 3, 3, 2, Same, false},
		{"7x7 valid s2", 15, 15, 3, 2, 7, 2, Valid, false},
		{"3x3 valid s2", 9, 8, 2, 2, 3, 2, Valid, false},
		{"1x1", 4, 5, 3, 6, 1, 1, Same, false},
		{"dw 3x3 same s1", 6, 7, 4, 0, 3, 1, Same, true},
		{"dw 3x3 same s2", 7, 8, 3, 0, 3, 2, Same, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := randVec(r, tc.h*tc.w*tc.c)
			kn := tc.k * tc.k * tc.c * tc.cout
			kshape := []int{tc.k, tc.k, tc.c, tc.cout}
			if tc.dw {
				kn, kshape = tc.k*tc.k*tc.c, []int{tc.k, tc.k, tc.c, 1}
			}
			kw := randVec(r, kn)
			want, oh, ow := refConv(x, tc.h, tc.w, tc.c, kw, tc.k, tc.cout, tc.s, tc.p, tc.dw)
			out, err := graph.NewExec(be, func(xn, kn *graph.Node) *graph.Node {
				if tc.dw {
					return depthwise(xn, kn, nil, tc.s, tc.p)
				}
				return conv2d(xn, kn, nil, tc.s, tc.p)
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := out.Call(tensors.FromFlatDataAndDimensions(x, 1, tc.h, tc.w, tc.c),
				tensors.FromFlatDataAndDimensions(kw, kshape...))
			if err != nil {
				t.Fatal(err)
			}
			if d := res[0].Shape().Dimensions; d[1] != oh || d[2] != ow {
				t.Fatalf("output %v, want %dx%d", d, oh, ow)
			}
			got := tensors.MustCopyFlatData[float32](res[0])
			for i := range want {
				if math.Abs(float64(got[i]-want[i])) > 1e-4 {
					t.Fatalf("value %d: got %v want %v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestMaxPoolSameIgnoresPadding(t *testing.T) {
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := eng.Backend()
	// All-negative input: a zero-padded pool would return 0 at the border.
	x := []float32{-5, -4, -3, -2, -1, -6, -7, -8, -9}
	exec, err := graph.NewExec(be, func(xn *graph.Node) *graph.Node { return maxPool(xn, 3, 2, Same) })
	if err != nil {
		t.Fatal(err)
	}
	res, err := exec.Call(tensors.FromFlatDataAndDimensions(x, 1, 3, 3, 1))
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float32](res[0])
	want := []float32{-1, -1, -1, -1} // out 2x2; windows centred with pad 1 before/after
	if len(got) != 4 {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("maxPool SAME = %v, want %v", got, want)
		}
	}
}
