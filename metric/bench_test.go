package metric

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkLMNN fits a 128-d library of 10 faces per person (1,000 and
// 5,000 faces) from a secret rotation with the default options, and reports
// held-out 3-NN accuracy (5 more faces per person) under the Euclidean and
// the learned metric (measured outside the timer).
func BenchmarkLMNN(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("faces=%d", n), func(b *testing.B) { benchLMNN(b, n) })
	}
}

func benchLMNN(b *testing.B, n int) {
	rng := rand.New(rand.NewPCG(51, 52))
	all := synthFaces(rng, n/10, 15, 128, 0.5)
	d, test := split(all, 15, 10)
	rot, err := RandomRotation([32]byte{'b'}, 128)
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewLMNN(Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		m, rep, err := l.Fit(context.Background(), d, rot)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(knnAccuracy(Identity(128), d, test, 3), "acc-euclid")
		b.ReportMetric(knnAccuracy(m, d, test, 3), "acc-lmnn")
		b.StartTimer()
		b.ReportMetric(float64(rep.Iterations), "iterations")
		b.ReportMetric(float64(rep.Refreshes), "refreshes")
		b.ReportMetric(float64(rep.Final.Violations), "violations")
		b.ReportMetric(float64(rep.ActiveSetMisses), "misses")
	}
}
