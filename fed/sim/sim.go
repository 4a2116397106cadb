// Package sim runs a federation in one process: a coordinator (package
// coord, its state in a SQLite file) and N clients (package client with
// package local's trainer), each client holding a partition of LFW's
// development training identities, all talking gRPC over real sockets on
// 127.0.0.1 with mutual TLS from a temporary certificate authority
// (package pki). Nothing is short-circuited: models and updates travel
// through the protocol, budgets are enforced by the clients' and the
// coordinator's ledgers.
//
// Faults are injected as a deployment would see them. Drop-outs: each
// client selected for a round sits it out with probability Dropout (no
// training, no charge, no update), drawn from a generator seeded per
// client. Stragglers: a fraction of the clients (chosen with the seed)
// train, then wait until the round's deadline has passed before sending,
// so their updates are refused as stale (their own ledgers have been
// charged; the coordinator's have not). A round with fewer than
// MinUpdates accepted updates at its deadline fails.
//
// The pure-Go backend runs one graph execution per core, so at most
// Parallel clients (default 2) train at once.
//
// # FedAvg under DP: noise per client, and the server learning rate
//
// Each client runs DP-SGD on its own people at its own budget: a step adds
// Gaussian noise of standard deviation σC to the sum of the clipped
// gradients of about b sampled people. The uniform mean of K clients'
// updates carries K independent noises, σC/(b√K) on the mean gradient,
// where central DP-SGD over the same K·b people at the same (ε, δ) adds
// σC/(Kb), √K times less. In the linear regime (σ roughly proportional to
// 1/ε) federated DP with a ledger per client is therefore central DP at
// about ε/√K (8/√8 ≈ 2.8 for 8 clients), and a client alone, noise σC/b
// on a K-th of the people, central DP at about ε/K. The federation sits
// between the two. Only aggregation under encryption, where the
// coordinator sees the sum alone and each client adds a K-th of the
// noise variance, would recover central DP's noise, and then a client's
// guarantee rests on that aggregation rather than on its own noise.
//
// The server learning rate η matters under DP because the clients' local
// optimiser is Adam, which divides each step by the running root mean
// square of the client's own gradients: under DP that is the client's
// noise, so a client's steps have a fixed size in units of its own noise.
// The mean of K clients' updates keeps their common signal and divides
// their noise by √K, so with η = 1 the model moves √K times less than an
// optimiser seeing the federation's mean gradient would move it; η ≈ √K
// restores that step. The default, package strategy's DefaultServerLR, is
// √K rounded under DP: 3 for veil fed sim's 8 clients, the setting measured.
//
// # The round average (EMA)
//
// With EMA β > 0 the simulation scores a moving average of the global
// models the rounds produced instead of the last one: after round t,
// avg ← d·avg + (1−d)·model with d = min(β, 1 − 1/t), i.e. the plain mean
// of all the rounds so far until the window 1/(1−β) is full, an
// exponential average after. Under DP each round's model carries the
// clients' fresh noise, and averaging the models of several rounds
// averages that noise down while the signal, common to consecutive
// rounds, stays: the federated counterpart of veil train's --ema. It is
// post-processing of models every client has received anyway, so it costs
// no privacy. The warm-up is over rounds rather than veil train's
// (1+t)/(10+t) over steps because a federation has few rounds: that rule
// would cap the average at a couple of rounds. Alone applies the same
// average to each client's own rounds, so the comparison stays fair.
package sim

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// DP are the clients' privacy settings.
type DP struct {
	// Epsilon is each client's budget; each client calibrates its noise
	// so that the run's rounds spend it.
	Epsilon, Delta float64
	// Clip is the clipping norm of one unit's gradient.
	Clip float64
	// Unit is "identity" (default) or "example".
	Unit string
	// MaxPerIdentity caps a sampled person's images per step (0: the
	// micro-batch).
	MaxPerIdentity int
}

// Options configure a simulation.
type Options struct {
	// Data are the whole training set and the evaluation pairs (as
	// training.LoadData reads them); Model and Optim veil train's model
	// and local optimiser (Optim.Seed also seeds the initial model).
	Data  *training.Data
	Model training.ModelOptions
	Optim training.OptimOptions
	// Partition splits the identities among Partition.Clients clients.
	Partition dataset.PartitionOptions
	// Strategy is "fedavg" or "fedsgd", or with Async its strategy
	// ("easgd" or "fedbuff").
	Strategy string
	// Async, if set, makes the coordinator asynchronous (coord.AsyncOptions):
	// Rounds then counts model versions, and each client exchanges with
	// it until they are made.
	Async  *coord.AsyncOptions
	Rounds int
	// LocalEpochs per round (FedAvg); Batch the expected local batch.
	LocalEpochs, Batch int
	// LearningRate is the clients' local learning rate; ServerLR and
	// Momentum the coordinator's (FedAvg: η, 0 for strategy.DefaultServerLR,
	// as veil fed coordinator; FedSGD: required).
	LearningRate, ServerLR, Momentum float64
	// DP, if set, makes every client run DP-SGD.
	DP *DP
	// Dropout is the probability a selected client sits a round out;
	// Stragglers the fraction of clients that always miss the deadline.
	Dropout, Stragglers float64
	// RoundTimeout is a round's deadline (default 10 minutes).
	RoundTimeout time.Duration
	// MinUpdates a round needs (default 1).
	MinUpdates int
	// Parallel is how many clients train at once (default 2).
	Parallel int
	// EMA, in [0, 1), scores a moving average of the rounds' models (see
	// the package documentation); 0 scores the last model.
	EMA float64
	// Curve also scores every round's model (and its average), at the
	// cost of one evaluation each.
	Curve bool
	// SecAgg is "masking" for rounds under SecAgg+ masking (the
	// coordinator sees only the sum of the surviving clients' quantised
	// updates; every client assumes T = 2 honest survivors) or "" / "off"
	// (updates in plaintext).
	SecAgg string
	// DDP, with SecAgg "masking", makes the rounds distributed DP-SGD
	// steps (DDP's documentation) instead of FedAvg or FedSGD.
	DDP *DDP
	// DPHE, with SecAgg "dphe" (required then), makes the rounds DPHE
	// rounds (DPHE's documentation).
	DPHE *DPHE
	// Seed seeds the fault injection.
	Seed uint64
	// Dir holds the state file, the CA and the clients' folders (default:
	// a temporary folder, removed at the end).
	Dir string
	// Progress, if set, is told what happens.
	Progress func(string)
	Logger   *slog.Logger
}

// The simulation's secure aggregation: every client assumes T = 2 honest
// surviving clients, and updates are quantised with clip 100.
const (
	secAggMinHonest = 2
	secAggClip      = 100
)

// pool is a certificate pool of one authority.
func pool(ca *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca)
	return p
}

// StrategyOptions are the options of the simulation's coordinator's
// strategy.
func (o *Options) StrategyOptions() strategy.Options {
	s := strategy.Options{Name: o.Strategy, DP: o.DP != nil, ServerLR: o.ServerLR, Momentum: o.Momentum}
	if o.SecAgg == "dphe" && s.ServerLR == 0 {
		s.Weighting, s.ServerLR = "uniform", 1 // the clients train without DP-SGD (DPHE's documentation)
	}
	return s
}

func (o *Options) validate() error {
	if o.Data == nil || o.Data.Train == nil || o.Data.Pairs == nil {
		return errors.New("sim: training data with evaluation pairs are required")
	}
	return o.Check()
}

// Check validates every option but Data and fills the defaults, so that a
// caller can refuse bad settings before it spends time loading the data;
// Run and Alone check again.
func (o *Options) Check() error {
	if o.Partition.Clients < 1 {
		return fmt.Errorf("sim: at least one client is required, got %d", o.Partition.Clients)
	}
	if !(o.Partition.Alpha >= 0) || math.IsInf(o.Partition.Alpha, 0) {
		return fmt.Errorf("sim: the Dirichlet concentration must be 0 (an even split) or positive and finite, got %g", o.Partition.Alpha)
	}
	if err := o.checkAsync(); err != nil {
		return err
	}
	if o.Async == nil && o.Strategy != "fedavg" && o.Strategy != "fedsgd" {
		return fmt.Errorf("sim: unknown strategy %q (want fedavg or fedsgd, or easgd or fedbuff with Async)", o.Strategy)
	}
	if o.Rounds < 1 {
		return fmt.Errorf("sim: the number of rounds must be positive, got %d", o.Rounds)
	}
	if (o.Strategy == "fedavg" || o.Strategy == "fedbuff") && o.LocalEpochs < 1 {
		return fmt.Errorf("sim: FedAvg needs at least one local epoch, got %d", o.LocalEpochs)
	}
	if o.Batch < 1 || !(o.LearningRate > 0) {
		return fmt.Errorf("sim: the batch and learning rate must be positive, got %d and %g", o.Batch, o.LearningRate)
	}
	if !(o.Dropout >= 0 && o.Dropout < 1) || !(o.Stragglers >= 0 && o.Stragglers <= 1) {
		return fmt.Errorf("sim: the drop-out probability must be in [0, 1) and the straggler fraction in [0, 1], got %g and %g", o.Dropout, o.Stragglers)
	}
	if _, err := strategy.New(o.StrategyOptions()); o.Async == nil && err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if d := o.DP; d != nil {
		if d.Unit == "" {
			d.Unit = "identity"
		}
		if d.Unit != "identity" && d.Unit != "example" {
			return fmt.Errorf("sim: unknown privacy unit %q (want identity or example)", d.Unit)
		}
		if d.MaxPerIdentity < 0 {
			return fmt.Errorf("sim: the cap on a person's images per step must not be negative, got %d", d.MaxPerIdentity)
		}
		if err := (dp.Budget{Epsilon: d.Epsilon, Delta: d.Delta}).Validate(); err != nil {
			return fmt.Errorf("sim: the clients' budget: %w", err)
		}
		if !(d.Clip > 0) || math.IsInf(d.Clip, 0) {
			return fmt.Errorf("sim: the clipping norm must be positive and finite, got %g", d.Clip)
		}
	}
	if o.RoundTimeout == 0 {
		o.RoundTimeout = 10 * time.Minute
	}
	switch o.SecAgg {
	case "", "off":
	case "masking":
		if o.Partition.Clients < 3 {
			return fmt.Errorf("sim: secure aggregation by masking needs at least 3 clients, got %d", o.Partition.Clients)
		}
		if o.MinUpdates == 0 {
			o.MinUpdates = secAggMinHonest
		}
		if o.MinUpdates < secAggMinHonest {
			return fmt.Errorf("sim: with secure aggregation a round needs at least T = %d updates, got %d", secAggMinHonest, o.MinUpdates)
		}
	case "dphe":
		if o.DPHE == nil {
			return errors.New("sim: --secagg dphe needs DPHE settings")
		}
	default:
		return fmt.Errorf("sim: secure aggregation %q (want masking, dphe or off)", o.SecAgg)
	}
	if o.DPHE != nil {
		if err := o.DPHE.check(o); err != nil {
			return err
		}
	}
	if o.DDP != nil {
		if err := o.DDP.check(o); err != nil {
			return err
		}
	}
	if o.MinUpdates == 0 {
		o.MinUpdates = 1
	}
	if o.MinUpdates < 1 || o.MinUpdates > o.Partition.Clients {
		return fmt.Errorf("sim: the updates a round needs must be between 1 and the %d clients, got %d", o.Partition.Clients, o.MinUpdates)
	}
	if o.RoundTimeout < 0 {
		return fmt.Errorf("sim: the round's deadline must be positive, got %v", o.RoundTimeout)
	}
	if o.Parallel == 0 {
		o.Parallel = 2
	}
	if o.Parallel < 1 {
		return fmt.Errorf("sim: the number of clients training at once must be positive, got %d", o.Parallel)
	}
	if !(o.EMA >= 0 && o.EMA < 1) {
		return fmt.Errorf("sim: the rounds' moving average decay must be in [0, 1), got %g", o.EMA)
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// DistributedStrategy is Report.Strategy under distributed DP-SGD.
const DistributedStrategy = "distributed-dp-sgd"

// Report is what a simulation measured.
type Report struct {
	// Strategy is the rounds' strategy, or DistributedStrategy under
	// distributed DP-SGD (Options.DDP), whose rounds are DP-SGD steps.
	Strategy string `json:"strategy"`
	// ServerLR is the coordinator's learning rate: a number, or the rule
	// of FedAvg's default under DP (strategy.DefaultServerLR); empty under
	// distributed DP-SGD, whose server takes veil train's optimiser step.
	ServerLR string `json:"server_lr"`
	Clients  int    `json:"clients"`
	Rounds   int    `json:"rounds"`
	// DevAccuracy is the final model's development-pairs accuracy
	// (threshold from the tuning pairs): the rounds' moving average with
	// EMA, else the last model. LastAccuracy is the last model's,
	// InitAccuracy the initial model's.
	DevAccuracy  float64 `json:"dev_accuracy"`
	Threshold    float64 `json:"threshold"`
	LastAccuracy float64 `json:"last_model_accuracy"`
	InitAccuracy float64 `json:"init_accuracy"`
	EMA          float64 `json:"ema,omitempty"`
	// RoundAccuracy and RoundEMAAccuracy score each successful round's
	// model and the moving average after it (Options.Curve).
	RoundAccuracy    []float64 `json:"round_accuracy,omitempty"`
	RoundEMAAccuracy []float64 `json:"round_ema_accuracy,omitempty"`
	// EpsilonPerClient is what each client's own ledger has spent, at
	// Delta, per PrivacyUnit (absent without DP).
	EpsilonPerClient map[string]float64 `json:"epsilon_per_client,omitempty"`
	Delta            float64            `json:"delta,omitempty"`
	PrivacyUnit      string             `json:"privacy_unit,omitempty"`
	// Privacy says what the federated model's ε means, from the
	// coordinator's ledgers (accepted updates): the ε of a person whose
	// data one client alone holds (the assumption, stated) and of a person
	// in k clients' data (absent without DP).
	Privacy *checkpoint.Federation `json:"privacy,omitempty"`
	// Mechanism is, under distributed DP-SGD (Options.DDP), the model's
	// privacy record: its steps, ε at the clients' T and δ, and the
	// mechanism with its trust assumption.
	Mechanism *train.Privacy `json:"model_privacy,omitempty"`
	// DPHE describes the release of a DPHE simulation (Options.DPHE).
	DPHE *DPHEReport `json:"dphe,omitempty"`
	// NoiseMultiplier and SamplingRate are each client's DP-SGD settings.
	NoiseMultiplier map[string]float64 `json:"noise_multiplier,omitempty"`
	SamplingRate    map[string]float64 `json:"sampling_rate,omitempty"`
	// IdentitiesPerClient and ImagesPerClient describe the partition.
	IdentitiesPerClient map[string]int `json:"identities_per_client"`
	ImagesPerClient     map[string]int `json:"images_per_client"`
	// BytesPerClientRound is the bytes on the wire (TLS records both ways,
	// polls included) per accepted update; UpdateBytes and ModelBytes the
	// payload of one update and one model.
	BytesPerClientRound float64 `json:"bytes_per_client_round"`
	UpdateBytes         int     `json:"update_bytes"`
	ModelBytes          int     `json:"model_bytes"`
	// Updates were accepted, Refused refused (stragglers' stale updates
	// among them), DropOuts rounds sat out.
	Updates  int `json:"updates"`
	Refused  int `json:"refused"`
	DropOuts int `json:"drop_outs"`
	// Stragglers names the clients that always missed the deadline.
	Stragglers   []string `json:"stragglers,omitempty"`
	FailedRounds int      `json:"failed_rounds"`
	// Parameters is the number of values a model (and an update) holds.
	Parameters int     `json:"parameters"`
	WallS      float64 `json:"wall_s"`
}

// metrics counts the coordinator's events.
type metrics struct {
	mu                sync.Mutex
	updates, refused  int
	failed            int
	updateBytes, outs int
	// done, if set, is called after each aggregated round.
	done func()
}

func (m *metrics) RoundClosed(state string, _, _ time.Duration) {
	m.mu.Lock()
	if state == "failed" {
		m.failed++
	}
	done := m.done
	m.mu.Unlock()
	if state == "done" && done != nil {
		done()
	}
}

// average is the moving average of the rounds' models (package
// documentation); rounds and curve keep every round's model and average
// when a curve is asked for.
type average struct {
	decay  float64
	t      int
	avg    wire.Weights
	curve  bool
	rounds []wire.Weights
	avgs   []wire.Weights
}

// add folds the model of one more round in.
func (a *average) add(model wire.Weights) {
	a.t++
	if a.avg == nil || a.decay == 0 {
		a.avg = model.Clone()
	} else {
		d := float32(min(a.decay, 1-1/float64(a.t)))
		for i := range a.avg {
			for j, v := range model[i].Values {
				a.avg[i].Values[j] = d*a.avg[i].Values[j] + (1-d)*v
			}
		}
	}
	if a.curve {
		a.rounds = append(a.rounds, model.Clone())
		a.avgs = append(a.avgs, a.avg.Clone())
	}
}

// score evaluates the curve's models.
func (a *average) score(eval *local.Evaluator) (rounds, avgs []float64, err error) {
	for k := range a.rounds {
		r, _, err := eval.Accuracy(a.rounds[k])
		if err != nil {
			return nil, nil, err
		}
		e, _, err := eval.Accuracy(a.avgs[k])
		if err != nil {
			return nil, nil, err
		}
		rounds, avgs = append(rounds, r), append(avgs, e)
	}
	return rounds, avgs, nil
}
func (m *metrics) UpdateAccepted(_ string, bytes int, _ float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updates++
	m.updateBytes = bytes
}
func (m *metrics) UpdateRefused(string) { m.mu.Lock(); m.refused++; m.mu.Unlock() }
func (m *metrics) BytesOut(n int)       { m.mu.Lock(); m.outs += n; m.mu.Unlock() }

// countingListener counts the bytes of every connection it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.n.Add(int64(k))
	return k, err
}

func (c countingConn) Write(b []byte) (int, error) {
	k, err := c.Conn.Write(b)
	c.n.Add(int64(k))
	return k, err
}

// faulty wraps a client's trainer: at most Parallel train at once, and a
// straggler waits past the deadline before answering.
type faulty struct {
	client.Trainer
	sem       chan struct{}
	straggler bool
}

func (f *faulty) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return client.Update{}, ctx.Err()
	}
	up, err := f.Trainer.Train(ctx, model, task, plan)
	<-f.sem
	if err == nil && f.straggler {
		select {
		case <-ctx.Done():
			return client.Update{}, ctx.Err()
		case <-time.After(time.Until(time.UnixMilli(task.GetDeadlineUnixMs())) + 200*time.Millisecond):
		}
	}
	return up, err
}

// Run runs the simulation and scores the final model.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if err := o.validate(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "veil-fed-sim-"); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	parts, err := local.Split(o.Data, o.Partition)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	eval, err := local.NewEvaluator(o.Model, o.Optim, o.Data)
	if err != nil {
		return nil, err
	}
	initial := eval.Initial()
	var dsrv *ddpServer
	if o.DDP != nil {
		if dsrv, err = newDDPServer(&o, len(parts), initial.Len()); err != nil {
			return nil, err
		}
		initial = dsrv.initial()
	}
	rep := &Report{Strategy: o.Strategy, ServerLR: o.StrategyOptions().ServerLRText(), Clients: len(parts), Rounds: o.Rounds, Parameters: initial.Len(),
		IdentitiesPerClient: map[string]int{}, ImagesPerClient: map[string]int{}}
	if o.DDP != nil {
		rep.Strategy, rep.ServerLR = DistributedStrategy, ""
	}
	if rep.InitAccuracy, _, err = eval.Accuracy(initial); err != nil {
		return nil, err
	}
	o.Progress(fmt.Sprintf("development-pairs accuracy as initialised: %.4f", rep.InitAccuracy))
	if o.DPHE != nil && o.DPHE.InProcess {
		for k, d := range parts {
			name := fmt.Sprintf("client-%d", k+1)
			rep.IdentitiesPerClient[name], rep.ImagesPerClient[name] = d.Identities, d.Train.Len()
		}
		if err := dpheLocal(ctx, o, parts, eval, rep, dir); err != nil {
			return nil, err
		}
		rep.WallS = time.Since(start).Seconds()
		return rep, nil
	}

	// A certificate authority, the coordinator's certificate and one per client.
	caDir := filepath.Join(dir, "pki")
	ca, err := pki.Init(caDir, "veil fed sim")
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if _, err := ca.Issue(pki.IssueOptions{Name: "coordinator", Role: pki.Server}); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	names := make([]string, len(parts))
	for k := range parts {
		names[k] = fmt.Sprintf("client-%d", k+1)
		if _, err := ca.Issue(pki.IssueOptions{Name: names[k], Role: pki.Client}); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
	}
	identity := func(name string) (*pki.Identity, error) {
		return pki.LoadIdentity(filepath.Join(caDir, name+".crt"), filepath.Join(caDir, name+".key"), filepath.Join(caDir, "ca.crt"))
	}

	// The coordinator.
	task := coord.Task{LocalEpochs: o.LocalEpochs, LearningRate: o.LearningRate, Batch: o.Batch}
	if o.Strategy == "fedsgd" {
		task.LocalEpochs, task.LocalSteps = 0, 1
	}
	if o.DP != nil && dsrv == nil && o.DPHE == nil {
		task.DP = &fedpb.DPParams{Clip: o.DP.Clip, Delta: o.DP.Delta, PrivacyUnit: o.DP.Unit}
	}
	// An update's norm: FedAvg's is bounded by the local steps' movement,
	// FedSGD's (a gradient) by the clip plus the noise; the bound only
	// screens out broken updates.
	met := &metrics{}
	avg := &average{decay: o.EMA, curve: o.Curve}
	copts := coord.Options{StatePath: filepath.Join(dir, "state.db"), Init: initial,
		Strategy: o.StrategyOptions(),
		Rounds:   o.Rounds, Fraction: 1, MinAvailable: len(parts), MinUpdates: o.MinUpdates, RoundTimeout: o.RoundTimeout,
		Task: task, MaxUpdateNorm: 1e6, Logger: o.Logger, Metrics: met}
	if o.Async != nil {
		a := *o.Async
		copts.Async = &a
	}
	if o.SecAgg == "masking" {
		// Under masking the bound is the clip of the clients'
		// quantisation, whose lattice step grows with it: 100 keeps the
		// step near 1e-7 for 8 clients, far below the updates' values.
		copts.MaxUpdateNorm = secAggClip
		copts.SecAgg = &coord.SecAggOptions{Mode: "masking", MinHonest: secAggMinHonest, Roots: pool(ca.Cert())}
		if dsrv != nil {
			copts.SecAgg.MinHonest, copts.SecAgg.DDP = dsrv.T, dsrv.options()
		}
	}
	if o.DPHE != nil {
		ks, kopts, err := startDPHE(ctx, &o, dir, ca, identity, initial.Len())
		if err != nil {
			return nil, err
		}
		defer ks.close()
		copts.DPHE = kopts
		rep.DPHE = o.DPHE.report(o.DP.Clip)
		o.Progress(fmt.Sprintf("DPHE: %d of %d blocks of %d lanes per client and round, σ = %.4f, C = %g, selection ε = %g",
			o.DPHE.Count, o.DPHE.blocks, o.DPHE.lanes, o.DPHE.NoiseMultiplier, o.DP.Clip, o.DPHE.SelectionEpsilon))
	}
	co, err := coord.New(copts)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	defer co.Close()
	met.mu.Lock()
	met.done = func() {
		m, _ := co.Model()
		avg.add(m)
	}
	met.mu.Unlock()
	sid, err := identity("coordinator")
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	rev := pki.NewRevocations(filepath.Join(caDir, "revoked.crl"), ca.Cert())
	srv := grpc.NewServer(append(co.ServerOptions(), grpc.Creds(credentials.NewTLS(pki.ServerTLS(sid, rev))))...)
	fedpb.RegisterCoordinatorServer(srv, co.Service(rev))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	var wireBytes atomic.Int64
	go srv.Serve(countingListener{Listener: ln, n: &wireBytes})
	defer srv.Stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	coordDone := make(chan error, 1)
	go func() { coordDone <- co.Run(ctx) }()

	// The clients.
	sem := make(chan struct{}, o.Parallel)
	frng := rand.New(rand.NewPCG(o.Seed, 0x57a6))
	stragglers := map[int]bool{}
	for _, k := range frng.Perm(len(parts))[:int(math.Round(o.Stragglers*float64(len(parts))))] {
		stragglers[k] = true
	}
	type running struct {
		c  *client.Client
		tr *local.Trainer
	}
	clients := make([]running, len(parts))
	var dropMu sync.Mutex
	for k, d := range parts {
		name := names[k]
		if stragglers[k] {
			rep.Stragglers = append(rep.Stragglers, name)
		}
		rep.IdentitiesPerClient[name], rep.ImagesPerClient[name] = d.Identities, d.Train.Len()
		pol := clientPolicy(o.DP)
		tr, err := local.New(local.Options{Model: o.Model, Optim: o.Optim, Data: d, MaxPerIdentity: maxPer(o.DP),
			MinNoiseMultiplier: pol.MinNoiseMultiplier})
		if err != nil {
			return nil, fmt.Errorf("sim: %s: %w", name, err)
		}
		cid, err := identity(name)
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		if o.SecAgg == "masking" {
			pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: secAggMinHonest}
		}
		if dsrv != nil {
			pol = ddpPolicy(o.DP, dsrv.T, o.Rounds)
		}
		var dopts client.DPHEOptions
		if o.DPHE != nil {
			dopts = o.DPHE.dpheClient()
		}
		drops := rand.New(rand.NewPCG(o.Seed, uint64(k)+1))
		decided := map[uint64]bool{}
		c, err := client.New(client.Options{Addr: ln.Addr().String(), Creds: credentials.NewTLS(pki.ClientTLS(cid, "localhost")),
			Policy: pol, Identity: cid, Dir: filepath.Join(dir, "clients", name),
			// Each simulated client is a silo of its own: its own ledger
			// folder, charged for the people of its part.
			LedgerDir: filepath.Join(dir, "clients", name, "ledgers"), DataSet: d.Name, Members: d.Members(train.Unit(pol.Unit)),
			Trainer: &faulty{Trainer: tr, sem: sem, straggler: stragglers[k]}, Logger: o.Logger, DPHE: dopts,
			Progress: func(ev string) { o.Progress(name + ": " + ev) },
			SitOut: func(t *fedpb.RoundConfig) bool {
				if o.Dropout == 0 {
					return false
				}
				dropMu.Lock()
				defer dropMu.Unlock()
				out, ok := decided[t.GetRound()]
				if !ok {
					out = drops.Float64() < o.Dropout
					decided[t.GetRound()] = out
					if out {
						rep.DropOuts++
					}
				}
				return out
			}})
		if err != nil {
			return nil, fmt.Errorf("sim: %s: %w", name, err)
		}
		defer c.Close()
		clients[k] = running{c: c, tr: tr}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for k, r := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = r.c.Run(ctx)
		}()
	}
	var coordErr error
	select {
	case coordErr = <-coordDone:
	case <-ctx.Done():
		coordErr = ctx.Err()
	}
	if coordErr != nil {
		cancel()
		wg.Wait()
		return nil, fmt.Errorf("sim: the coordinator: %w", coordErr)
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil && !errors.Is(err, client.ErrBudgetExhausted) {
			return nil, fmt.Errorf("sim: %s: %w", names[k], err)
		}
	}

	final, _ := co.Model()
	if err := rep.score(&o, final, avg, eval); err != nil {
		return nil, err
	}
	met.mu.Lock()
	rep.Updates, rep.Refused, rep.FailedRounds, rep.UpdateBytes = met.updates, met.refused, met.failed, met.updateBytes
	met.mu.Unlock()
	rep.ModelBytes = 4 * initial.Len()
	if rep.Updates > 0 {
		rep.BytesPerClientRound = float64(wireBytes.Load()) / float64(rep.Updates)
	}
	if o.DP != nil {
		rep.Delta, rep.PrivacyUnit = o.DP.Delta, o.DP.Unit
		rep.EpsilonPerClient, rep.NoiseMultiplier, rep.SamplingRate = map[string]float64{}, map[string]float64{}, map[string]float64{}
		for k, r := range clients {
			s, err := r.c.Spent()
			if err != nil {
				return nil, err
			}
			rep.EpsilonPerClient[names[k]] = s.Epsilon
			if o.DPHE != nil {
				rep.NoiseMultiplier[names[k]] = o.DPHE.NoiseMultiplier
			} else if p := r.tr.Mechanism(); p != nil {
				rep.NoiseMultiplier[names[k]], rep.SamplingRate[names[k]] = p.GetNoiseMultiplier(), p.GetSamplingRate()
			}
		}
		if rep.Privacy, _, err = ops.ReadFederationPrivacy(ctx, filepath.Join(dir, "state.db")); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		if dsrv != nil {
			// The server's record: its steps, ε at T and σ_eff.
			p := dsrv.Privacy()
			rep.Mechanism = &p
		}
	}
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// score scores the final model, the rounds' average (EMA) and the curve
// into r.
func (r *Report) score(o *Options, final wire.Weights, avg *average, eval *local.Evaluator) error {
	var err error
	if r.LastAccuracy, r.Threshold, err = eval.Accuracy(final); err != nil {
		return err
	}
	r.DevAccuracy = r.LastAccuracy
	if o.EMA > 0 && avg.avg != nil {
		r.EMA = o.EMA
		if r.DevAccuracy, r.Threshold, err = eval.Accuracy(avg.avg); err != nil {
			return err
		}
	}
	r.RoundAccuracy, r.RoundEMAAccuracy, err = avg.score(eval)
	return err
}

func maxPer(d *DP) int {
	if d == nil {
		return 0
	}
	return d.MaxPerIdentity
}

// Names lists a report's clients in order.
func (r *Report) Names() []string {
	var n []string
	for k := range r.IdentitiesPerClient {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// AloneReport is what the clients reach each on its own: the same local
// training, rounds and budget, without the federation.
type AloneReport struct {
	Strategy string `json:"strategy"`
	Clients  int    `json:"clients"`
	Rounds   int    `json:"rounds"`
	// Accuracy is each client's final development-pairs accuracy (of
	// the moving average of its rounds' models with EMA, as in Run); Mean
	// and Best summarise them. LastAccuracy is each client's last model's.
	Accuracy         map[string]float64 `json:"accuracy"`
	MeanAccuracy     float64            `json:"mean_accuracy"`
	BestAccuracy     float64            `json:"best_accuracy"`
	LastAccuracy     map[string]float64 `json:"last_model_accuracy"`
	MeanLastAccuracy float64            `json:"mean_last_model_accuracy"`
	InitAccuracy     float64            `json:"init_accuracy"`
	EMA              float64            `json:"ema,omitempty"`
	EpsilonPerClient map[string]float64 `json:"epsilon_per_client,omitempty"`
	Delta            float64            `json:"delta,omitempty"`
	PrivacyUnit      string             `json:"privacy_unit,omitempty"`
	WallS            float64            `json:"wall_s"`
}

// Alone trains every client of o on its own partition, as it would in the
// federation (the same trainer, rounds, local epochs and budget; its own
// update applied to its own model each round, server learning rate 1), and
// scores each final model. Each round is charged to the client's ledger
// before it trains, as package client does. Clients train one after
// another, up to o.Parallel at once.
func Alone(ctx context.Context, o Options) (*AloneReport, error) {
	start := time.Now()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Strategy != "fedavg" {
		return nil, errors.New("sim: a client alone trains as in FedAvg (its own epochs); FedSGD has no meaning for one client")
	}
	parts, err := local.Split(o.Data, o.Partition)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	eval, err := local.NewEvaluator(o.Model, o.Optim, o.Data)
	if err != nil {
		return nil, err
	}
	initial := eval.Initial()
	var dsrv *ddpServer
	if o.DDP != nil {
		if dsrv, err = newDDPServer(&o, len(parts), initial.Len()); err != nil {
			return nil, err
		}
		initial = dsrv.initial()
	}
	rep := &AloneReport{Strategy: o.Strategy, Clients: len(parts), Rounds: o.Rounds, Accuracy: map[string]float64{},
		LastAccuracy: map[string]float64{}, EMA: o.EMA}
	if rep.InitAccuracy, _, err = eval.Accuracy(initial); err != nil {
		return nil, err
	}
	task := &fedpb.RoundConfig{Strategy: "fedavg", LocalEpochs: uint32(o.LocalEpochs), Batch: uint32(o.Batch), LearningRate: o.LearningRate,
		Rounds: uint64(o.Rounds)}
	if o.DP != nil {
		task.Dp = &fedpb.DPParams{Clip: o.DP.Clip, Delta: o.DP.Delta, PrivacyUnit: o.DP.Unit}
		rep.EpsilonPerClient, rep.Delta, rep.PrivacyUnit = map[string]float64{}, o.DP.Delta, o.DP.Unit
	}
	type result struct {
		acc, last, eps float64
		err            error
	}
	results := make([]result, len(parts))
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for k, d := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[k].acc, results[k].last, results[k].eps, results[k].err = alone(ctx, o, d, task, initial, eval)
		}()
	}
	wg.Wait()
	var sum, sumLast float64
	for k, r := range results {
		name := fmt.Sprintf("client-%d", k+1)
		if r.err != nil {
			return nil, fmt.Errorf("sim: %s alone: %w", name, r.err)
		}
		rep.Accuracy[name], rep.LastAccuracy[name] = r.acc, r.last
		sum += r.acc
		sumLast += r.last
		rep.BestAccuracy = max(rep.BestAccuracy, r.acc)
		if o.DP != nil {
			rep.EpsilonPerClient[name] = r.eps
		}
	}
	rep.MeanAccuracy = sum / float64(len(parts))
	rep.MeanLastAccuracy = sumLast / float64(len(parts))
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// clientPolicy is the policy of every simulated client: the simulation's
// DP settings (unit, budget, clip; σ calibrated by each client to its
// budget with no floor, any sampling rate), or, without DP, rounds
// without DP allowed.
func clientPolicy(d *DP) client.Policy {
	if d == nil {
		p := client.DefaultPolicy(dp.Budget{Epsilon: 1e9, Delta: 1e-5})
		p.AllowNoDP = true
		return p
	}
	p := client.DefaultPolicy(dp.Budget{Epsilon: d.Epsilon, Delta: d.Delta})
	p.Unit, p.MaxClip, p.MinNoiseMultiplier = d.Unit, d.Clip, 0
	return p
}

// alone trains one client's rounds on its own and returns its accuracy
// (of the rounds' moving average with EMA), its last model's and the ε its
// ledger spent.
func alone(ctx context.Context, o Options, d *training.Data, task *fedpb.RoundConfig, initial wire.Weights, eval *local.Evaluator) (acc, last, eps float64, err error) {
	tr, err := local.New(local.Options{Model: o.Model, Optim: o.Optim, Data: d, MaxPerIdentity: maxPer(o.DP)})
	if err != nil {
		return 0, 0, 0, err
	}
	var ledger *dp.Ledger
	if o.DP != nil {
		if ledger, err = dp.NewLedger(dp.LedgerOptions{}); err != nil {
			return 0, 0, 0, err
		}
		if err := ledger.SetBudget("self", dp.Budget{Epsilon: o.DP.Epsilon, Delta: o.DP.Delta}); err != nil {
			return 0, 0, 0, err
		}
	}
	avg := &average{decay: o.EMA}
	model := initial.Clone()
	var s dp.Spent
	for r := 1; r <= o.Rounds; r++ {
		t := proto.Clone(task).(*fedpb.RoundConfig)
		t.Round = uint64(r)
		var plan *fedpb.DPParams
		if ledger != nil {
			if s, err = ledger.Spent("self"); err != nil {
				return 0, 0, 0, err
			}
			if plan, err = tr.Plan(t, o.DP.Epsilon-s.Epsilon); err != nil {
				return 0, 0, 0, err
			}
			ev, err := client.Event(plan, tr.Dimension())
			if err != nil {
				return 0, 0, 0, err
			}
			if s, err = ledger.Charge("self", ev); err != nil {
				return 0, 0, 0, err
			}
		}
		up, err := tr.Train(ctx, model, t, plan)
		if err != nil {
			return 0, 0, 0, err
		}
		for i := range model {
			for j := range model[i].Values {
				model[i].Values[j] += up.Weights[i].Values[j]
			}
		}
		avg.add(model)
	}
	if last, _, err = eval.Accuracy(model); err != nil {
		return 0, 0, 0, err
	}
	acc = last
	if o.EMA > 0 {
		if acc, _, err = eval.Accuracy(avg.avg); err != nil {
			return 0, 0, 0, err
		}
	}
	return acc, last, s.Epsilon, nil
}
