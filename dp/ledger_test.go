package dp

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
)

// marshal encodes the ledger, failing the test on error (a discarded
// error would make every "unchanged" comparison below vacuous).
func marshal(t testing.TB, l *Ledger) []byte {
	t.Helper()
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatalf("saving the ledger: %v", err)
	}
	if len(b) == 0 {
		t.Fatal("saving the ledger gave no bytes")
	}
	return b
}

// must fails the test on error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mustEvent unwraps an event constructor in tests; the parameters are
// constants, so an error is a bug in the test itself.
func mustEvent(e Event, err error) Event {
	if err != nil {
		panic(err)
	}
	return e
}

func TestLedgerChargeUntilBudget(t *testing.T) {
	l, err := NewLedger(LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("alice", Budget{Epsilon: 3, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	step := mustEvent(SubsampledGaussianEvent(0.01, 1, 100))
	charged := 0
	for {
		before := marshal(t, l)
		s, err := l.Charge("alice", step)
		if err != nil {
			if !errors.Is(err, ErrBudgetExceeded) {
				t.Fatalf("refusal does not wrap ErrBudgetExceeded: %v", err)
			}
			after := marshal(t, l)
			if !bytes.Equal(before, after) {
				t.Fatal("refused charge changed the ledger")
			}
			if s.Epsilon <= 3 {
				t.Errorf("refused a charge that would spend only %g", s.Epsilon)
			}
			break
		}
		if s.Epsilon > 3 {
			t.Fatalf("accepted a charge spending %g > 3", s.Epsilon)
		}
		charged++
		if charged > 1000 {
			t.Fatal("budget never ran out")
		}
	}
	if charged < 2 {
		t.Fatalf("only %d charges accepted: the test would not exercise composition", charged)
	}
	// The accepted total matches the accountant directly.
	want, _, err := ScheduleEpsilon(0.01, 1, 100*charged, 1e-5)
	must(t, err)
	got, err := l.Spent("alice")
	must(t, err)
	if math.Abs(got.Epsilon-want) > 1e-12*want { // 21 sums of 100 steps against one product of 2100
		t.Errorf("spent %.17g after %d charges, accountant says %.17g", got.Epsilon, charged, want)
	}
	next, _, err := ScheduleEpsilon(0.01, 1, 100*(charged+1), 1e-5)
	must(t, err)
	if !(want <= 3 && next > 3) {
		t.Errorf("stopped at the wrong place: %g then %g", want, next)
	}
	// A spent budget refuses even the smallest further charge.
	tiny := mustEvent(GaussianEvent(1e6, 1))
	ok, err := l.CanCharge("alice", tiny)
	must(t, err)
	if ok {
		// Tiny charges may still fit; check that a large one does not.
		big := mustEvent(GaussianEvent(0.1, 1))
		if _, err := l.Charge("alice", big); !errors.Is(err, ErrBudgetExceeded) {
			t.Errorf("large charge on a nearly spent budget: %v", err)
		}
	}
}

func TestLedgerErrors(t *testing.T) {
	l, err := NewLedger(LedgerOptions{})
	must(t, err)
	ev := mustEvent(GaussianEvent(2, 1))
	if _, err := l.Charge("nobody", ev); err == nil {
		t.Error("charge to unknown principal accepted")
	}
	for _, b := range []Budget{{0, 1e-5}, {-1, 1e-5}, {1, 0}, {1, 1}} {
		if err := l.SetBudget("bob", b); err == nil {
			t.Errorf("budget %v accepted", b)
		}
	}
	if err := l.SetBudget("", Budget{1, 1e-5}); err == nil {
		t.Error("empty principal accepted")
	}
	must(t, l.SetBudget("bob", Budget{Epsilon: 2, Delta: 1e-5}))
	if _, err := l.Charge("bob"); err == nil {
		t.Error("empty charge accepted")
	}
	before := marshal(t, l)
	if _, err := l.Charge("bob", ev, Event{Kind: KindLaplace, Count: 1}); err == nil {
		t.Error("invalid event accepted")
	} else if strings.Count(err.Error(), "dp:") != 1 || strings.Contains(err.Error(), "laplace") {
		t.Errorf("message %q repeats its prefix or names an internal kind", err)
	}
	infCurve := Event{Kind: KindRDPCurve, Orders: []float64{2, 4}, RDP: []float64{0.1, math.Inf(1)}, Count: 1}
	if _, err := l.Charge("bob", infCurve); err == nil {
		t.Error("RDP curve with an infinite value accepted")
	}
	after := marshal(t, l)
	if !bytes.Equal(before, after) {
		t.Error("refused invalid charge changed the ledger")
	}
	if _, err := l.Charge("bob", mustEvent(GaussianEvent(3, 1))); err != nil {
		t.Fatal(err)
	}
	// Lowering the budget below what is spent is refused.
	if err := l.SetBudget("bob", Budget{Epsilon: 0.01, Delta: 1e-5}); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("lowering budget below spent: %v", err)
	}
	if err := l.SetBudget("bob", Budget{Epsilon: 1.5, Delta: 1e-5}); err != nil {
		t.Errorf("lowering the budget above what is spent: %v", err)
	}
}

// TestLedgerBudgetCannotBeRaisedAfterSpending plays an owner who spends,
// then raises the budget or changes its δ to spend again: both are
// refused, the budget stays, and what was spent still reads as spent.
// (Before the fix SetBudget accepted both.)
func TestLedgerBudgetCannotBeRaisedAfterSpending(t *testing.T) {
	l, err := NewLedger(LedgerOptions{})
	must(t, err)
	must(t, l.SetBudget("bob", Budget{Epsilon: 2, Delta: 1e-5}))
	// Before anything is spent the budget may still be raised.
	must(t, l.SetBudget("bob", Budget{Epsilon: 3, Delta: 1e-5}))
	spent, err := l.Charge("bob", mustEvent(GaussianEvent(2, 1)))
	must(t, err)
	for _, b := range []Budget{{Epsilon: 30, Delta: 1e-5}, {Epsilon: 3, Delta: 1e-3}, {Epsilon: 3, Delta: 1e-9}} {
		if err := l.SetBudget("bob", b); !errors.Is(err, ErrBudgetLocked) {
			t.Errorf("budget %+v after spending: err = %v, want ErrBudgetLocked", b, err)
		}
		got, err := l.Budget("bob")
		must(t, err)
		if got != (Budget{Epsilon: 3, Delta: 1e-5}) {
			t.Errorf("after the refused budget %+v the budget is %+v", b, got)
		}
		s, err := l.Spent("bob")
		must(t, err)
		if s.Epsilon != spent.Epsilon || s.Epsilon == 0 {
			t.Errorf("after the refused budget %+v spent reads %g, want %g", b, s.Epsilon, spent.Epsilon)
		}
	}
}

func TestLedgerRoundTripAndTamper(t *testing.T) {
	l, err := NewLedger(LedgerOptions{})
	must(t, err)
	must(t, l.SetBudget("a", Budget{Epsilon: 5, Delta: 1e-5}))
	must(t, l.SetBudget("b", Budget{Epsilon: 1, Delta: 1e-6}))
	if _, err := l.Charge("a", mustEvent(SubsampledGaussianEvent(0.01, 1.1, 500)), mustEvent(LaplaceEvent(10, 2))); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := UnmarshalLedger(data)
	if err != nil {
		t.Fatal(err)
	}
	data2 := marshal(t, l2)
	if !bytes.Equal(data, data2) {
		t.Errorf("round trip changed the ledger:\n%s\n%s", data, data2)
	}
	s1, err := l.Spent("a")
	must(t, err)
	s2, err := l2.Spent("a")
	must(t, err)
	if s1 != s2 {
		t.Errorf("spent differs after round trip: %v vs %v", s1, s2)
	}
	if !strings.Contains(string(data), `"version":1`) {
		t.Errorf("no version in %s", data)
	}
	// Tampering: lower a stored RDP value.
	var raw map[string]any
	must(t, json.Unmarshal(data, &raw))
	pa := raw["principals"].(map[string]any)["a"].(map[string]any)
	pa["rdp"].([]any)[5] = 0.0
	bad, err := json.Marshal(raw)
	must(t, err)
	if _, err := UnmarshalLedger(bad); err == nil {
		t.Error("tampered RDP curve accepted")
	}
	// Dropped events with the curve intact.
	must(t, json.Unmarshal(data, &raw))
	raw["principals"].(map[string]any)["a"].(map[string]any)["events"] = []any{}
	bad, err = json.Marshal(raw)
	must(t, err)
	if _, err := UnmarshalLedger(bad); err == nil {
		t.Error("ledger with dropped events accepted")
	}
	// Unknown version.
	if _, err := UnmarshalLedger(bytes.Replace(data, []byte(`"version":1`), []byte(`"version":9`), 1)); err == nil {
		t.Error("unknown version accepted")
	}
}

func TestLedgerConcurrentCharges(t *testing.T) {
	l, err := NewLedger(LedgerOptions{})
	must(t, err)
	must(t, l.SetBudget("c", Budget{Epsilon: 2, Delta: 1e-5}))
	ev := mustEvent(SubsampledGaussianEvent(0.02, 1, 50))
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if _, err := l.Charge("c", ev); err == nil {
					mu.Lock()
					accepted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	s, err := l.Spent("c")
	must(t, err)
	if s.Epsilon > 2 {
		t.Errorf("concurrent charges overspent: %g", s.Epsilon)
	}
	want, _, err := ScheduleEpsilon(0.02, 1, 50*accepted, 1e-5)
	must(t, err)
	if s.Epsilon != want {
		t.Errorf("spent %g after %d accepted charges, want %g", s.Epsilon, accepted, want)
	}
}

func TestLedgerWithPLD(t *testing.T) {
	l, err := NewLedger(LedgerOptions{UsePLD: true, PLD: PLDOptions{Interval: 1e-3}})
	if err != nil {
		t.Fatal(err)
	}
	must(t, l.SetBudget("p", Budget{Epsilon: 10, Delta: 1e-5}))
	s, err := l.Charge("p", mustEvent(SubsampledGaussianEvent(0.01, 1, 1000)))
	if err != nil {
		t.Fatal(err)
	}
	if !(s.PLDEpsilon > 0 && s.PLDEpsilon < s.RDPEpsilon && s.Epsilon == s.PLDEpsilon) {
		t.Errorf("PLD ledger: %+v", s)
	}
	// A Laplace event makes the PLD bound unavailable: fall back to RDP.
	s, err = l.Charge("p", mustEvent(LaplaceEvent(100, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if s.PLDEpsilon != 0 || s.Epsilon != s.RDPEpsilon {
		t.Errorf("mixed ledger: %+v", s)
	}
}

func FuzzUnmarshalLedger(f *testing.F) {
	l, err := NewLedger(LedgerOptions{Orders: []float64{2, 4, 8}})
	must(f, err)
	must(f, l.SetBudget("a", Budget{Epsilon: 5, Delta: 1e-5}))
	if _, err := l.Charge("a", mustEvent(SubsampledGaussianEvent(0.01, 1.1, 50)), mustEvent(RDPCurveEvent([]float64{2, 4}, []float64{0.01, 0.02}, "pate"))); err != nil {
		f.Fatal(err)
	}
	good := marshal(f, l)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(bytes.Replace(good, []byte(`"+Inf"`), []byte(`"-Inf"`), 1))
	f.Add([]byte(`{"version":1,"orders":[2],"principals":{"x":{"budget":{"epsilon":1,"delta":0.5},"events":[{"kind":"pure_dp","epsilon":-1,"count":1}],"rdp":[0]}}}`))
	f.Add([]byte(`{"version":1,"orders":[],"principals":{}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"version":1,"orders":[2,3],"principals":{"y":{"budget":{"epsilon":1e308,"delta":1e-9},"events":[{"kind":"subsampled_gaussian","sampling_rate":1,"noise_multiplier":1e-300,"count":1}],"rdp":[1e308,1e308]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		l, err := UnmarshalLedger(data)
		if err != nil {
			return
		}
		// Anything accepted must save, re-read to the same bytes and
		// report the same spending.
		out := marshal(t, l)
		l2, err := UnmarshalLedger(out)
		if err != nil {
			t.Fatalf("re-reading an accepted ledger failed: %v", err)
		}
		if out2 := marshal(t, l2); !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the ledger:\n%s\n%s", out, out2)
		}
		for _, id := range l.Principals() {
			s1, err1 := l.Spent(id)
			s2, err2 := l2.Spent(id)
			if s1 != s2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("principal %q: spent %+v (%v) before, %+v (%v) after", id, s1, err1, s2, err2)
			}
		}
	})
}

func TestLedgerPLDFallsBackToRDP(t *testing.T) {
	// An FFT limit too small for the schedule: the charge still succeeds on
	// the RDP bound.
	l, err := NewLedger(LedgerOptions{UsePLD: true, PLD: PLDOptions{MaxSize: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	must(t, l.SetBudget("p", Budget{Epsilon: 10, Delta: 1e-5}))
	s, err := l.Charge("p", mustEvent(SubsampledGaussianEvent(0.01, 1, 1000)))
	if err != nil {
		t.Fatal(err)
	}
	if s.PLDEpsilon != 0 || s.Epsilon != s.RDPEpsilon {
		t.Errorf("fallback: %+v", s)
	}
}

// TestLedgerSavesUnboundedOrders: a curve event known only up to order 32
// makes the composed curve +Inf above it; the ledger must still save and
// read back exactly.
func TestLedgerSavesUnboundedOrders(t *testing.T) {
	l, err := NewLedger(LedgerOptions{})
	must(t, err)
	must(t, l.SetBudget("fed-client-1", Budget{Epsilon: 4, Delta: 1e-6}))
	pate := mustEvent(RDPCurveEvent([]float64{2, 4, 8, 16, 32}, []float64{0.01, 0.02, 0.04, 0.08, 0.16}, "noisy votes"))
	sgd := mustEvent(SubsampledDiscreteGaussianEvent(0.02, 1.3, 100))
	s, err := l.Charge("fed-client-1", pate, sgd)
	must(t, err)
	data := marshal(t, l)
	if !bytes.Contains(data, []byte(`"+Inf"`)) {
		t.Fatalf("no infinite order in %s", data)
	}
	l2, err := UnmarshalLedger(data)
	must(t, err)
	if !bytes.Equal(data, marshal(t, l2)) {
		t.Error("round trip changed the ledger")
	}
	s2, err := l2.Spent("fed-client-1")
	must(t, err)
	if s != s2 {
		t.Errorf("spent %+v before saving, %+v after", s, s2)
	}
	// The restored ledger keeps refusing what the original refuses.
	big := mustEvent(GaussianEvent(0.3, 1))
	_, err1 := l.Charge("fed-client-1", big)
	_, err2 := l2.Charge("fed-client-1", big)
	if !errors.Is(err1, ErrBudgetExceeded) || !errors.Is(err2, ErrBudgetExceeded) {
		t.Errorf("over-budget charge: %v / %v", err1, err2)
	}
}

func TestUnmarshalLedgerCorruptFiles(t *testing.T) {
	l, err := NewLedger(LedgerOptions{Orders: []float64{2, 3}})
	must(t, err)
	must(t, l.SetBudget("a", Budget{Epsilon: 20, Delta: 1e-5}))
	_, err = l.Charge("a", mustEvent(GaussianEvent(5, 2)))
	must(t, err)
	good := marshal(t, l)
	for _, tc := range []struct{ name, data, want string }{
		{"truncated", string(good[:len(good)-5]), "reading ledger"},
		{"not JSON", "PK\x03\x04", "reading ledger"},
		{"empty", "", "reading ledger"},
		{"bad infinity", strings.Replace(string(good), `"rdp":[`, `"rdp":["-Inf",`, 1), "reading ledger"},
		{"future version", strings.Replace(string(good), `"version":1`, `"version":2`, 1), "version 2"},
		{"bad budget", strings.Replace(string(good), `"epsilon":20`, `"epsilon":-20`, 1), "epsilon"},
	} {
		_, err := UnmarshalLedger([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

// FuzzLedgerRoundTrip charges fuzzed events and checks that whatever the
// ledger accepts saves, reads back to the same bytes and spends the same.
func FuzzLedgerRoundTrip(f *testing.F) {
	f.Add(0.01, 1.1, 10, 0.5, 0.3, 3.0, uint8(3))
	f.Add(1.0, 0.2, 1, 1e-3, 1e6, 1e-9, uint8(255))
	f.Add(1e-9, 1e3, 1<<30, 1e300, 1e-300, 0.0, uint8(0))
	f.Fuzz(func(t *testing.T, q, sigma float64, count int, lambda, eps, curve float64, mask uint8) {
		l, err := NewLedger(LedgerOptions{Orders: []float64{1.5, 2, 3, 8, 64}})
		must(t, err)
		must(t, l.SetBudget("p", Budget{Epsilon: 1e6, Delta: 1e-5}))
		cands := []func() (Event, error){
			func() (Event, error) { return SubsampledGaussianEvent(q, sigma, count) },
			func() (Event, error) { return SubsampledDiscreteGaussianEvent(q, sigma, count) },
			func() (Event, error) { return GaussianEvent(sigma, count) },
			func() (Event, error) { return LaplaceEvent(lambda, count) },
			func() (Event, error) { return PureDPEvent(eps, count) },
			func() (Event, error) { return RDPCurveEvent([]float64{2, 3}, []float64{curve, 2 * curve}, "fuzz") },
			func() (Event, error) {
				return Event{Kind: KindRDPCurve, Orders: []float64{2}, RDP: []float64{curve * math.Inf(1)}, Count: 1}, nil
			},
		}
		for i, c := range cands {
			if mask&(1<<i) == 0 {
				continue
			}
			ev, err := c()
			if err != nil {
				continue
			}
			before := marshal(t, l)
			if _, err := l.Charge("p", ev); err != nil && !bytes.Equal(before, marshal(t, l)) {
				t.Fatalf("refused charge %+v changed the ledger: %v", ev, err)
			}
		}
		out := marshal(t, l)
		l2, err := UnmarshalLedger(out)
		if err != nil {
			t.Fatalf("re-reading a saved ledger failed: %v\n%s", err, out)
		}
		if out2 := marshal(t, l2); !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the ledger:\n%s\n%s", out, out2)
		}
		s1, err1 := l.Spent("p")
		s2, err2 := l2.Spent("p")
		if s1 != s2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("spent %+v (%v) before, %+v (%v) after", s1, err1, s2, err2)
		}
	})
}
