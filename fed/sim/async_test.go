package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/sim"
	"github.com/veil-privacy/veil/fed/strategy"
)

// TestAsyncSim runs three clients against an asynchronous coordinator
// (FedBuff with K = 2, and EASGD, each also with dropout-thinned models,
// p = 0.5), each client with the head trainer and DP: the run makes its model versions, every exchange charged alike by
// the client's ledger and the coordinator's, within the budget.
func TestAsyncSim(t *testing.T) {
	for _, a := range []coord.AsyncOptions{
		{Strategy: coord.AsyncFedBuff, BufferSize: 2, MaxStaleness: 8},
		{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 2, MaxStaleness: 8},
		{Strategy: coord.AsyncFedBuff, BufferSize: 2, MaxStaleness: 8, Thin: strategy.ThinOptions{Drop: 0.5}},
		{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 2, MaxStaleness: 8, Thin: strategy.ThinOptions{Drop: 0.5}},
	} {
		t.Run(fmt.Sprintf("%s p=%g", a.Strategy, a.Thin.Drop), func(t *testing.T) {
			o := options(t, 6, 3)
			o.Strategy, o.Async, o.Rounds = a.Strategy, &a, 3
			rep, err := sim.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			want := 3
			if a.Strategy == coord.AsyncFedBuff {
				want = 6
			}
			st := status(t, o.Dir)
			var n uint64
			for _, c := range st.Clients {
				n += c.Updates
				eps := rep.EpsilonPerClient[c.Id]
				if eps > 8 || (c.Updates > 0 && !(c.Epsilon > 0)) || c.Epsilon > eps+1e-9 {
					t.Errorf("%s: %d exchanges, its ledger ε = %g, the coordinator's %g", c.Id, c.Updates, eps, c.Epsilon)
				}
			}
			if int(n) < want || !(rep.DevAccuracy >= 0 && rep.DevAccuracy <= 1) {
				t.Fatalf("%d exchanges accepted (want at least %d), accuracy %g", n, want, rep.DevAccuracy)
			}
		})
	}
	o := options(t, 6, 3)
	o.Strategy, o.Async, o.SecAgg = coord.AsyncFedBuff, &coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 3}, "masking"
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "not supported yet") {
		t.Errorf("FedBuff under masking: %v", err)
	}
}
