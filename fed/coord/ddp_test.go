package coord_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/secagg/quant"
)

// ddpTrainer is a client.DistributedTrainer with a fixed clipped sum; it
// notes each round's id (the rotation's seed). It runs no local training.
type ddpTrainer struct {
	sum []float32
	ids *sync.Map
}

func (ddpTrainer) Plan(*fedpb.RoundConfig, float64) (*fedpb.DPParams, error) {
	return nil, errors.New("no local DP-SGD")
}

func (ddpTrainer) Train(context.Context, wire.Weights, *fedpb.RoundConfig, *fedpb.DPParams) (client.Update, error) {
	return client.Update{}, errors.New("no local DP-SGD")
}

func (d ddpTrainer) ClippedSum(_ context.Context, _ wire.Weights, task *fedpb.RoundConfig, _ ddp.Plan) ([]float32, error) {
	d.ids.Store(task.GetRound(), [32]byte(task.GetSecagg().GetRoundId()))
	return slices.Clone(d.sum), nil
}

// ddpSums are the four clients' clipped sums (norm below the sum clip).
func ddpSums(i int) []float32 {
	return []float32{0.31 * float32(i+1), -0.12, 0.05 * float32(i), 0.4, -0.23 * float32(i+1), 0.07}
}

// ddpClientPolicy takes part in distributed DP-SGD: T = 2, no colluders,
// its noise calibrated for ε = 100 over 10 rounds.
func ddpClientPolicy() client.Policy {
	pol := client.DefaultPolicy(dp.Budget{Epsilon: 100, Delta: 1e-5})
	pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 2}
	pol.DDP = client.DDPPolicy{Rounds: 10}
	return pol
}

// TestDistributedRoundStepsWithTheReleasedSum runs a round of distributed
// DP-SGD over mutual TLS with four real clients: each charges its ledger
// the plan's mechanism at its own T, encodes its clipped sum with its
// noise share and masks it; the coordinator's server step is given exactly
// (bit for bit) ddp.Round.Decode of the sum of the clients' encodings —
// the in-process step of fed/ddpsim on the same sums — over the plan's
// expected batch with the mechanism's label, its output becomes the model,
// and neither a clipped sum nor an encoding is in what the coordinator
// received or stored.
func TestDistributedRoundStepsWithTheReleasedSum(t *testing.T) {
	srv := &sgdServer{lr: 0.5}
	o, plan, dir := ddpOptions(t, 1, srv)
	rec := &recorder{sums: map[uint64][]uint32{}}
	h := startHarnessWith(t, o, dir, rec.options(), func(c *coord.Coordinator) {
		coord.OnSecureSum(c, func(n uint64, s []uint32) { rec.mu.Lock(); rec.sums[n] = s; rec.mu.Unlock() })
	})
	var inputs, ids sync.Map
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	clients := make([]*client.Client, len(secNames))
	for i, name := range secNames {
		id, err := pki.LoadIdentity(filepath.Join(h.dir, name+".crt"), filepath.Join(h.dir, name+".key"), filepath.Join(h.dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(client.Options{Addr: h.addr, Creds: h.creds(t, name), Policy: ddpClientPolicy(), Identity: id,
			Dir: filepath.Join(h.dir, "clients", name), LedgerDir: filepath.Join(h.dir, "clients", name, "ledgers"), DataSet: name,
			Trainer: ddpTrainer{sum: ddpSums(i), ids: &ids}, Quantised: func(_ uint64, x []uint32) { inputs.Store(name, x) }})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	steps := srv.steps
	if len(steps) != 1 {
		t.Fatalf("%d server steps, want 1", len(steps))
	}
	// The in-process step on the same sums: the clients' encodings added
	// modulo 2^32 (the masks cancel: the unmasked sum is that), decoded.
	want := sumOf(t, &inputs, secNames)
	if !slices.Equal(rec.sums[1], want) {
		t.Fatal("the unmasked sum is not the sum of the clients' encodings")
	}
	rid, ok := ids.Load(uint64(1))
	if !ok {
		t.Fatal("no client computed a clipped sum")
	}
	r, err := ddp.NewRound(plan, quant.RotationSeed(rid.([32]byte)))
	if err != nil {
		t.Fatal(err)
	}
	released, err := r.Decode(want)
	if err != nil {
		t.Fatal(err)
	}
	s := steps[0]
	if !slices.Equal(s.released, released) || s.batch != plan.ExpectedBatch {
		t.Fatalf("the server step got %v over %g, want ddp's decoded sum %v over %g", s.released, s.batch, released, plan.ExpectedBatch)
	}
	if !strings.Contains(s.mech, "distributed DP-SGD") || !strings.Contains(s.mech, "at least 2 honest clients") {
		t.Errorf("the step's mechanism %q does not name the distributed mechanism and its assumption", s.mech)
	}
	w, _ := h.co.Model()
	for i := range w {
		if !slices.Equal(w[i].Values, s.next[i].Values) {
			t.Fatalf("the model's tensor %d is %v, not the server step's %v", i, w[i].Values, s.next[i].Values)
		}
	}
	// Each client charged one round of the plan's mechanism at its own T.
	eps, err := plan.Mechanism(2).Epsilon(1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		if sp, err := c.Spent(); err != nil || sp.Epsilon < eps*(1-1e-9) || sp.Epsilon > eps*(1+1e-9) {
			t.Errorf("%s spent %+v (%v), want ε = %g", secNames[i], sp, err, eps)
		}
	}
	// The coordinator saw no clipped sum and no encoding.
	var needles [][]byte
	for i := range secNames {
		needles = append(needles, updateNeedles(ddpSums(i), 1)...)
	}
	inputs.Range(func(_, v any) bool {
		x := v.([]uint32)
		needles = append(needles, u32Needles(x)...)
		return true
	})
	all := bytes.Join(rec.recv, nil)
	for _, nd := range needles {
		if bytes.Contains(all, nd) {
			t.Fatal("a client's clipped sum or encoding is in what the coordinator received")
		}
	}
	if f := findUpdate(t, h.state, needles); len(f) > 0 {
		t.Fatalf("a client's clipped sum or encoding is in %v", f)
	}
}
