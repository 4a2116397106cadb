package coord

import (
	"context"
	"crypto/x509"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// countingServer is a DDPServer whose state is the number of steps taken
// since the state it was last restored to.
type countingServer struct {
	steps    int
	restored [][]byte
}

func (s *countingServer) Step(model wire.Weights, _ []float32, _ float64, _ string) (wire.Weights, []byte, error) {
	s.steps++
	next := model.Clone()
	next[0].Values[0]++
	return next, []byte{byte(s.steps)}, nil
}

func (s *countingServer) Restore(_ wire.Weights, state []byte) error {
	s.restored = append(s.restored, state)
	s.steps = 0
	if state != nil {
		s.steps = int(state[0])
	}
	return nil
}

// finishedRound is a secure round that has finished with sum and whose
// erase fails once if failErase is set.
type finishedRound struct {
	sum       *strategy.Sum
	failErase bool
}

func (f *finishedRound) push(string, int) (*fedpb.SecAggPhase, int) { return nil, 0 }
func (f *finishedRound) receive(context.Context, string, *x509.Certificate, *fedpb.SecAggMessage) error {
	return nil
}
func (f *finishedRound) maskedSize() int { return 0 }
func (f *finishedRound) receiveMasked(context.Context, string, *fedpb.UpdateHeader, []byte) (float64, error) {
	return 0, nil
}
func (f *finishedRound) step(context.Context, time.Time) (bool, error) { return true, nil }
func (f *finishedRound) outcome() (*strategy.Sum, string)              { return f.sum, "" }
func (f *finishedRound) erase(*sql.Tx) error {
	if f.failErase {
		f.failErase = false
		return errors.New("the disk is full")
	}
	return nil
}

// TestDistributedCloseThatFailsRestoresTheServer: when the transaction
// that closes a distributed round fails after the server has stepped, the
// server is set back to the state stored with the current model, so the
// next close steps from there (no step taken twice, none lost); once the
// close commits, the state stored with the next model is the server's.
func TestDistributedCloseThatFailsRestoresTheServer(t *testing.T) {
	model := wire.Weights{{Name: "w", Shape: []int{2}, Values: []float32{1, 2}}}
	srv := &countingServer{}
	o := Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 3, Fraction: 1, MinAvailable: 3, MinUpdates: 2, RoundTimeout: time.Hour, MaxUpdateNorm: 10,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1},
		SecAgg: &SecAggOptions{Mode: "masking", MinHonest: 2, Roots: x509.NewCertPool(), DDP: &DDPOptions{Server: srv,
			Plan: ddp.Plan{Unit: "identity", Delta: 1e-5, Clip: 1, SamplingRate: 0.1, Rounds: 3, Clients: 3, Threshold: 2, Noise: 100,
				Dim: 2, Scale: 1 << 10, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 2}}}}
	c := enrolled(t, o, true, "a", "b", "c")
	if len(srv.restored) != 1 || srv.restored[0] != nil {
		t.Fatalf("a new state restored the server %d times (%v), want once, fresh", len(srv.restored), srv.restored)
	}
	sum := strategy.NewSum(model)
	sum.Values, sum.Count, sum.Weight = []float64{0.5, 0.5}, 3, 3
	ctx := context.Background()
	c.round.sec = &finishedRound{sum: sum, failErase: true}
	if err := c.closeRound(ctx, c.round); err == nil {
		t.Fatal("the failed close reported no error")
	}
	if srv.steps != 0 || len(srv.restored) != 2 || srv.restored[1] != nil {
		t.Fatalf("after the failed close the server is at %d steps (restored to %v), want back at the stored (fresh) state", srv.steps, srv.restored)
	}
	if err := c.closeRound(ctx, c.round); err != nil {
		t.Fatal(err)
	}
	st, err := getMeta(c.st.db, metaDDPState)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := c.Model()
	if srv.steps != 1 || len(st) != 1 || st[0] != 1 || w[0].Values[0] != 2 {
		t.Fatalf("after the close: the server at %d steps, stored state %v, model %v; want one step, stored, the model stepped once", srv.steps, st, w[0].Values)
	}
}

// TestDistributedRoundSelectsNoMoreThanThePlansClients: with four clients
// available and a plan whose wrap bound covers three, the round selects
// three (more would refuse to start: their sum could wrap the modulus).
func TestDistributedRoundSelectsNoMoreThanThePlansClients(t *testing.T) {
	model := wire.Weights{{Name: "w", Shape: []int{2}, Values: []float32{1, 2}}}
	o := Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 1, Fraction: 1, MinAvailable: 3, MinUpdates: 2, RoundTimeout: time.Hour, MaxUpdateNorm: 10,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1},
		SecAgg: &SecAggOptions{Mode: "masking", MinHonest: 2, Roots: x509.NewCertPool(), DDP: &DDPOptions{Server: &countingServer{},
			Plan: ddp.Plan{Unit: "identity", Delta: 1e-5, Clip: 1, SamplingRate: 0.1, Rounds: 1, Clients: 3, Threshold: 2, Noise: 100,
				Dim: 2, Scale: 1 << 10, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 2}}}}
	c := enrolled(t, o, true, "a", "b", "c", "d")
	if n := len(c.round.selected); n != 3 {
		t.Fatalf("the round selected %d clients, the plan covers 3", n)
	}
}
