package ops

import (
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/ddpserver"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/training"
)

// DDPConfig are a coordinator's distributed DP-SGD settings (veil fed
// coordinator --ddp): every round is one step of central DP-SGD over the
// federation's people, each selected client sending its Poisson-sampled,
// clipped gradient sum with its share of the noise under SecAgg+ masking,
// and the coordinator taking veil train's optimiser step with the
// unmasked sum. The round's T is SecAggMinHonest, its clip Clip, its δ
// Delta, its unit Unit, its expected batch Batch, its rounds Rounds.
type DDPConfig struct {
	// DDP turns distributed DP-SGD on.
	DDP bool `json:"ddp"`
	// DDPPeople is the number of privacy units (people, or images per
	// example) over the federation: the sampling rate is Batch/DDPPeople.
	DDPPeople int `json:"ddp-people"`
	// DDPEpsilon is the budget each client's noise share is calibrated
	// for: Rounds rounds at T honest clients spend at most this ε at δ.
	// Each client checks the share against its own budget and refuses a
	// smaller one.
	DDPEpsilon float64 `json:"ddp-epsilon"`
	// DDPMaxClients is the most clients a round sums (the modulus' wrap
	// bound's n); a round never selects more.
	DDPMaxClients int `json:"ddp-max-clients"`
	// The server's optimiser (veil train's): DDPOptimizer adam or sgd,
	// DDPLR its learning rate, DDPWeightDecay, DDPEMA the decay of the
	// weights' moving average (written by --out; 0: none).
	DDPOptimizer   string  `json:"ddp-optimizer"`
	DDPLR          float64 `json:"ddp-lr"`
	DDPWeightDecay float64 `json:"ddp-weight-decay"`
	DDPEMA         float64 `json:"ddp-ema"`
}

// DefaultDDPConfig returns the defaults of veil fed coordinator's
// distributed DP-SGD flags: veil train's optimiser (Adam at 0.002, weight
// decay 5e-4, moving average 0.95), as veil fed sim --secagg masking.
func DefaultDDPConfig() DDPConfig {
	return DDPConfig{DDPMaxClients: 64, DDPOptimizer: "adam", DDPLR: 0.002, DDPWeightDecay: 5e-4, DDPEMA: 0.95}
}

// checkDDP checks the distributed DP-SGD settings in the words of the
// flags.
func (c *Config) checkDDP() error {
	d := c.DDPConfig
	if !d.DDP {
		return nil
	}
	switch {
	case c.SecAgg != "masking":
		return fmt.Errorf("--ddp needs --secagg masking (its default under --ddp), not %q: each client adds only its share of the noise, "+
			"so the coordinator must never see one client's sum, only the sum of at least T clients'", c.SecAgg)
	case !c.DP:
		return errors.New("--ddp is DP training: it cannot run with --dp=false")
	case c.Strategy != "fedavg" || c.ServerLR != 0 || c.Momentum != 0 || c.Weighting != "":
		return errors.New("--ddp steps the server's optimiser (--ddp-optimizer, --ddp-lr) with the clients' summed gradients: --strategy, --server-lr, --momentum and --weighting do not apply")
	case d.DDPPeople < 1:
		return fmt.Errorf("--ddp needs --ddp-people, the privacy units over the federation (the sampling rate is --batch / --ddp-people), got %d", d.DDPPeople)
	case !(d.DDPEpsilon > 0) || math.IsInf(d.DDPEpsilon, 0):
		return fmt.Errorf("--ddp needs --ddp-epsilon > 0, the budget the clients' noise share is calibrated for over --rounds, got %g", d.DDPEpsilon)
	case d.DDPMaxClients < c.MinAvail:
		return fmt.Errorf("--ddp-max-clients (%d) must be at least --min-available (%d)", d.DDPMaxClients, c.MinAvail)
	case d.DDPOptimizer != "adam" && d.DDPOptimizer != "sgd":
		return fmt.Errorf("--ddp-optimizer %q: want adam or sgd", d.DDPOptimizer)
	case !(d.DDPLR > 0) || math.IsInf(d.DDPLR, 0):
		return fmt.Errorf("--ddp-lr must be positive, got %g", d.DDPLR)
	case !(d.DDPWeightDecay >= 0) || math.IsInf(d.DDPWeightDecay, 0):
		return fmt.Errorf("--ddp-weight-decay must not be negative, got %g", d.DDPWeightDecay)
	case !(d.DDPEMA >= 0 && d.DDPEMA < 1):
		return fmt.Errorf("--ddp-ema must be in [0, 1), got %g", d.DDPEMA)
	case c.Init == "":
		return errors.New("--ddp needs --init, the embedding head the server's optimiser steps (veil fed init-model makes one)")
	}
	return nil
}

// ddpPlan is the rounds' plan: the clients' noise share is the least with
// which --rounds rounds at T honest clients spend at most --ddp-epsilon
// at --delta (ddp.RequiredNoise), on dim values.
func (c *Config) ddpPlan(dim int) (ddp.Plan, error) {
	d := c.DDPConfig
	T := c.SecAggMinHonest
	q := math.Min(1, float64(c.Batch)/float64(d.DDPPeople))
	plan := ddp.Plan{Unit: c.Unit, Delta: c.Delta, Clip: c.Clip, SamplingRate: q, Rounds: c.Rounds, Clients: d.DDPMaxClients,
		Threshold: max(T, c.SecAggThreshold), Noise: 1, Dim: dim, Block: 1 << 14, Scale: 1 << 20, Bits: 32, WrapProb: 1e-9,
		ExpectedBatch: q * float64(d.DDPPeople)}
	pol := ddp.Policy{Unit: c.Unit, Budget: dp.Budget{Epsilon: d.DDPEpsilon, Delta: c.Delta}, MaxClip: c.Clip, MaxSamplingRate: 1,
		MinHonest: T, Rounds: c.Rounds}
	var err error
	if plan.Noise, err = ddp.RequiredNoise(pol, plan); err != nil {
		return ddp.Plan{}, fmt.Errorf("--ddp-epsilon %g over --rounds %d: %w", d.DDPEpsilon, c.Rounds, err)
	}
	if err := plan.Validate(); err != nil {
		return ddp.Plan{}, fmt.Errorf("--ddp: %w", err)
	}
	return plan, nil
}

// ddpOptions are the coordinator's distributed DP-SGD options for the
// network of the initial checkpoint init (an embedding head): the plan
// and veil train's optimiser (fed/ddpserver), or nil without --ddp.
func (c *Config) ddpOptions(init *checkpoint.Checkpoint, co *coord.Options) (*coord.DDPOptions, *ddpserver.Server, error) {
	if !c.DDP {
		return nil, nil, nil
	}
	mc := init.Header.Model
	if mc.Kind != "head" || init.Header.Loss.Kind != "distill" {
		return nil, nil, fmt.Errorf("--ddp steps an embedding head with the distillation loss (veil fed init-model's); --init %s is a %q network with loss %q",
			c.Init, mc.Kind, init.Header.Loss.Kind)
	}
	plan, err := c.ddpPlan(co.Init.Len())
	if err != nil {
		return nil, nil, err
	}
	features := mc.Features
	if features == "" {
		features = "descriptor"
	}
	d := c.DDPConfig
	srv, err := ddpserver.New(ddpserver.Options{Model: training.ModelOptions{Kind: "head", Features: features, Loss: "distill"},
		Optim: training.OptimOptions{Optimizer: d.DDPOptimizer, LearningRate: d.DDPLR, WeightDecay: d.DDPWeightDecay, EMA: d.DDPEMA,
			Batch: c.Batch, MicroBatch: 32, Seed: 1},
		Plan: plan, MinHonest: c.SecAggMinHonest, Init: co.Init})
	if err != nil {
		return nil, nil, fmt.Errorf("--ddp: %w", err)
	}
	return &coord.DDPOptions{Plan: plan, Server: srv}, srv, nil
}
