package metric

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/internal/vec"
)

// gridTask returns classes on the 2×2 grid spanned by input dimensions a and
// b (unit spacing, sd 0.1), with sd noise in every other dimension of dim.
func gridTask(rng *rand.Rand, dim, a, b, n int, noise float64) Data {
	var d Data
	for c := range 4 {
		for range n {
			x := make([]float64, dim)
			for i := range x {
				x[i] = noise * rng.NormFloat64()
			}
			x[a] = float64(c&1) + 0.1*rng.NormFloat64()
			x[b] = float64(c>>1) + 0.1*rng.NormFloat64()
			d.X = append(d.X, x)
			d.Labels = append(d.Labels, c)
		}
	}
	return d
}

// knnAccuracy is the leave-nothing-out k-NN accuracy of test points against
// train points under m.
func knnAccuracy(m *Metric, train, test Data, k int) float64 {
	tz := make([][]float64, len(train.X))
	for i, x := range train.X {
		tz[i] = m.Transform(nil, x)
	}
	correct := 0
	for i, x := range test.X {
		z := m.Transform(nil, x)
		var h nearest
		h.reset(k)
		for j := range tz {
			h.offer(vec.SqDist(z, tz[j]), int32(j))
		}
		votes := map[int]int{}
		best, bestN := -1, 0
		for _, j := range h.sorted() { // nearest first: ties go to the nearer
			l := train.Labels[j]
			votes[l]++
			if votes[l] > bestN {
				best, bestN = l, votes[l]
			}
		}
		if best == test.Labels[i] {
			correct++
		}
	}
	return float64(correct) / float64(len(test.X))
}

func diag(w []float64, d int) []float64 {
	r := make([]float64, d)
	for i := range d {
		r[i] = w[i*d+i]
	}
	return r
}

// Two tasks share input dimension 0 (useful to both) and dimension 3 (noise
// to both); dimension 1 is useful only to task A and dimension 2 only to
// task B. W₀ must keep 0 and drop 3; each W_k must favour its own dimension.
// Then, with W₀ fixed, a new task C on dimensions 0 and 3 learns its own W_C.
func TestMTLMNNSharedAndPrivate(t *testing.T) {
	for _, gamma := range []float64{1, 20} { // the paper's weight, and private parts held small
		t.Run(fmt.Sprintf("γ=%v", gamma), func(t *testing.T) { testMTLMNNSharedAndPrivate(t, gamma) })
	}
}

func testMTLMNNSharedAndPrivate(t *testing.T, gamma float64) {
	rng := rand.New(rand.NewPCG(3, 4))
	const dim = 4
	a := gridTask(rng, dim, 0, 1, 25, 1)
	b := gridTask(rng, dim, 0, 2, 25, 1)
	l, err := NewMTLMNN(MTOptions{Gamma: gamma})
	if err != nil {
		t.Fatal(err)
	}
	model, rep, err := l.Fit(context.Background(), []Task{{Data: a}, {Data: b}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w0 := diag(model.Shared.Mahalanobis(), dim)
	wa := diag(model.Tasks[0].Mahalanobis(), dim)
	wb := diag(model.Tasks[1].Mahalanobis(), dim)
	t.Logf("diag W0 %.3g, WA %.3g, WB %.3g; iterations %d; losses %+v → %+v", w0, wa, wb, rep.Iterations, rep.Initial, rep.Final)
	if w0[0] < 10*w0[3] {
		t.Errorf("W0 does not favour the shared signal over the shared noise: %.3g", w0)
	}
	if wa[1] < 3*wa[2] || wb[2] < 3*wb[1] {
		t.Errorf("private metrics do not favour their own dimension: WA %.3g, WB %.3g", wa, wb)
	}
	for k, ls := range rep.Final {
		if ls.Objective >= rep.Initial[k].Objective {
			t.Errorf("task %d objective %v → %v did not decrease", k, rep.Initial[k].Objective, ls.Objective)
		}
	}

	// New task C, W0 held fixed.
	c := gridTask(rng, dim, 0, 3, 25, 1)
	cTest := gridTask(rng, dim, 0, 3, 25, 1)
	before := model.Shared.Matrix()
	mc, repC, err := l.FitTask(context.Background(), model.Shared, Task{Data: c})
	if err != nil {
		t.Fatal(err)
	}
	if mc.Shared != model.Shared {
		t.Error("FitTask replaced the shared map")
	}
	for i, v := range model.Shared.Matrix() {
		if v != before[i] {
			t.Fatal("FitTask changed the shared map")
		}
	}
	wc := diag(mc.Tasks[0].Mahalanobis(), dim)
	mC, err := mc.Task(0)
	if err != nil {
		t.Fatal(err)
	}
	accShared := knnAccuracy(model.Shared, c, cTest, 3)
	accC := knnAccuracy(mC, c, cTest, 3)
	t.Logf("task C: diag WC %.3g; held-out 3-NN accuracy W0 %.3f, W0+WC %.3f; iterations %d", wc, accShared, accC, repC.Iterations)
	if wc[3] < 3*wc[1] || wc[3] < 3*wc[2] {
		t.Errorf("W_C does not favour task C's own dimension 3: %.3g", wc)
	}
	if accC < accShared+0.1 || accC < 0.9 {
		t.Errorf("held-out accuracy W0 %.3f, W0+WC %.3f: the private metric did not help enough", accShared, accC)
	}
}
