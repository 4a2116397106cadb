package dp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
)

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
	if err := l.SetBudget("alice", Budget{Epsilon: 1, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	step := mustEvent(SubsampledGaussianEvent(0.01, 1, 100))
	charged := 0
	for {
		before, _ := json.Marshal(l)
		s, err := l.Charge("alice", step)
		if err != nil {
			if !errors.Is(err, ErrBudgetExceeded) {
				t.Fatalf("refusal does not wrap ErrBudgetExceeded: %v", err)
			}
			after, _ := json.Marshal(l)
			if !bytes.Equal(before, after) {
				t.Fatal("refused charge changed the ledger")
			}
			if s.Epsilon <= 1 {
				t.Errorf("refused a charge that would spend only %g", s.Epsilon)
			}
			break
		}
		if s.Epsilon > 1 {
			t.Fatalf("accepted a charge spending %g > 1", s.Epsilon)
		}
		charged++
		if charged > 1000 {
			t.Fatal("budget never ran out")
		}
	}
	// The accepted total matches the accountant directly.
	want, _, _ := ScheduleEpsilon(0.01, 1, 100*charged, 1e-5)
	got, _ := l.Spent("alice")
	if got.Epsilon != want {
		t.Errorf("spent %g after %d charges, accountant says %g", got.Epsilon, charged, want)
	}
	next, _, _ := ScheduleEpsilon(0.01, 1, 100*(charged+1), 1e-5)
	if !(want <= 1 && next > 1) {
		t.Errorf("stopped at the wrong place: %g then %g", want, next)
	}
	// A spent budget refuses even the smallest further charge.
	tiny := mustEvent(GaussianEvent(1e6, 1))
	if ok, _ := l.CanCharge("alice", tiny); ok {
		// Tiny charges may still fit; check that a large one does not.
		big := mustEvent(GaussianEvent(0.1, 1))
		if _, err := l.Charge("alice", big); !errors.Is(err, ErrBudgetExceeded) {
			t.Errorf("large charge on a nearly spent budget: %v", err)
		}
	}
}

func TestLedgerErrors(t *testing.T) {
	l, _ := NewLedger(LedgerOptions{})
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
	_ = l.SetBudget("bob", Budget{Epsilon: 2, Delta: 1e-5})
	if _, err := l.Charge("bob"); err == nil {
		t.Error("empty charge accepted")
	}
	before, _ := json.Marshal(l)
	if _, err := l.Charge("bob", ev, Event{Kind: KindLaplace, Count: 1}); err == nil {
		t.Error("invalid event accepted")
	}
	after, _ := json.Marshal(l)
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
	if err := l.SetBudget("bob", Budget{Epsilon: 5, Delta: 1e-5}); err != nil {
		t.Errorf("raising budget: %v", err)
	}
}

func TestLedgerRoundTripAndTamper(t *testing.T) {
	l, _ := NewLedger(LedgerOptions{})
	_ = l.SetBudget("a", Budget{Epsilon: 5, Delta: 1e-5})
	_ = l.SetBudget("b", Budget{Epsilon: 1, Delta: 1e-6})
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
	data2, _ := json.Marshal(l2)
	if !bytes.Equal(data, data2) {
		t.Errorf("round trip changed the ledger:\n%s\n%s", data, data2)
	}
	s1, _ := l.Spent("a")
	s2, _ := l2.Spent("a")
	if s1 != s2 {
		t.Errorf("spent differs after round trip: %v vs %v", s1, s2)
	}
	if !strings.Contains(string(data), `"version":1`) {
		t.Errorf("no version in %s", data)
	}
	// Tampering: lower a stored RDP value.
	var raw map[string]any
	_ = json.Unmarshal(data, &raw)
	pa := raw["principals"].(map[string]any)["a"].(map[string]any)
	pa["rdp"].([]any)[5] = 0.0
	bad, _ := json.Marshal(raw)
	if _, err := UnmarshalLedger(bad); err == nil {
		t.Error("tampered RDP curve accepted")
	}
	// Dropped events with the curve intact.
	_ = json.Unmarshal(data, &raw)
	raw["principals"].(map[string]any)["a"].(map[string]any)["events"] = []any{}
	bad, _ = json.Marshal(raw)
	if _, err := UnmarshalLedger(bad); err == nil {
		t.Error("ledger with dropped events accepted")
	}
	// Unknown version.
	if _, err := UnmarshalLedger(bytes.Replace(data, []byte(`"version":1`), []byte(`"version":9`), 1)); err == nil {
		t.Error("unknown version accepted")
	}
}

func TestLedgerConcurrentCharges(t *testing.T) {
	l, _ := NewLedger(LedgerOptions{})
	_ = l.SetBudget("c", Budget{Epsilon: 2, Delta: 1e-5})
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
	s, _ := l.Spent("c")
	if s.Epsilon > 2 {
		t.Errorf("concurrent charges overspent: %g", s.Epsilon)
	}
	want, _, _ := ScheduleEpsilon(0.02, 1, 50*accepted, 1e-5)
	if s.Epsilon != want {
		t.Errorf("spent %g after %d accepted charges, want %g", s.Epsilon, accepted, want)
	}
}

func TestLedgerWithPLD(t *testing.T) {
	l, err := NewLedger(LedgerOptions{UsePLD: true, PLD: PLDOptions{Interval: 1e-3}})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.SetBudget("p", Budget{Epsilon: 10, Delta: 1e-5})
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
	l, _ := NewLedger(LedgerOptions{Orders: []float64{2, 4, 8}})
	_ = l.SetBudget("a", Budget{Epsilon: 5, Delta: 1e-5})
	ev, _ := SubsampledGaussianEvent(0.01, 1.1, 50)
	_, _ = l.Charge("a", ev)
	good, _ := json.Marshal(l)
	f.Add(good)
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
		// Anything accepted must round-trip and be within budget.
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := UnmarshalLedger(out); err != nil {
			t.Fatalf("re-reading an accepted ledger failed: %v", err)
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
	_ = l.SetBudget("p", Budget{Epsilon: 10, Delta: 1e-5})
	s, err := l.Charge("p", mustEvent(SubsampledGaussianEvent(0.01, 1, 1000)))
	if err != nil {
		t.Fatal(err)
	}
	if s.PLDEpsilon != 0 || s.Epsilon != s.RDPEpsilon {
		t.Errorf("fallback: %+v", s)
	}
}
