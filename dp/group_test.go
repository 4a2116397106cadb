package dp_test

import (
	"math"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
)

func sgEvent(t *testing.T, q, sigma float64, steps int) dp.Event {
	t.Helper()
	e, err := dp.SubsampledGaussianEvent(q, sigma, steps)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A person in k clients' data: when every client ran the same DP-SGD
// schedule the composition of k clients is one schedule of k times the
// steps, which ScheduleEpsilon computes on its own (one event, one
// accountant); the figure must match it, and must be well below k times
// one client's ε (RDP composes sublinearly) and above one client's.
func TestPartiesEpsilonsMatchesOneLongSchedule(t *testing.T) {
	const q, sigma, steps, delta = 0.05, 1.1, 40, 1e-5
	n := 6
	parties := make([][]dp.Event, n)
	for i := range parties {
		// Two rounds of 20 steps each, as a client's ledger holds them.
		parties[i] = []dp.Event{sgEvent(t, q, sigma, steps/2), sgEvent(t, q, sigma, steps/2)}
	}
	ks := []int{1, 2, 3, 4, 5, 6}
	got, err := dp.PartiesEpsilons(parties, ks, delta, nil)
	if err != nil {
		t.Fatal(err)
	}
	one, _, err := dp.ScheduleEpsilon(q, sigma, steps, delta)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		k := ks[i]
		want, _, err := dp.ScheduleEpsilon(q, sigma, k*steps, delta)
		if err != nil {
			t.Fatal(err)
		}
		if g.K != k || !g.Exact || math.Abs(g.Epsilon-want) > 1e-9*want {
			t.Errorf("k = %d: got %+v, want ε = %.10g exactly", k, g, want)
		}
		if k > 1 && !(g.Epsilon < float64(k)*one && g.Epsilon > one) {
			t.Errorf("k = %d: ε = %g is not between one client's %g and k times it %g", k, g.Epsilon, one, float64(k)*one)
		}
		t.Logf("k = %d: ε = %.4f (k·ε₁ = %.4f)", k, g.Epsilon, float64(k)*one)
	}
}

// With clients that ran different mechanisms, the figure for k clients is
// never below the composition of any k clients' events (each set
// composed on its own accountant), equals the worst set for k = 1 and k =
// n, and, where it says Exact, equals the worst set.
func TestPartiesEpsilonsBoundsEverySubset(t *testing.T) {
	const delta = 1e-6
	parties := [][]dp.Event{
		{sgEvent(t, 0.01, 0.8, 300)},                           // many steps, little noise, small q
		{sgEvent(t, 0.2, 2.5, 20)},                             // few steps, large q, much noise
		{sgEvent(t, 0.05, 1.0, 50), sgEvent(t, 0.05, 1.5, 50)}, // two phases
		{}, // enrolled, never charged
		{sgEvent(t, 0.1, 1.2, 60), mustGaussian(t, 5.0, 3)},    // mixed
		{sgEvent(t, 0.01, 0.8, 300)},                           // same as the first
		{sgEvent(t, 0.5, 4.0, 10), sgEvent(t, 0.01, 0.7, 100)}, // mixed again
	}
	n := len(parties)
	ks := make([]int, n)
	for i := range ks {
		ks[i] = i + 1
	}
	got, err := dp.PartiesEpsilons(parties, ks, delta, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Each party's curve on its own accountant; a set's composition is
	// the sum of its parties' curves (Rényi DP adds), converted.
	orders := dp.DefaultOrders()
	curves := make([][]float64, n)
	for i, evs := range parties {
		a, err := dp.NewAccountant(orders)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 {
			if err := a.Add(evs...); err != nil {
				t.Fatal(err)
			}
		}
		curves[i] = a.RDP()
	}
	for _, g := range got {
		worst := 0.0
		subsets(n, g.K, func(set []int) {
			sum := make([]float64, len(orders))
			for _, i := range set {
				for j, r := range curves[i] {
					sum[j] += r
				}
			}
			e, _, err := dp.RDPToDP(orders, sum, delta)
			if err != nil {
				t.Fatal(err)
			}
			worst = math.Max(worst, e)
		})
		if g.Epsilon < worst*(1-1e-12) {
			t.Errorf("k = %d: ε = %.10g is below the worst set of %d clients, %.10g", g.K, g.Epsilon, g.K, worst)
		}
		if (g.K == 1 || g.K == n || g.Exact) && math.Abs(g.Epsilon-worst) > 1e-9*worst {
			t.Errorf("k = %d: ε = %.10g (exact %v), the worst set gives %.10g", g.K, g.Epsilon, g.Exact, worst)
		}
		t.Logf("k = %d: ε = %.4f, worst set %.4f, exact %v", g.K, g.Epsilon, worst, g.Exact)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Epsilon < got[i-1].Epsilon {
			t.Errorf("ε for %d clients %g is below that for %d, %g", got[i].K, got[i].Epsilon, got[i-1].K, got[i-1].Epsilon)
		}
	}
}

func TestPartiesEpsilonsRefusesBadInput(t *testing.T) {
	p := [][]dp.Event{{sgEvent(t, 0.1, 1, 10)}, {sgEvent(t, 0.1, 1, 10)}}
	for _, c := range []struct {
		parties [][]dp.Event
		ks      []int
		delta   float64
		want    string
	}{
		{p, []int{0}, 1e-5, "k = 0"},
		{p, []int{3}, 1e-5, "k = 3"},
		{nil, []int{1}, 1e-5, "no parties"},
		{p, []int{1}, 0, "δ"},
		{[][]dp.Event{{{Kind: dp.KindSubsampledGaussian, SamplingRate: 2, NoiseMultiplier: 1, Count: 1}}}, []int{1}, 1e-5, "party 0"},
	} {
		if _, err := dp.PartiesEpsilons(c.parties, c.ks, c.delta, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v %g: error %v, want one naming %q", len(c.parties), c.ks, c.delta, err, c.want)
		}
	}
}

// Ledger.Events hands out what was charged, and a copy: changing it
// changes nothing in the ledger.
func TestLedgerEvents(t *testing.T) {
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("a", dp.Budget{Epsilon: 100, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	e1, e2 := sgEvent(t, 0.1, 1, 5), sgEvent(t, 0.2, 2, 7)
	if _, err := l.Charge("a", e1, e2); err != nil {
		t.Fatal(err)
	}
	got, err := l.Events("a")
	if err != nil || len(got) != 2 || got[0].Count != 5 || got[1].NoiseMultiplier != 2 {
		t.Fatalf("events %+v, %v", got, err)
	}
	got[0].Count = 1
	again, _ := l.Events("a")
	if again[0].Count != 5 {
		t.Fatal("changing the returned events changed the ledger")
	}
	if _, err := l.Events("b"); err == nil {
		t.Fatal("an unknown principal's events")
	}
}

func mustGaussian(t *testing.T, sigma float64, n int) dp.Event {
	t.Helper()
	e, err := dp.GaussianEvent(sigma, n)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// subsets calls f with every k-subset of 0..n-1.
func subsets(n, k int, f func([]int)) {
	set := make([]int, 0, k)
	var rec func(start int)
	rec = func(start int) {
		if len(set) == k {
			f(set)
			return
		}
		for i := start; i <= n-(k-len(set)); i++ {
			set = append(set, i)
			rec(i + 1)
			set = set[:len(set)-1]
		}
	}
	rec(0)
}
