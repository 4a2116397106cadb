package sim_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/sim"
)

// TestDPHESim runs two DPHE rounds through the real protocol (a key
// generator of its own with a 2048-bit key, and three clients over gRPC
// with mutual TLS), then the same rounds in one process (the releases
// added as the key generator reveals their sum). Through the network both
// rounds decrypt the three clients' sum; σ is calibrated so that the two
// rounds spend each client's budget: every client's own ledger spent ε
// within 0.1% below ε = 8 and not above, and the coordinator's copies of
// the ledgers as much (two DP rounds). In one process the run settles
// the same packing (lanes, blocks, bound), count and σ, and every client
// spends the same ε.
func TestDPHESim(t *testing.T) {
	o := options(t, 6, 3)
	o.SecAgg, o.DPHE = "dphe", &sim.DPHE{Count: 2, SelectionEpsilon: 0.5}
	net, err := sim.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if net.FailedRounds != 0 || net.Updates != 6 || net.Refused != 0 || net.ServerLR != "1" || !(net.DevAccuracy >= 0 && net.DevAccuracy <= 1) {
		t.Fatalf("report %+v", net)
	}
	st := status(t, o.Dir)
	if len(st.Rounds) != 2 || st.Rounds[0].State != "done" || st.Rounds[1].State != "done" || st.Rounds[1].Updates != 3 {
		t.Fatalf("rounds %v", st.Rounds)
	}
	d := net.DPHE
	if d == nil || d.Count != 2 || d.Lanes < 2 || d.Blocks != (net.Parameters+d.Lanes-1)/d.Lanes || !(d.NoiseMultiplier > 0) || d.KeyBits != 2048 {
		t.Fatalf("DPHE report %+v", d)
	}
	if len(net.EpsilonPerClient) != 3 {
		t.Fatalf("ε per client %v", net.EpsilonPerClient)
	}
	for name, eps := range net.EpsilonPerClient {
		if !(eps <= 8 && eps > 8*(1-1e-3)) {
			t.Errorf("%s spent ε = %g of 8", name, eps)
		}
	}
	if p := net.Privacy; p == nil || p.DPRounds != 2 || p.PlainRounds != 0 || math.Abs(p.EpsilonOneClient-net.EpsilonPerClient["client-1"]) > 1e-9 {
		t.Errorf("the coordinator's ledgers: %+v, the clients' %v", net.Privacy, net.EpsilonPerClient)
	}

	o.Dir = t.TempDir()
	o.DPHE = &sim.DPHE{Count: 2, SelectionEpsilon: 0.5, InProcess: true}
	rep, err := sim.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Updates != 6 || rep.ServerLR != "1" || !(rep.DevAccuracy >= 0 && rep.DevAccuracy <= 1) {
		t.Fatalf("report %+v", rep)
	}
	a, b := *net.DPHE, *rep.DPHE
	if b.KeyBits != 0 {
		t.Errorf("key bits %d in one process", b.KeyBits)
	}
	a.KeyBits = 0
	if a != b {
		t.Errorf("settings through the network %+v, in one process %+v", a, b)
	}
	for name, eps := range rep.EpsilonPerClient {
		if eps != net.EpsilonPerClient[name] {
			t.Errorf("%s spent ε = %g in one process, %g through the network", name, eps, net.EpsilonPerClient[name])
		}
	}

	for _, c := range []struct {
		d    sim.DPHE
		want string
	}{
		{sim.DPHE{Count: -1, SelectionEpsilon: 1}, "at least one block"},
		{sim.DPHE{SelectionEpsilon: 1, InProcess: true, KeyBits: 512}, "encrypts nothing"},
		{sim.DPHE{SelectionEpsilon: 0}, "selection ε must be positive"},
	} {
		o.DPHE = &c.d
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.d, err, c.want)
		}
	}
	o.SecAgg, o.DPHE = "masking", &sim.DPHE{SelectionEpsilon: 1}
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "--secagg dphe only") {
		t.Errorf("DPHE settings under masking: %v", err)
	}
}
