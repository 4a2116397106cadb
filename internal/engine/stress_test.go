package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// Shapes of the stress graph. The products are small enough for the
// backend's small matrix-product kernel and batched (batch > 1), so that
// kernel splits its work over the worker pool (Saturate); the convolutions
// have at least 512 outputs, so they split theirs too (WaitToStart).
const (
	mmBatch     = 4
	mmRows      = 16
	mmInner     = 32
	mmCols      = 32
	convBatch   = 2
	convSize    = 10 // input height and width; 3x3 kernel, no padding
	convIn      = 8
	convOut     = 8
	convOutSize = convSize - 2
)

// stressBranches is how many matrix products and how many convolutions the
// stress graph holds, all ready to run at once: twice the backend's
// 2·GOMAXPROCS worker-pool slots, more than it takes to deadlock compute
// v0.1.3 when it runs independent operations in parallel (see goConfig).
func stressBranches() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

// stressGraph returns a graph of n independent batched matrix products
// x·(w+i) and n independent convolutions img*(k+i), i < n, whose outputs are
// the sums of every branch's output, one scalar per branch.
func stressGraph(n int) func(x, w, img, k *graph.Node) []*graph.Node {
	return func(x, w, img, k *graph.Node) []*graph.Node {
		var out []*graph.Node
		for i := range n {
			out = append(out, graph.ReduceAllSum(graph.Einsum("bij,bjk->bik", x, graph.AddScalar(w, float64(i)))))
		}
		for i := range n {
			out = append(out, graph.ReduceAllSum(graph.Convolve(img, graph.AddScalar(k, float64(i))).NoPadding().Done()))
		}
		return out
	}
}

// stressWant computes stressGraph's outputs in float64 with plain loops,
// and for each the sum of the absolute values of its terms (to scale the
// float32 rounding tolerance).
func stressWant(n int, x, w, img, k []float32) (want, scale []float64) {
	for i := range n {
		var s, a float64
		for b := range mmBatch {
			for r := range mmRows {
				for c := range mmCols {
					for j := range mmInner {
						p := float64(x[(b*mmRows+r)*mmInner+j]) * (float64(w[(b*mmInner+j)*mmCols+c]) + float64(i))
						s += p
						a += math.Abs(p)
					}
				}
			}
		}
		want, scale = append(want, s), append(scale, a)
	}
	for i := range n {
		var s, a float64
		for b := range convBatch {
			for y := range convOutSize {
				for xx := range convOutSize {
					for o := range convOut {
						for dy := range 3 {
							for dx := range 3 {
								for c := range convIn {
									v := img[((b*convSize+y+dy)*convSize+xx+dx)*convIn+c]
									kv := k[((dy*3+dx)*convIn+c)*convOut+o]
									p := float64(v) * (float64(kv) + float64(i))
									s += p
									a += math.Abs(p)
								}
							}
						}
					}
				}
			}
		}
		want, scale = append(want, s), append(scale, a)
	}
	return want, scale
}

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.Float64()*2 - 1)
	}
	return v
}

// TestExecutionsDoNotDeadlock runs a graph with many independent matrix
// products and convolutions many times, first from one goroutine and then
// from Parallelism() goroutines at once (as Veil's callers do), on a backend
// configured like Backend's, and checks every result. Each call must finish
// within stallLimit, or the test fails with the stuck goroutines' stacks.
//
// On compute v0.1.3 with its default configuration this graph deadlocks
// the worker pool within the first few calls (issue 13); with goConfig it
// cannot (see goConfig for the cycle). The backend is the test's own, so a
// deadlock here cannot stall the other tests of the package.
func TestExecutionsDoNotDeadlock(t *testing.T) {
	const (
		loneCalls       = 150
		concurrentCalls = 300 // in all, shared by the concurrent callers
		stallLimit      = 20 * time.Second
	)
	be, err := newBackend("")
	if err != nil {
		t.Fatal(err)
	}
	n := stressBranches()
	exec, err := graph.NewExec(be, stressGraph(n))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(13, 1))
	xv := randFloats(r, mmBatch*mmRows*mmInner)
	wv := randFloats(r, mmBatch*mmInner*mmCols)
	imgv := randFloats(r, convBatch*convSize*convSize*convIn)
	kv := randFloats(r, 3*3*convIn*convOut)
	want, scale := stressWant(n, xv, wv, imgv, kv)
	x := tensors.FromFlatDataAndDimensions(xv, mmBatch, mmRows, mmInner)
	w := tensors.FromFlatDataAndDimensions(wv, mmBatch, mmInner, mmCols)
	img := tensors.FromFlatDataAndDimensions(imgv, convBatch, convSize, convSize, convIn)
	k := tensors.FromFlatDataAndDimensions(kv, 3, 3, convIn, convOut)

	call := func() error {
		out, err := exec.Call(x, w, img, k)
		if err != nil {
			return err
		}
		for i, o := range out {
			got := float64(tensors.MustCopyFlatData[float32](o)[0])
			// float32 products and sums: a relative error of 1e-5 of the
			// terms' magnitude is about 100 roundings, far above what
			// these few-thousand-term sums accumulate.
			if math.Abs(got-want[i]) > 1e-5*scale[i] {
				return fmt.Errorf("output %d = %g, want %g", i, got, want[i])
			}
		}
		return nil
	}
	workers := max(Parallelism(), 2)
	for _, phase := range []struct {
		name           string
		workers, calls int
	}{
		{"one caller", 1, loneCalls},
		{fmt.Sprintf("%d concurrent callers", workers), workers, concurrentCalls / workers},
	} {
		if err := hammer(phase.workers, phase.calls, stallLimit, call); err != nil {
			t.Fatalf("%s: %v", phase.name, err)
		}
	}
}

// hammer calls call calls times from each of workers goroutines. It returns
// the first error, or, if no call finishes for stall, an error carrying the
// stacks of the goroutines inside GoMLX (the hung goroutines are left
// behind: a deadlocked goroutine cannot be stopped).
func hammer(workers, calls int, stall time.Duration, call func() error) error {
	progress := make(chan struct{}, workers)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				if err := call(); err != nil {
					errs <- err
					return
				}
				progress <- struct{}{}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(stall)
	defer timer.Stop()
	finished := 0
	for {
		select {
		case <-done:
			select {
			case err := <-errs:
				return err
			default:
				return nil
			}
		case err := <-errs:
			return err
		case <-progress:
			finished++
			timer.Reset(stall)
		case <-timer.C:
			return fmt.Errorf("no call finished for %v after %d of %d calls: deadlock? goroutines in the engine:\n%s",
				stall, finished, workers*calls, engineStacks())
		}
	}
}

// engineStacks returns the stacks of every goroutine whose stack passes
// through GoMLX's compute backend.
func engineStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var keep []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/gomlx/compute") {
			keep = append(keep, g)
		}
	}
	return strings.Join(keep, "\n\n")
}
