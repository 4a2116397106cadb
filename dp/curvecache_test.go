package dp

import (
	"bytes"
	"errors"
	"testing"
)

// TestCurveCacheChargesEqualUncached charges the same events to a ledger
// with a curve cache and to one without: every Spent, every refusal and
// the saved ledgers must be identical, and each mechanism's curve is
// computed once.
func TestCurveCacheChargesEqualUncached(t *testing.T) {
	sg := func(q, s float64, n int) Event {
		return Event{Kind: KindSubsampledGaussian, SamplingRate: q, NoiseMultiplier: s, Count: n}
	}
	sdg := func(q, s float64, n int) Event {
		return Event{Kind: KindSubsampledDiscreteGaussian, SamplingRate: q, NoiseMultiplier: s, Count: n}
	}
	curve := Event{Kind: KindRDPCurve, Orders: []float64{2, 8, 64}, RDP: []float64{0.01, 0.05, 0.4}, Count: 1}
	charges := []struct {
		name    string
		who     string
		events  []Event
		refused bool
	}{
		{"dp-sgd round 1", "a", []Event{sdg(0.05, 1.1, 20)}, false},
		{"same settings, other client", "b", []Event{sdg(0.05, 1.1, 20)}, false},
		{"same settings, more steps", "a", []Event{sdg(0.05, 1.1, 37)}, false},
		{"continuous Gaussian", "b", []Event{sg(0.01, 0.9, 100)}, false},
		{"several kinds at once", "c", []Event{{Kind: KindGaussian, NoiseMultiplier: 3, Count: 2}, {Kind: KindLaplace, LaplaceScale: 20, Count: 1}, curve}, false},
		{"pure DP", "c", []Event{{Kind: KindPureDP, Epsilon: 0.1, Count: 3}}, false},
		{"past the budget", "a", []Event{sdg(0.5, 0.6, 1000)}, true},
		// A cached mechanism with an invalid count must still be refused.
		{"zero steps of a cached mechanism", "b", []Event{sdg(0.05, 1.1, 0)}, true},
		{"sampling rate above 1", "b", []Event{sdg(1.5, 1.1, 1)}, true},
		{"after the refusals", "a", []Event{sdg(0.05, 1.1, 20)}, false},
	}
	plain, err := NewLedger(LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cached, err := NewLedger(LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := NewCurveCache(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cached.UseCurveCache(cache)
	for _, l := range []*Ledger{plain, cached} {
		for _, id := range []string{"a", "b", "c"} {
			if err := l.SetBudget(id, Budget{Epsilon: 8, Delta: 1e-5}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range charges {
		want, wantErr := plain.Charge(c.who, c.events...)
		got, gotErr := cached.Charge(c.who, c.events...)
		if (wantErr != nil) != c.refused || (gotErr != nil) != c.refused {
			t.Fatalf("%s: errors %v (uncached) and %v (cached), want refused=%v", c.name, wantErr, gotErr, c.refused)
		}
		if wantErr != nil && (wantErr.Error() != gotErr.Error() || errors.Is(wantErr, ErrBudgetExceeded) != errors.Is(gotErr, ErrBudgetExceeded)) {
			t.Errorf("%s: refused as %q with the cache, %q without", c.name, gotErr, wantErr)
		}
		if got != want {
			t.Errorf("%s: spent %+v with the cache, %+v without", c.name, got, want)
		}
	}
	pj, err := plain.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	cj, err := cached.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pj, cj) {
		t.Errorf("the saved ledgers differ:\n%s\n%s", pj, cj)
	}
	// Mechanisms: sdg(0.05,1.1), sg(0.01,0.9), Gaussian(3), Laplace(20),
	// pure(0.1), sdg(0.5,0.6); the RDP-curve event is not cached.
	if n := cache.Len(); n != 6 {
		t.Errorf("the cache holds %d curves, want one per mechanism (6)", n)
	}
}

// TestCurveCacheOtherOrdersUnused: a cache over other orders than a
// ledger's is not used by it (its curves would be at the wrong orders).
func TestCurveCacheOtherOrdersUnused(t *testing.T) {
	cache, err := NewCurveCache([]float64{2, 4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLedger(LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.UseCurveCache(cache)
	if err := l.SetBudget("a", Budget{Epsilon: 8, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	ref, err := NewLedger(LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.SetBudget("a", Budget{Epsilon: 8, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	e := Event{Kind: KindSubsampledGaussian, SamplingRate: 0.02, NoiseMultiplier: 1, Count: 50}
	got, err := l.Charge("a", e)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Charge("a", e)
	if err != nil {
		t.Fatal(err)
	}
	if got != want || cache.Len() != 0 {
		t.Errorf("spent %+v, want %+v; the cache over other orders holds %d curves", got, want, cache.Len())
	}
}

// TestCurveCacheBounded: distinct parameters beyond the bound do not grow
// the cache past it.
func TestCurveCacheBounded(t *testing.T) {
	cache, err := NewCurveCache(nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := cache.curve(Event{Kind: KindGaussian, NoiseMultiplier: 1 + float64(i), Count: 1}); err != nil {
			t.Fatal(err)
		}
		if n := cache.Len(); n > 4 {
			t.Fatalf("after %d distinct curves the cache holds %d, above its bound 4", i+1, n)
		}
	}
}

// TestCurveCacheKeySeparatesParameters: events that differ in one
// parameter only must not share a cached curve. For each pair, the first
// event fills the cache and the second must still get its own curve, the
// one an accountant without a cache computes.
func TestCurveCacheKeySeparatesParameters(t *testing.T) {
	pairs := []struct {
		name string
		a, b Event
	}{
		{"kind", Event{Kind: KindSubsampledGaussian, SamplingRate: 0.1, NoiseMultiplier: 1, Count: 1},
			Event{Kind: KindSubsampledDiscreteGaussian, SamplingRate: 0.1, NoiseMultiplier: 1, Count: 1}},
		{"sampling rate", Event{Kind: KindSubsampledGaussian, SamplingRate: 0.1, NoiseMultiplier: 1, Count: 1},
			Event{Kind: KindSubsampledGaussian, SamplingRate: 0.2, NoiseMultiplier: 1, Count: 1}},
		{"noise multiplier", Event{Kind: KindGaussian, NoiseMultiplier: 1, Count: 1},
			Event{Kind: KindGaussian, NoiseMultiplier: 2, Count: 1}},
		{"Laplace scale", Event{Kind: KindLaplace, LaplaceScale: 1, Count: 1},
			Event{Kind: KindLaplace, LaplaceScale: 2, Count: 1}},
		{"epsilon", Event{Kind: KindPureDP, Epsilon: 0.1, Count: 1},
			Event{Kind: KindPureDP, Epsilon: 0.5, Count: 1}},
	}
	for _, p := range pairs {
		cache, err := NewCurveCache(nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := NewAccountant(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cache.curve(p.a); err != nil {
			t.Fatal(err)
		}
		got, err := cache.curve(p.b)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.curve(p.b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: after caching %+v, the curve of %+v at order %g is %g, want %g",
					p.name, p.a, p.b, cache.orders[i], got[i], want[i])
				break
			}
		}
	}
}
