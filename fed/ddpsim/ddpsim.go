// Package ddpsim runs distributed DP-SGD (package fed/ddp) in one process:
// N clients, each holding its own people of LFW's development training
// identities, and a coordinator that takes veil train's optimiser step with
// what secure aggregation would reveal. Each round every client that does
// not drop out charges its own privacy ledger (a real dp.LedgerDir in the
// run's folder, through ddp.Accepted.Charge), Poisson-samples its own
// people, computes the sum of their clipped gradients at the round's
// model, and encodes it with its discrete Gaussian noise share
// (ddp.Round.Encode, noise from crypto/rand); the coordinator adds the
// survivors' encodings modulo 2^32 — exactly what pairwise masking reveals,
// since the masks cancel in the sum — decodes the sum and takes the
// optimiser step of veil train (Adam, the sum over the expected batch, the
// weights' moving average for evaluation). The network is not simulated:
// the masking protocol itself is secagg/masking's (and, in a federation,
// fed/coord's and fed/client's).
//
// The gradient of every client is computed by one trainer at the round's
// model: what each client would compute from the model it downloads. The
// Poisson samples come from that trainer's CSPRNG: each person is sampled
// independently with probability q, as each client's own sampler would.
package ddpsim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/ddpserver"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/secagg/quant"
	"github.com/veil-privacy/veil/training"
)

// DefaultEpochs sets the default rounds: as many as veil train's steps in
// this many epochs (the main job's 20).
const DefaultEpochs = 20

// Options configure a run.
type Options struct {
	// Data are the whole training set (identity-labelled) and the
	// evaluation pairs, as training.LoadData reads them; Model and Optim
	// veil train's model and optimiser (Optim.Batch is the expected number
	// of people per round over the whole federation: q = Batch/N).
	Data  *training.Data
	Model training.ModelOptions
	Optim training.OptimOptions
	// Clients is n; PartitionSeed seeds the split of identities.
	Clients       int
	PartitionSeed uint64
	// Epsilon and Delta are each client's budget per identity; Clip is C.
	Epsilon, Delta, Clip float64
	// Rounds is the number of rounds, one DP-SGD step each (0: 20·⌈1/q⌉,
	// the steps of veil train's 20 epochs in the main job).
	Rounds int
	// Drop is how many clients drop out of each round (drawn with Seed),
	// before they train: they send nothing and are not charged.
	Drop int
	// MinHonest is T, each client's trusted number of honest clients per
	// sum (0: Clients − Drop); the threshold of secure aggregation is T.
	MinHonest int
	// MaxPerIdentity caps a sampled person's images per step (0: the
	// micro-batch).
	MaxPerIdentity int
	// Block, Scale, Bits and WrapProb are the quantisation's (0: 2^14,
	// 2^20, 32 and 1e-9).
	Block    int
	Scale    float64
	Bits     int
	WrapProb float64
	// Seed seeds the drop-outs (not privacy noise, not the samples).
	Seed uint64
	// Dir holds the clients' ledger folders (default: a temporary folder,
	// removed at the end).
	Dir string
	// Progress, if set, is told what happens.
	Progress func(string)
}

// Report is what a run measured.
type Report struct {
	Mode        string `json:"mode"`
	Clients     int    `json:"clients"`
	Rounds      int    `json:"rounds"`
	Drop        int    `json:"drop_per_round"`
	MinHonest   int    `json:"min_honest"`
	Threshold   int    `json:"threshold"`
	PrivacyUnit string `json:"privacy_unit"`
	// DevAccuracy is the development-pairs accuracy of the weights' moving
	// average (or the last weights without Optim.EMA), as veil train
	// scores; InitAccuracy as initialised.
	DevAccuracy  float64 `json:"dev_accuracy"`
	Threshold0   float64 `json:"threshold_distance"`
	InitAccuracy float64 `json:"init_accuracy"`
	// SamplingRate is q; NoiseShare each client's σ in lattice units;
	// Sensitivity C/γ + √D'; EffectiveMultiplier √T·σ/(C/γ + √D'), and
	// CentralMultiplier the σ of veil train's DP-SGD at the same q, rounds,
	// ε and δ.
	SamplingRate        float64 `json:"sampling_rate"`
	NoiseShare          uint64  `json:"noise_share"`
	Sensitivity         float64 `json:"sensitivity_lattice"`
	EffectiveMultiplier float64 `json:"effective_noise_multiplier"`
	CentralMultiplier   float64 `json:"central_noise_multiplier"`
	// EpsilonPerClient is what each client's ledger spent, at Delta.
	EpsilonPerClient map[string]float64 `json:"epsilon_per_client"`
	Delta            float64            `json:"delta"`
	// Mechanism names what was released each round, with its assumption.
	Mechanism  string `json:"mechanism"`
	Assumption string `json:"assumption"`
	// Model is the final weights' privacy record (the trainer's): its
	// steps, the worst client's ε and the mechanism with its assumption.
	Model train.Privacy `json:"model_privacy"`
	// Parameters is d, Padded D', Bits b.
	Parameters int     `json:"parameters"`
	Padded     int     `json:"padded"`
	Bits       int     `json:"bits"`
	WallS      float64 `json:"wall_s"`
}

func (o *Options) check() error {
	switch {
	case o.Data == nil || o.Data.Train == nil || o.Data.Pairs == nil:
		return errors.New("ddpsim: training data with evaluation pairs are required")
	case o.Clients < 1:
		return fmt.Errorf("ddpsim: at least one client, got %d", o.Clients)
	case o.Drop < 0 || o.Drop >= o.Clients:
		return fmt.Errorf("ddpsim: the clients dropping out of a round must be in [0, %d), got %d", o.Clients, o.Drop)
	case o.Rounds < 0:
		return fmt.Errorf("ddpsim: the number of rounds must be positive (0: the default), got %d", o.Rounds)
	case o.Optim.Batch < 1:
		return fmt.Errorf("ddpsim: the expected batch must be positive, got %d", o.Optim.Batch)
	case o.MinHonest < 0 || o.MinHonest > o.Clients-o.Drop:
		return fmt.Errorf("ddpsim: the trusted honest clients must be at most the %d that survive a round, got %d", o.Clients-o.Drop, o.MinHonest)
	}
	if o.MinHonest == 0 {
		o.MinHonest = o.Clients - o.Drop
	}
	if o.Block == 0 {
		o.Block = 1 << 14
	}
	if o.Scale == 0 {
		o.Scale = 1 << 20
	}
	if o.Bits == 0 {
		o.Bits = 32
	}
	if o.WrapProb == 0 {
		o.WrapProb = 1e-9
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return nil
}

// clientData is one client's people of the whole data set: its examples,
// served by the whole data (so a distillation label still indexes the
// whole data's targets), its people renumbered 0…n−1.
type clientData struct {
	full   training.Examples
	idx    []int
	ident  []int
	people int
	// members names the client's people (the ledger keeps keyed
	// fingerprints of them).
	members []string
}

func (c *clientData) Len() int           { return len(c.idx) }
func (c *clientData) Identity(i int) int { return c.ident[i] }
func (c *clientData) Identities() int    { return c.people }
func (c *clientData) Classes() int       { return c.full.Classes() }
func (c *clientData) Batch(idx []int, rng *mrand.Rand) ([]float32, []int32, error) {
	g := make([]int, len(idx))
	for k, i := range idx {
		if i < 0 || i >= len(c.idx) {
			return nil, nil, fmt.Errorf("ddpsim: example %d outside the client's %d", i, len(c.idx))
		}
		g[k] = c.idx[i]
	}
	return c.full.Batch(g, rng)
}

// split deals the identities out to the clients (disjoint people).
func split(d *training.Data, clients int, seed uint64) ([]*clientData, error) {
	id, ok := d.Train.(train.Identified)
	if !ok {
		return nil, errors.New("ddpsim: the training data must be labelled by identity")
	}
	parts, err := dataset.PartitionIdentities(id.Identities(), dataset.PartitionOptions{Clients: clients, Seed: seed})
	if err != nil {
		return nil, fmt.Errorf("ddpsim: %w", err)
	}
	if len(d.People) != d.Train.Len() {
		return nil, fmt.Errorf("ddpsim: the data name %d people for %d examples", len(d.People), d.Train.Len())
	}
	identity := make([]int, d.Train.Len())
	for i := range identity {
		identity[i] = id.Identity(i)
	}
	ex, err := dataset.ExamplesOf(identity, parts)
	if err != nil {
		return nil, fmt.Errorf("ddpsim: %w", err)
	}
	out := make([]*clientData, len(ex))
	for k, e := range ex {
		c := &clientData{full: d.Train, idx: e}
		local := map[int]int{}
		for _, i := range e {
			g := identity[i]
			if _, ok := local[g]; !ok {
				local[g] = len(local)
			}
			c.ident = append(c.ident, local[g])
		}
		c.people = len(local)
		seen := map[string]bool{}
		for _, i := range e {
			if p := d.People[i]; !seen[p] {
				seen[p] = true
				c.members = append(c.members, p)
			}
		}
		out[k] = c
	}
	return out, nil
}

// Run runs the federation and scores the final model.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if err := o.check(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "veil-ddp-sim-"); err != nil {
			return nil, fmt.Errorf("ddpsim: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	clients, err := split(o.Data, o.Clients, o.PartitionSeed)
	if err != nil {
		return nil, err
	}
	people := o.Data.Train.(train.Identified).Identities()
	q := math.Min(1, float64(o.Optim.Batch)/float64(people))
	rounds := o.Rounds
	if rounds == 0 {
		rounds = DefaultEpochs * int(math.Ceil(1/q))
	}
	// The number of values the model trains (a session without DP).
	probe, err := training.NewSession(o.Model, o.Optim, nil, 1, o.Data)
	if err != nil {
		return nil, fmt.Errorf("ddpsim: %w", err)
	}
	dim := probe.Trainable()
	// The coordinator's plan; its noise share is what the clients' common
	// policy requires, and every client checks it against its own.
	plan := ddp.Plan{Unit: dp.UnitIdentity, Delta: o.Delta, Clip: o.Clip, SamplingRate: q, Rounds: rounds, Clients: o.Clients,
		Threshold: o.MinHonest, Noise: 1, Dim: dim, Block: o.Block, Scale: o.Scale, Bits: o.Bits, WrapProb: o.WrapProb,
		ExpectedBatch: q * float64(people)}
	pol := ddp.Policy{Unit: dp.UnitIdentity, Budget: dp.Budget{Epsilon: o.Epsilon, Delta: o.Delta}, MaxClip: o.Clip, MaxSamplingRate: 1,
		MinHonest: o.MinHonest, Rounds: rounds}
	if plan.Noise, err = ddp.RequiredNoise(pol, plan); err != nil {
		return nil, err
	}
	// The coordinator's optimiser (fed/ddpserver, as veil fed
	// coordinator's): veil train's model, optimiser and sampling rate,
	// its record the mechanism's. Its session also computes each
	// client's clipped sum at the round's weights.
	srv, err := ddpserver.New(ddpserver.Options{Model: o.Model, Optim: o.Optim, Plan: plan, MinHonest: o.MinHonest, Data: o.Data,
		MaxPerIdentity: o.MaxPerIdentity})
	if err != nil {
		return nil, fmt.Errorf("ddpsim: %w", err)
	}
	s := srv.Session()
	rep := &Report{Mode: "distributed", Clients: o.Clients, Rounds: rounds, Drop: o.Drop, MinHonest: o.MinHonest, Threshold: o.MinHonest,
		PrivacyUnit: dp.UnitIdentity, SamplingRate: q, Delta: o.Delta, EpsilonPerClient: map[string]float64{}, Parameters: dim, Bits: o.Bits}
	if rep.InitAccuracy, _, err = s.Evaluate(); err != nil {
		return nil, err
	}
	o.Progress(fmt.Sprintf("development-pairs accuracy as initialised: %.4f", rep.InitAccuracy))
	mech := plan.Mechanism(o.MinHonest)
	rep.NoiseShare, rep.Sensitivity, rep.EffectiveMultiplier, rep.Padded = plan.Noise, plan.Sensitivity(), mech.EffectiveMultiplier(), plan.Padded()
	rep.Mechanism, rep.Assumption = mech.Label(), ddp.Assumption(o.MinHonest)
	if rep.CentralMultiplier, err = dp.DiscreteNoiseMultiplier(q, rounds, o.Epsilon, o.Delta); err != nil {
		return nil, err
	}
	type client struct {
		name    string
		data    *clientData
		dir     *dp.LedgerDir
		set     dp.DataSet
		members []string
		acc     *ddp.Accepted
	}
	cs := make([]*client, len(clients))
	for k, d := range clients {
		c := &client{name: fmt.Sprintf("client-%d", k+1), data: d, set: dp.DataSet{Name: "lfw", Unit: dp.UnitIdentity}}
		if c.dir, err = dp.OpenLedgerDir(filepath.Join(dir, c.name)); err != nil {
			return nil, fmt.Errorf("ddpsim: %w", err)
		}
		c.members = d.members
		if c.acc, err = ddp.Accept(pol, plan); err != nil {
			return nil, fmt.Errorf("ddpsim: %s refuses the plan: %w", c.name, err)
		}
		cs[k] = c
	}
	o.Progress(fmt.Sprintf("%d clients, %d rounds, q = %.4f, noise share σ = %d lattice units (σ_eff = %.5f; central %.5f), T = %d",
		o.Clients, rounds, q, plan.Noise, rep.EffectiveMultiplier, rep.CentralMultiplier, o.MinHonest))

	drops := mrand.New(mrand.NewPCG(o.Seed, 0xd409))
	var worst float64
	for r := range rounds {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var id [32]byte
		if _, err := rand.Read(id[:]); err != nil {
			return nil, fmt.Errorf("ddpsim: %w", err)
		}
		round, err := ddp.NewRound(plan, quant.RotationSeed(id))
		if err != nil {
			return nil, err
		}
		out := map[int]bool{}
		for _, k := range drops.Perm(o.Clients)[:o.Drop] {
			out[k] = true
		}
		sum := make([]uint32, round.Padded())
		var mu sync.Mutex
		var wg sync.WaitGroup
		var encErr error
		for k, c := range cs {
			if out[k] {
				continue
			}
			spent, err := c.acc.Charge(c.dir, c.set, c.members, fmt.Sprintf("ddpsim round %d", r+1))
			if err != nil {
				return nil, fmt.Errorf("ddpsim: %s: %w", c.name, err)
			}
			worst = max(worst, spent.Epsilon)
			g, err := s.ClippedSum(trainingData(c.data), o.Optim.Seed^uint64(r)<<8^uint64(k))
			if err != nil {
				return nil, fmt.Errorf("ddpsim: %s: %w", c.name, err)
			}
			// Encoding (rotation, rounding, noise) overlaps the next
			// client's gradient.
			wg.Add(1)
			go func() {
				defer wg.Done()
				enc, err := round.Encode(g, rand.Reader)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					err = ddp.Add(sum, enc)
				}
				if err != nil && encErr == nil {
					encErr = err
				}
			}()
		}
		wg.Wait()
		if encErr != nil {
			return nil, encErr
		}
		released, err := round.Decode(sum)
		if err != nil {
			return nil, err
		}
		if _, _, err := srv.Step(srv.Weights(), released, plan.ExpectedBatch, mech.Label()); err != nil {
			return nil, err
		}
		if (r+1)%max(1, rounds/10) == 0 {
			o.Progress(fmt.Sprintf("round %d/%d, worst client ε = %.4f", r+1, rounds, worst))
		}
	}
	for _, c := range cs {
		l, err := c.dir.Read(c.set)
		if err != nil {
			return nil, fmt.Errorf("ddpsim: %w", err)
		}
		sp, err := l.Spent(c.members)
		if err != nil {
			return nil, err
		}
		rep.EpsilonPerClient[c.name] = sp.Epsilon
	}
	rep.Model = srv.Privacy()
	if rep.DevAccuracy, rep.Threshold0, err = s.Evaluate(); err != nil {
		return nil, err
	}
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// trainingData wraps a client's data for the session.
func trainingData(c *clientData) *training.Data { return &training.Data{Train: c} }
