package client_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
)

// exchange is round() as an asynchronous coordinator offers it.
func exchange(strategy string) *fedpb.RoundConfig {
	task := round()
	task.Strategy = strategy
	task.Async = &fedpb.AsyncConfig{Strategy: strategy, Beta: 0.5, BufferSize: 2, MaxStaleness: 4}
	return task
}

// An asynchronous exchange outside the owner's policy is refused as a
// round is: the error names the setting, the coordinator is told the
// setting's name only, nothing is downloaded, trained or sent, and the
// client's folder (its ledger) is unchanged.
func TestExchangeOutsideThePolicyIsRefused(t *testing.T) {
	for _, c := range []struct {
		name    string
		task    func(*fedpb.RoundConfig)
		plan    func(*fedpb.DPParams)
		setting client.Setting
	}{
		{name: "no DP", task: func(r *fedpb.RoundConfig) { r.Dp = nil }, setting: client.SettingDP},
		{name: "less noise", task: func(r *fedpb.RoundConfig) { r.Dp.NoiseMultiplier = 0.5 }, setting: client.SettingNoise},
		{name: "larger clip", task: func(r *fedpb.RoundConfig) { r.Dp.Clip = 4 }, setting: client.SettingClip},
		{name: "unit example", task: func(r *fedpb.RoundConfig) { r.Dp.PrivacyUnit = "example" }, setting: client.SettingUnit},
		{name: "plan: larger sampling rate", plan: func(p *fedpb.DPParams) { p.SamplingRate = 0.9 }, setting: client.SettingSamplingRate},
	} {
		for _, strategy := range []string{"easgd", "fedbuff"} {
			t.Run(strategy+" "+c.name, func(t *testing.T) {
				task := exchange(strategy)
				if c.task != nil {
					c.task(task)
				}
				tr := &planTrainer{sigma: 2, q: 0.1, edit: c.plan}
				r := runAgainst(t, task, policy(), tr)
				var pe *client.PolicyError
				if !errors.As(r.err, &pe) || pe.Setting != c.setting {
					t.Fatalf("the client did not refuse for %q: %v", c.setting, r.err)
				}
				if n := len(r.adv.Updates()); n != 0 {
					t.Errorf("the client sent %d updates", n)
				}
				if d := r.adv.Declines(); len(d) != 1 || d[0].GetReason() != "policy: "+string(c.setting) {
					t.Errorf("declined with %v", d)
				}
				if tr.count() != 0 || r.adv.Downloads() != 0 {
					t.Errorf("trained %d times, downloaded %d models", tr.count(), r.adv.Downloads())
				}
				for path, b := range r.before {
					if r.after[path] != b {
						t.Errorf("%s changed", path)
					}
				}
			})
		}
	}
}

// The control: an exchange inside the policy is trained once, charged,
// and its Δ (the trainer's update from the model served) sent on the
// served model's version; the client then asks for its next exchange
// (Poll) and stops when told the run is over. A β outside (0, 1] is
// refused before anything is done.
func TestExchangeInsideThePolicyIsSent(t *testing.T) {
	tr := &planTrainer{sigma: 2, q: 0.1}
	r := runAgainst(t, exchange("easgd"), policy(), tr)
	if r.err != nil {
		t.Fatal(r.err)
	}
	ups := r.adv.Updates()
	if len(ups) != 1 || ups[0].GetRound() != 3 || ups[0].GetDp().GetNoiseMultiplier() != 1 {
		t.Fatalf("updates %v", ups)
	}
	if r.adv.Polls() < 2 {
		t.Errorf("the client asked for work %d times, want its stream and a Poll after the exchange", r.adv.Polls())
	}
	if r.after[ledgerFile(r.dir)] == r.before[ledgerFile(r.dir)] {
		t.Error("the exchange was not charged to the client's ledger")
	}
	for _, beta := range []float64{0, 1.5, math.NaN()} {
		task := exchange("easgd")
		task.Async.Beta = beta
		tr := &planTrainer{sigma: 2, q: 0.1}
		r := runAgainst(t, task, policy(), tr)
		if r.err == nil || !strings.Contains(r.err.Error(), "moving rate") || tr.count() != 0 || len(r.adv.Updates()) != 0 {
			t.Errorf("β = %g: %v, trained %d times", beta, r.err, tr.count())
		}
	}
}
