package sim_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/sim"
)

// TestDistributedSim runs two rounds of distributed DP-SGD through the
// real masking protocol (three clients over gRPC with mutual TLS, each
// charging its own ledger): both rounds are unmasked from all three
// clients and stepped by the server's optimiser, whose privacy record
// counts two steps and names the mechanism and the clients' T; every
// client spent the same ε, within its budget, and the coordinator's state
// keeps no message of the rounds.
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
	o.DDP, o.SecAgg = &sim.DDP{Batch: 3}, "off"
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "masking") {
		t.Errorf("distributed DP-SGD without masking: %v", err)
	}
}
