package sim_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/sim"
)

// TestDPHESim runs two DPHE rounds through the real protocol (a key
// generator of its own and three clients over gRPC with mutual TLS, a
// 512-bit test key): both rounds decrypt the three clients' sum; σ is
// calibrated so that the two rounds spend each client's budget: every
// client's own ledger spent ε within 0.1% below ε = 8 and not above, and
// the coordinator's copies of the ledgers as much (two DP rounds).
func TestDPHESim(t *testing.T) {
	o := options(t, 6, 3)
	o.SecAgg, o.DPHE = "dphe", &sim.DPHE{Count: 2, SelectionEpsilon: 0.5, KeyBits: 512}
	rep, err := sim.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FailedRounds != 0 || rep.Updates != 6 || rep.Refused != 0 || rep.ServerLR != "1" || !(rep.DevAccuracy >= 0 && rep.DevAccuracy <= 1) {
		t.Fatalf("report %+v", rep)
	}
	st := status(t, o.Dir)
	if len(st.Rounds) != 2 || st.Rounds[0].State != "done" || st.Rounds[1].State != "done" || st.Rounds[1].Updates != 3 {
		t.Fatalf("rounds %v", st.Rounds)
	}
	d := rep.DPHE
	if d == nil || d.Count != 2 || d.Lanes < 2 || d.Blocks != (rep.Parameters+d.Lanes-1)/d.Lanes || !(d.NoiseMultiplier > 0) || d.KeyBits != 512 {
		t.Fatalf("DPHE report %+v", d)
	}
	if len(rep.EpsilonPerClient) != 3 {
		t.Fatalf("ε per client %v", rep.EpsilonPerClient)
	}
	for name, eps := range rep.EpsilonPerClient {
		if !(eps <= 8 && eps > 8*(1-1e-3)) {
			t.Errorf("%s spent ε = %g of 8", name, eps)
		}
	}
	if p := rep.Privacy; p == nil || p.DPRounds != 2 || p.PlainRounds != 0 || math.Abs(p.EpsilonOneClient-rep.EpsilonPerClient["client-1"]) > 1e-9 {
		t.Errorf("the coordinator's ledgers: %+v, the clients' %v", rep.Privacy, rep.EpsilonPerClient)
	}
	o.DPHE = &sim.DPHE{Count: -1, SelectionEpsilon: 1}
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "at least one block") {
		t.Errorf("a selection of no block: %v", err)
	}
	o.SecAgg = "masking"
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "--secagg dphe only") {
		t.Errorf("DPHE settings under masking: %v", err)
	}
}
