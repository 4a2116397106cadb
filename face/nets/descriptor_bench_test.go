package nets

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// benchNet runs one network's benchmarks: single-core chunks of several
// batch sizes (one execution at a time), Compute on a batch of 8 (which
// spreads over the cores), and two goroutines each computing one input at
// a time. Every case reports inputs per second.
// cpuTime returns the process's user+system CPU time. The machine is
// shared, so wall-clock rates vary with other load; CPU time per input is
// the steadier figure.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report adds inputs/s (wall clock) and CPU milliseconds per input.
func report(b *testing.B, n int, cpu0 time.Duration) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "inputs/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(n), "cpu-ms/input")
}

func benchNet(b *testing.B, r *netRunner, in *imaging.Float) {
	for _, bs := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("core1/batch=%d", bs), func(b *testing.B) {
			inputs := make([]*imaging.Float, bs)
			for i := range inputs {
				inputs[i] = in
			}
			out := make([][]float32, bs)
			if err := r.runChunk(inputs, out); err != nil { // compile
				b.Fatal(err)
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				if err := r.runChunk(inputs, out); err != nil {
					b.Fatal(err)
				}
			}
			report(b, bs*b.N, cpu0)
		})
	}
	b.Run("compute/batch=8", func(b *testing.B) {
		inputs := make([]*imaging.Float, 8)
		for i := range inputs {
			inputs[i] = in
		}
		if _, err := r.run(inputs); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		cpu0 := cpuTime()
		for range b.N {
			if _, err := r.run(inputs); err != nil {
				b.Fatal(err)
			}
		}
		report(b, 8*b.N, cpu0)
	})
	b.Run("parallel2/batch=1", func(b *testing.B) {
		if _, err := r.run([]*imaging.Float{in}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		cpu0 := cpuTime()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < b.N; i += 2 {
					if _, err := r.run([]*imaging.Float{in}); err != nil {
						errs[g] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		report(b, b.N, cpu0)
	})
}

// BenchmarkDescriptor compares the Go-kernel runner (kern) with the
// whole-graph reference path (graph) in the same run.
func BenchmarkDescriptor(b *testing.B) {
	d := testDescriptor(b)
	in := loadFaRGB(b, "sample1_face0_recognition_input_150.rgb", DescriptorSize)
	b.Run("kern", func(b *testing.B) { benchNet(b, d.r, in) })
	b.Run("graph", func(b *testing.B) {
		g, err := newNetRunner(testEngine(b), "descriptor", DescriptorSize, DescriptorDim, d.w.build)
		if err != nil {
			b.Fatal(err)
		}
		benchNet(b, g, in)
	})
}

func BenchmarkLandmarks(b *testing.B) {
	in := loadFaRGB(b, "sample1_face0_landmark_input_112.rgb", LandmarkSize)
	for _, tc := range []struct {
		name string
		tiny bool
	}{{"full", false}, {"tiny", true}} {
		l := testLandmarker(b, tc.tiny)
		b.Run(tc.name+"/kern", func(b *testing.B) { benchNet(b, l.r, in) })
		b.Run(tc.name+"/graph", func(b *testing.B) {
			g, err := newNetRunner(testEngine(b), "landmarks", LandmarkSize, 136, l.w.build)
			if err != nil {
				b.Fatal(err)
			}
			benchNet(b, g, in)
		})
	}
}

func BenchmarkAgeGender(b *testing.B) {
	in := loadFaRGB(b, "sample1_face0_landmark_input_112.rgb", AgeGenderSize)
	a := testAgeGender(b)
	b.Run("kern", func(b *testing.B) { benchNet(b, a.r, in) })
	b.Run("graph", func(b *testing.B) {
		g, err := newNetRunner(testEngine(b), "age_gender_model", AgeGenderSize, 3, a.w.build)
		if err != nil {
			b.Fatal(err)
		}
		benchNet(b, g, in)
	})
}

// testEngine returns a new default engine for the whole-graph reference
// runners.
func testEngine(tb testing.TB) *engine.Engine {
	tb.Helper()
	eng, err := engine.New(engine.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return eng
}
