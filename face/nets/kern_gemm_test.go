package nets

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/internal/engine"
)

// TestKernGemm checks the Go product against a float64 reference on
// shapes that exercise every path: row counts that are not a multiple of
// the 4-row block, column counts below, at and above a 16-column panel
// with a tail, and products large enough to be split over the cores.
func TestKernGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{1, 1, 1}, {3, 7, 5}, {4, 9, 16}, {5, 27, 16}, {13, 33, 40}, {1225, 288, 32}, {81, 1152, 128}, {9, 2304, 256}, {2, 256, 136}} {
		m, k, n := s[0], s[1], s[2]
		t.Run(fmt.Sprintf("%dx%dx%d", m, k, n), func(t *testing.T) {
			a := make([]float32, m*k)
			w := make([]float32, k*n)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			y := make([]float32, m*n)
			for i := range y {
				y[i] = float32(math.NaN()) // every value must be written
			}
			newKernGemm(w, k, n).mul(newKernPar(nil), y, a, m)
			for i := range m {
				for j := range n {
					s := 0.0
					for t := range k {
						s += float64(a[i*k+t]) * float64(w[t*n+j])
					}
					if d := math.Abs(float64(y[i*n+j]) - s); !(d <= 1e-5*(math.Sqrt(float64(k))+math.Abs(s))) {
						t.Fatalf("y[%d][%d] = %g, want %g", i, j, y[i*n+j], s)
					}
				}
			}
		})
	}
}

// BenchmarkKernGemm compares the Go product (one core) with GoMLX's (which
// may use both) on the descriptor's product shapes, in processor time.
func BenchmarkKernGemm(b *testing.B) {
	eng, err := engine.New(engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	be := eng.Backend()
	for _, s := range [][3]int{{5184, 147, 32}, {1225, 288, 32}, {289, 576, 64}, {81, 1152, 128}, {25, 2304, 256}} {
		m, k, n := s[0], s[1], s[2]
		a := make([]float32, m*k)
		w := make([]float32, k*n)
		for i := range a {
			a[i] = float32(i%7) - 3
		}
		for i := range w {
			w[i] = float32(i%5) - 2
		}
		flops := 2 * float64(m*k*n)
		b.Run(fmt.Sprintf("go/%dx%dx%d", m, k, n), func(b *testing.B) {
			g := newKernGemm(w, k, n)
			y := make([]float32, m*n)
			cpu0 := cpuTime()
			for range b.N {
				g.rows(y, a, m)
			}
			b.ReportMetric(flops*float64(b.N)/(cpuTime()-cpu0).Seconds()/1e9, "GFLOP/cpu-s")
		})
		b.Run(fmt.Sprintf("gomlx/%dx%dx%d", m, k, n), func(b *testing.B) {
			exec, err := graph.NewExec(be, func(x *graph.Node) *graph.Node {
				return graph.Dot(x, graph.Const(x.Graph(), tensors.FromFlatDataAndDimensions(w, k, n))).Product()
			})
			if err != nil {
				b.Fatal(err)
			}
			x := tensors.FromFlatDataAndDimensions(a, m, k)
			cpu0 := cpuTime()
			for range b.N {
				out, err := exec.Call(x)
				if err != nil {
					b.Fatal(err)
				}
				_ = out[0].FinalizeAll()
			}
			b.ReportMetric(flops*float64(b.N)/(cpuTime()-cpu0).Seconds()/1e9, "GFLOP/cpu-s")
		})
	}
}
