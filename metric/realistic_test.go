package metric

import (
	"context"
	"math/rand/v2"
	"testing"
)

// On synthetic faceprint-like data (50 people, 128-d, unit-norm, shared
// nuisance directions stronger than the identity signal), LMNN from a secret
// rotation must improve held-out 3-NN accuracy over the Euclidean metric.
func TestLMNNImprovesHeldOutAccuracy(t *testing.T) {
	const classes, per, train = 50, 16, 6
	rng := rand.New(rand.NewPCG(41, 42))
	all := synthFaces(rng, classes, per, 128, 0.35)
	tr, te := split(all, per, train)
	rot, err := RandomRotation([32]byte{'k'}, 128)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLMNN(Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, rep, err := l.Fit(context.Background(), tr, rot)
	if err != nil {
		t.Fatal(err)
	}
	base := knnAccuracy(Identity(128), tr, te, 3)
	got := knnAccuracy(m, tr, te, 3)
	t.Logf("held-out 3-NN accuracy: Euclidean %.3f, LMNN %.3f (%d train, %d test faces); iterations %d, objective %.4g → %.4g, violations %d → %d, active-set misses %d",
		base, got, len(tr.X), len(te.X), rep.Iterations, rep.Initial.Objective, rep.Final.Objective, rep.Initial.Violations, rep.Final.Violations, rep.ActiveSetMisses)
	if got < base+0.15 {
		t.Errorf("LMNN held-out accuracy %.3f, Euclidean %.3f: want an improvement of at least 0.15", got, base)
	}
}

// The active set (Solver.Impostors nearest impostors, rebuilt every Refresh
// steps) must cost little against LMNN with every impostor in the set: the
// exact objective reached must be within 25% of the exact solver's and the
// held-out accuracy no worse by more than 2 points.
func TestLMNNActiveSetApproximation(t *testing.T) {
	const classes, per, train = 30, 12, 6
	rng := rand.New(rand.NewPCG(43, 44))
	all := synthFaces(rng, classes, per, 32, 0.5)
	tr, te := split(all, per, train)
	run := func(impostors int) (float64, *Report) {
		l, err := NewLMNN(Options{Solver: Solver{Impostors: impostors}})
		if err != nil {
			t.Fatal(err)
		}
		m, rep, err := l.Fit(context.Background(), tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		return knnAccuracy(m, tr, te, 3), rep
	}
	accA, repA := run(16)
	accE, repE := run(len(tr.X))
	t.Logf("16 impostors: objective %.4g, violations %d, misses %d, accuracy %.3f; all %d: objective %.4g, violations %d, accuracy %.3f",
		repA.Final.Objective, repA.Final.Violations, repA.ActiveSetMisses, accA, len(tr.X), repE.Final.Objective, repE.Final.Violations, accE)
	if repE.ActiveSetMisses != 0 {
		t.Errorf("with every impostor in the active set, %d misses", repE.ActiveSetMisses)
	}
	if repA.Final.Objective > 1.25*repE.Final.Objective || accA < accE-0.02 {
		t.Errorf("active set: objective %.4g vs %.4g exact, accuracy %.3f vs %.3f", repA.Final.Objective, repE.Final.Objective, accA, accE)
	}
}

// Retraining as names accumulate: a library trained on 3 named faces per
// person warm-starts from its previous V when 8 are named; the objective on
// the new names falls from where the old map left it and held-out accuracy
// does not get worse.
func TestLMNNRetrainWarmStart(t *testing.T) {
	const classes, per = 20, 14
	rng := rand.New(rand.NewPCG(45, 46))
	all := synthFaces(rng, classes, per, 32, 0.5)
	few, _ := split(all, per, 3)
	more, test := split(all, per, 8)
	rot, err := RandomRotation([32]byte{'r'}, 32)
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := fit(t, Options{}, few, rot)
	v2, rep := fit(t, Options{}, more, v1)
	a0, a1, a2 := knnAccuracy(Identity(32), more, test, 3), knnAccuracy(v1, more, test, 3), knnAccuracy(v2, more, test, 3)
	t.Logf("held-out 3-NN accuracy: Euclidean %.3f, trained on 3 names/person %.3f, retrained on 8 %.3f; retraining objective %.4g → %.4g in %d iterations",
		a0, a1, a2, rep.Initial.Objective, rep.Final.Objective, rep.Iterations)
	if rep.Final.Objective >= rep.Initial.Objective {
		t.Errorf("retraining did not lower the objective: %v → %v", rep.Initial.Objective, rep.Final.Objective)
	}
	if a2 < a1 || a1 <= a0 {
		t.Errorf("accuracy Euclidean %.3f, first map %.3f, retrained %.3f", a0, a1, a2)
	}
}
