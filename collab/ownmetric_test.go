package collab

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/metric"
)

// TestOwnMetricLowersItsUsersLoss: per-user metric tuning (Irene's
// Fig. 9 comparison) lowers its own user's training loss on the named
// faces, and a library without two named people, or without a person
// named twice, learns none.
func TestOwnMetricLowersItsUsersLoss(t *testing.T) {
	lm, err := metric.NewLMNN(metric.Options{Solver: metric.Solver{Iterations: 30, Workers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	l := synthLibrary(rand.New(rand.NewPCG(4, 4)), 6, 6, 5)
	for _, tc := range []struct {
		name  string
		named int
		only  int // -1: every person; else only this person named
		fits  bool
	}{
		{"3 named photos", 3, -1, true},
		{"2 named photos", 2, -1, true},
		{"1 named photo", 1, -1, false},
		{"one person named", 3, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isNamed := chooseNamed(l, tc.named, rand.New(rand.NewPCG(1, 1)))
			if tc.only >= 0 {
				for i, p := range l.Person {
					isNamed[i] = isNamed[i] && p == tc.only
				}
			}
			m, rep, named, unnamed, err := OwnMetric(context.Background(), lm, l.Descs, l.Person, isNamed)
			if err != nil {
				t.Fatal(err)
			}
			if len(named)+len(unnamed) != len(l.Descs) {
				t.Fatalf("%d named and %d unnamed faces of %d", len(named), len(unnamed), len(l.Descs))
			}
			if (m != nil) != tc.fits {
				t.Fatalf("metric learned: %v, want %v", m != nil, tc.fits)
			}
			if !tc.fits {
				return
			}
			if !(rep.Final.Objective < rep.Initial.Objective) {
				t.Fatalf("own training loss %g before, %g after", rep.Initial.Objective, rep.Final.Objective)
			}
		})
	}
}
