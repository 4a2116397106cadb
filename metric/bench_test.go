package metric

import (
	"context"
	"math/rand/v2"
	"testing"
)

// BenchmarkLMNN fits a 5,000-face, 128-d library (500 people × 10 faces)
// from a secret rotation with the default options.
func BenchmarkLMNN(b *testing.B) {
	rng := rand.New(rand.NewPCG(51, 52))
	d := synthFaces(rng, 500, 10, 128, 0.5)
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
		_, rep, err := l.Fit(context.Background(), d, rot)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rep.Iterations), "iterations")
		b.ReportMetric(float64(rep.Refreshes), "refreshes")
		b.ReportMetric(float64(rep.Final.Violations), "violations")
		b.ReportMetric(float64(rep.ActiveSetMisses), "misses")
	}
}
