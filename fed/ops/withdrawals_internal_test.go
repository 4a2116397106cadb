package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
)

// withdrawalCounts gathers veil_fed_withdrawals_total from m's registry:
// reason → count.
func withdrawalCounts(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "veil_fed_withdrawals_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestWithdrawalsCountedByReason: the coordinator's observer as veil fed
// coordinator passes it (the Evaluator wrapping the metrics, with
// --eval-data) counts each withdrawal under its reason; a reason no Veil
// client gives is counted as "other", so a client cannot add series; every
// known reason has a series from the start.
func TestWithdrawalsCountedByReason(t *testing.T) {
	m := NewMetrics()
	for _, obs := range []coord.Observer{m, &Evaluator{obs: m}} {
		wo, ok := obs.(coord.WithdrawalObserver)
		if !ok {
			t.Fatalf("%T is not told of withdrawals", obs)
		}
		for _, r := range []string{"policy: clip", "policy: clip", coord.ReasonRevoked, "budget", "made up by a client"} {
			wo.ClientWithdrew(r)
		}
	}
	got := withdrawalCounts(t, m)
	want := map[string]float64{"policy: clip": 4, "revoked": 2, "budget": 2, "other": 2, "policy: noise multiplier": 0, "withdrawn": 0}
	for r, n := range want {
		if g, ok := got[r]; !ok || g != n {
			t.Errorf("veil_fed_withdrawals_total{reason=%q} = %v (present %v), want %v", r, g, ok, n)
		}
	}
	for r := range got {
		if !slices.Contains(WithdrawalReasons, r) {
			t.Errorf("a series for reason %q, which is not one of WithdrawalReasons", r)
		}
	}
}

// TestWithdrawalReasonsNameEveryDecline: every reason a Veil client
// declines with (each setting of its policy, its budget, any other
// refusal) is counted under its own name, not as "other".
func TestWithdrawalReasonsNameEveryDecline(t *testing.T) {
	errs := []error{client.ErrBudgetExhausted, errors.New("some other refusal"), fmt.Errorf("round 3: %w: %w", client.ErrTrainingFailed, errors.New("out of memory")),
		context.Canceled}
	for _, s := range []client.Setting{client.SettingDP, client.SettingUnit, client.SettingDelta, client.SettingNoise,
		client.SettingClip, client.SettingSamplingRate, client.SettingSteps} {
		errs = append(errs, &client.PolicyError{Setting: s})
	}
	for _, err := range errs {
		r := client.DeclineReason(err)
		if !coord.ValidReason(r) {
			t.Errorf("a client declines with %q, which the coordinator refuses", r)
		}
		if withdrawalLabel(r) != r {
			t.Errorf("a client declining with %q is counted as %q", r, withdrawalLabel(r))
		}
	}
}
