package client_test

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
)

// secureTask is round() securely aggregated: masking, t = 3 of 4, 32 bits.
func secureTask() *fedpb.RoundConfig {
	r := round()
	r.Secagg = &fedpb.SecAggConfig{Mode: "masking", RoundId: make([]byte, 32), GraphSeed: make([]byte, 32), Degree: 3, Threshold: 3, MinHonest: 2,
		Roster: []*fedpb.SecAggMember{{Id: 1, Client: "a"}, {Id: 2, Client: "b"}, {Id: 3, Client: "c"}, {Id: 4, Client: "d"}},
		Quant:  &fedpb.QuantConfig{Dim: 6, Clip: 1, Gamma: 1.0 / 1024, Beta: 0.6, Bits: 32, WrapProb: 1e-9}}
	return r
}

// TestSecureRoundOutsideThePolicyIsRefused plays a coordinator offering
// an owner who requires secure aggregation with T = 3 a round without it
// (veil fed coordinator --secagg off), a threshold below T and a small
// modulus: each is refused naming the setting before anything is
// planned, downloaded, charged or trained, the decline names the setting
// only, and the client's folder (its ledger) is unchanged.
func TestSecureRoundOutsideThePolicyIsRefused(t *testing.T) {
	for _, c := range []struct {
		name    string
		task    func(*fedpb.RoundConfig)
		setting client.Setting
		want    string
	}{
		{"secagg off", func(r *fedpb.RoundConfig) { r.Secagg = nil }, client.SettingSecAgg, "is not securely aggregated"},
		{"threshold below T", func(r *fedpb.RoundConfig) { r.Secagg.Threshold = 2 }, client.SettingThreshold, "asks for threshold t = 2; this client assumes at least T = 3"},
		{"small modulus", func(r *fedpb.RoundConfig) { r.Secagg.Quant.Bits = 12 }, client.SettingBits, "modulus of 2^12"},
		{"unknown mode", func(r *fedpb.RoundConfig) { r.Secagg.Mode = "plain" }, client.SettingSecAgg, `mode "plain"`},
		{"threshold below the distributed DP trust", func(r *fedpb.RoundConfig) { r.Secagg.Threshold = 4 }, client.SettingThreshold, "needs t ≥ 5"},
		{"huge vector", func(r *fedpb.RoundConfig) { r.Secagg.Quant.Dim = 1 << 30 }, client.SettingSecAgg, "quantises 1073741824 values"},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := secureTask()
			c.task(task)
			pol := policy()
			pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 3}
			if strings.Contains(c.name, "distributed") {
				pol.DDP = client.DDPPolicy{MaxColluders: 2, Rounds: 10}
			}
			tr := &planTrainer{sigma: 2, q: 0.1}
			r := runAgainst(t, task, pol, tr)
			var pe *client.PolicyError
			if !errors.As(r.err, &pe) || pe.Setting != c.setting || !strings.Contains(r.err.Error(), c.want) {
				t.Fatalf("refused with %v, want %q naming %q", r.err, c.setting, c.want)
			}
			if d := r.adv.Declines(); len(d) != 1 || d[0].GetReason() != "policy: "+string(c.setting) {
				t.Errorf("declined with %v", d)
			}
			if tr.count() != 0 || r.adv.Downloads() != 0 || len(r.adv.Updates()) != 0 {
				t.Error("the client trained, downloaded or sent")
			}
			if len(r.before) != len(r.after) {
				t.Fatalf("the client's folder changed: %d files before, %d after", len(r.before), len(r.after))
			}
			for path, b := range r.before {
				if r.after[path] != b {
					t.Errorf("%s changed", filepath.Base(path))
				}
			}
		})
	}
}

// TestNoiseShareFollowsTheOwnersT: the client's noise share comes from
// its own policy's T and noise floor, whatever the coordinator claims of
// the honest clients (min_honest) or proposes (noise): a coordinator
// saying T = 100 and proposing no noise gets ⌈z·C/(γ·√T_owner)⌉; a larger
// proposal is taken.
func TestNoiseShareFollowsTheOwnersT(t *testing.T) {
	task := secureTask()
	task.Secagg.MinHonest = 100
	pol := policy()
	pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 4, NoiseMultiplier: 1}
	s, err := pol.NoiseShare(task.Secagg)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(math.Ceil(1 * 1 * 1024 / math.Sqrt(4))); s != want {
		t.Fatalf("noise share %d, want %d", s, want)
	}
	task.Secagg.Quant.Noise = 5000
	if s, _ := pol.NoiseShare(task.Secagg); s != 5000 {
		t.Fatalf("noise share %d with a larger proposal, want 5000", s)
	}
}
