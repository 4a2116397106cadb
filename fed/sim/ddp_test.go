package sim_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/sim"
)

// TestDistributedSim runs two rounds of distributed DP-SGD through the
// real masking protocol (three clients over gRPC with mutual TLS, each
// charging its own ledger): both rounds are unmasked from all three
// clients and stepped by the server's optimiser, whose privacy record
// counts two steps and names the mechanism and the clients' T, with the
// effective noise multiplier of the summed noise (the one the label
// states, not a placeholder 1); every client spent the same ε, within its
// budget, the coordinator's copies of their ledgers hold that ε too (the
// federation's record: two DP rounds), and the coordinator's state keeps
// no message of the rounds.
func TestDistributedSim(t *testing.T) {
	o := options(t, 6, 3)
	o.SecAgg, o.DDP = "masking", &sim.DDP{Batch: 3}
	rep, err := sim.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FailedRounds != 0 || rep.Updates != 6 || rep.Refused != 0 || !(rep.DevAccuracy >= 0 && rep.DevAccuracy <= 1) {
		t.Fatalf("report %+v", rep)
	}
	st := status(t, o.Dir)
	if len(st.Rounds) != 2 || st.Rounds[0].State != "done" || st.Rounds[1].State != "done" || st.Rounds[1].Updates != 3 {
		t.Fatalf("rounds %v", st.Rounds)
	}
	if rep.Strategy != sim.DistributedStrategy {
		t.Errorf("the report's strategy %q, want %q: the rounds are DP-SGD steps, not %s", rep.Strategy, sim.DistributedStrategy, rep.Strategy)
	}
	m := rep.Mechanism
	if m == nil || m.Steps != 2 || !strings.Contains(m.Mechanism, "distributed DP-SGD") || !strings.Contains(m.Mechanism, "at least 3 honest clients") {
		t.Fatalf("the model's privacy record %+v", m)
	}
	var eps0 float64
	for name, eps := range rep.EpsilonPerClient {
		if eps0 == 0 {
			eps0 = eps
		}
		if !(eps > 0 && eps <= 8) || math.Abs(eps-eps0) > 1e-12 {
			t.Errorf("%s spent ε = %g (another %g)", name, eps, eps0)
		}
	}
	if len(rep.EpsilonPerClient) != 3 || math.Abs(m.Epsilon-eps0) > 1e-9*eps0 {
		t.Errorf("the model's ε %g, the clients' %v", m.Epsilon, rep.EpsilonPerClient)
	}
	if m.NoiseMultiplier == 1 || !(m.NoiseMultiplier > 0) || !strings.Contains(m.Mechanism, fmt.Sprintf("σ_eff = %.6g", m.NoiseMultiplier)) {
		t.Errorf("the record's noise multiplier %g is not the mechanism's σ_eff (%q)", m.NoiseMultiplier, m.Mechanism)
	}
	if p := rep.Privacy; p == nil || p.DPRounds != 2 || p.PlainRounds != 0 || math.Abs(p.EpsilonOneClient-eps0) > 1e-9*eps0 {
		t.Errorf("the coordinator's ledgers: %+v, want 2 DP rounds at the clients' ε = %g", p, eps0)
	}
	o.DDP, o.SecAgg = &sim.DDP{Batch: 3}, "off"
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "masking") {
		t.Errorf("distributed DP-SGD without masking: %v", err)
	}
}
