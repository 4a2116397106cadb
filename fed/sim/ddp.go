package sim

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/ddpserver"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/train"
)

// DDP makes every round of a masked simulation (SecAgg "masking") one step
// of distributed DP-SGD (package fed/ddp) through the real protocol: each
// client checks the coordinator's plan against its own policy, charges its
// ledger, sends its clipped gradient sum encoded with its noise share and
// masked, and the coordinator takes veil train's optimiser step (Options'
// Optim: Adam, weight decay) with the decoded sum, as fed/ddpsim does in
// one process.
type DDP struct {
	// Batch is the expected number of people per round over the
	// federation: q = Batch / people.
	Batch int
	// MinHonest is T, each client's (and the coordinator's) trusted
	// number of honest clients in every unmasked sum, and the threshold
	// (0: every client; a round then needs all of them).
	MinHonest int
}

// check validates d against o (SecAgg masking and DP per identity are
// needed; faults are not simulated).
func (d *DDP) check(o *Options) error {
	switch {
	case o.SecAgg != "masking":
		return errors.New("sim: distributed DP-SGD runs under secure aggregation by masking")
	case o.DP == nil || o.DP.Unit != "identity":
		return errors.New("sim: distributed DP-SGD needs DP per identity")
	case o.Dropout != 0 || o.Stragglers != 0:
		return errors.New("sim: distributed DP-SGD is simulated without drop-outs or stragglers")
	case d.Batch < 1:
		return fmt.Errorf("sim: distributed DP-SGD's expected batch must be positive, got %d", d.Batch)
	case d.MinHonest < 0 || d.MinHonest == 1 || d.MinHonest > o.Partition.Clients:
		return fmt.Errorf("sim: distributed DP-SGD's T must be 0 (every client) or in [2, %d], got %d", o.Partition.Clients, d.MinHonest)
	}
	if d.MinHonest == 0 {
		d.MinHonest = o.Partition.Clients
	}
	o.MinUpdates = d.MinHonest
	return nil
}

// ddpServer is the coordinator's optimiser for distributed DP-SGD
// (fed/ddpserver, as veil fed coordinator's), built on the whole training
// set, and the T every client trusts.
type ddpServer struct {
	*ddpserver.Server
	T int
}

// newDDPServer builds the server and the plan every client is offered:
// its noise share is what the clients' common policy (T, the run's
// rounds, the budget) requires, and each client checks it.
func newDDPServer(o *Options, clients, dim int) (*ddpServer, error) {
	people := o.Data.Train.(train.Identified).Identities()
	q := math.Min(1, float64(o.DDP.Batch)/float64(people))
	T := o.DDP.MinHonest
	plan := ddp.Plan{Unit: dp.UnitIdentity, Delta: o.DP.Delta, Clip: o.DP.Clip, SamplingRate: q, Rounds: o.Rounds, Clients: clients,
		Threshold: T, Noise: 1, Dim: dim, Block: 1 << 14, Scale: 1 << 20, Bits: 32, WrapProb: 1e-9,
		ExpectedBatch: q * float64(people)}
	pol, err := ddpPolicy(o.DP, T, o.Rounds).Distributed()
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if plan.Noise, err = ddp.RequiredNoise(pol, plan); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s, err := ddpserver.New(ddpserver.Options{Model: o.Model, Optim: o.Optim, Plan: plan, MinHonest: T, Data: o.Data})
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return &ddpServer{Server: s, T: T}, nil
}

// ddpPolicy is a simulated client's policy under distributed DP-SGD: the
// run's budget, T and rounds.
func ddpPolicy(d *DP, T, rounds int) client.Policy {
	p := clientPolicy(d)
	p.SecAgg = client.SecAggPolicy{Require: true, MinHonest: T}
	p.DDP = client.DDPPolicy{Rounds: rounds}
	return p
}

// initial is the server's initial weights: the coordinator's first
// model.
func (d *ddpServer) initial() wire.Weights { return d.Weights() }

// options are the coordinator's distributed DP-SGD options.
func (d *ddpServer) options() *coord.DDPOptions {
	return &coord.DDPOptions{Plan: d.Plan(), Server: d.Server}
}

// ClippedSum passes a distributed round's clipped sum through, one client
// at a time as Train.
func (f *faulty) ClippedSum(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan ddp.Plan) ([]float32, error) {
	dt, ok := f.Trainer.(client.DistributedTrainer)
	if !ok {
		return nil, errors.New("sim: the trainer computes no clipped sums")
	}
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-f.sem }()
	return dt.ClippedSum(ctx, model, task, plan)
}
