package nets

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// parNet is one network built on an engine, with the kernPar its kernels
// use and one forward pass to run.
type parNet struct {
	name string
	// build loads the network on eng and returns its kernPar and a pass
	// over fixed inputs returning every output value.
	build func(t *testing.T, eng *engine.Engine) (*kernPar, func() ([]float32, error))
}

// parInputs returns n fixed pseudo-random size×size×3 inputs (0..255).
func parInputs(n, size int) []*imaging.Float {
	r := rand.New(rand.NewPCG(uint64(size), uint64(n)))
	ins := make([]*imaging.Float, n)
	for i := range ins {
		pix := make([]float32, size*size*3)
		for j := range pix {
			pix[j] = float32(r.IntN(256))
		}
		ins[i] = &imaging.Float{W: size, H: size, C: 3, Pix: pix}
	}
	return ins
}

func parNets() []parNet {
	return []parNet{
		{"tiny", func(t *testing.T, eng *engine.Engine) (*kernPar, func() ([]float32, error)) {
			d, err := NewTiny(detModelDir(t), eng)
			if err != nil {
				t.Fatal(err)
			}
			in := parInputs(1, 320)[0]
			return d.par, func() ([]float32, error) { return d.Raw(in) }
		}},
		{"ssd", func(t *testing.T, eng *engine.Engine) (*kernPar, func() ([]float32, error)) {
			d, err := NewSSD(detModelDir(t), eng)
			if err != nil {
				t.Fatal(err)
			}
			in := parInputs(1, 512)[0]
			return d.par, func() ([]float32, error) {
				scores, boxes, err := d.Raw(in)
				for _, b := range boxes {
					scores = append(scores, b[:]...)
				}
				return scores, err
			}
		}},
		runnerNet("descriptor", DescriptorSize, func(dir string, eng *engine.Engine) (*netRunner, error) {
			d, err := NewDescriptor(dir, eng)
			if err != nil {
				return nil, err
			}
			return d.r, nil
		}),
		runnerNet("landmarks", LandmarkSize, func(dir string, eng *engine.Engine) (*netRunner, error) {
			l, err := NewLandmarker(dir, false, eng)
			if err != nil {
				return nil, err
			}
			return l.r, nil
		}),
		runnerNet("age_gender", AgeGenderSize, func(dir string, eng *engine.Engine) (*netRunner, error) {
			a, err := NewAgeGenderOn(dir, eng)
			if err != nil {
				return nil, err
			}
			return a.feat, nil
		}),
	}
}

// runnerNet is a parNet for a network behind a netRunner (load returns
// it): one pass runs five inputs, so the runner splits them too.
func runnerNet(name string, size int, load func(dir string, eng *engine.Engine) (*netRunner, error)) parNet {
	return parNet{name, func(t *testing.T, eng *engine.Engine) (*kernPar, func() ([]float32, error)) {
		r, err := load(detModelDir(t), eng)
		if err != nil {
			t.Fatal(err)
		}
		ins := parInputs(5, size)
		return r.par, func() ([]float32, error) {
			out, err := r.run(ins)
			return slices.Concat(out...), err
		}
	}}
}

// TestKernelsUseTheEnginesParallelism builds every network on engines that
// pin 1, 2 and 3 workers (whatever GOMAXPROCS is) and checks, through the
// kernPar hook, that no parallel loop of a pass runs on more goroutines
// than the engine pins, that the passes' large loops use all of them, and
// that the outputs are bit-identical for every worker count: each output
// value is computed the same way whatever the split. Before the engine was
// passed down, the kernels took GOMAXPROCS workers whatever the engine
// said.
func TestKernelsUseTheEnginesParallelism(t *testing.T) {
	for _, net := range parNets() {
		t.Run(net.name, func(t *testing.T) {
			var want []float32
			for _, workers := range []int{1, 2, 3} {
				eng, err := engine.New(engine.Options{Parallelism: workers})
				if err != nil {
					t.Fatal(err)
				}
				par, pass := net.build(t, eng)
				var mu sync.Mutex
				loops, most := 0, 0
				par.started = func(g int) {
					mu.Lock()
					defer mu.Unlock()
					loops++
					most = max(most, g)
				}
				got, err := pass()
				if err != nil {
					t.Fatal(err)
				}
				if loops == 0 {
					t.Fatalf("workers %d: no parallel loop reported", workers)
				}
				if most != workers {
					t.Errorf("workers %d: the widest loop of %d ran on %d goroutines, want %d", workers, loops, most, workers)
				}
				if want == nil {
					want = got
					continue
				}
				if len(got) != len(want) {
					t.Fatalf("workers %d: %d outputs, want %d", workers, len(got), len(want))
				}
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("workers %d: output %d = %v, with 1 worker %v (want bit-identical)", workers, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestKernParFor checks the split rule: the whole range once, on the
// calling goroutine, for one worker or little work, else at most workers
// ranges that cover [0, n) once.
func TestKernParFor(t *testing.T) {
	tests := []struct {
		name              string
		workers, n, per   int
		wantMaxGoroutines int
	}{
		{"one worker", 1, 1000, kernParMinWork, 1},
		{"little work", 4, 10, 10, 1},
		{"two workers", 2, 1000, kernParMinWork, 2},
		{"more workers than cores", 5, 1000, kernParMinWork, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got atomic.Int64
			p := &kernPar{workers: tc.workers, started: func(g int) { got.Store(int64(g)) }}
			seen := make([]atomic.Int32, tc.n)
			p.For(tc.n, tc.per, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			if int(got.Load()) != tc.wantMaxGoroutines {
				t.Errorf("ran on %d goroutines, want %d", got.Load(), tc.wantMaxGoroutines)
			}
			for i := range seen {
				if seen[i].Load() != 1 {
					t.Fatalf("index %d computed %d times", i, seen[i].Load())
				}
			}
		})
	}
}
