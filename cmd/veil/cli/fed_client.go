package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// exitBudget is veil fed client's exit status when the next round would
// take it past its privacy budget; exitPolicy when a round is outside the
// owner's privacy policy.
const (
	exitBudget = 4
	exitPolicy = 5
)

type clientFlags struct {
	addr, serverName            string
	pkiDir, name, cert, key, ca string
	budgetEps, budgetDelta      float64
	minNoise, maxClip, maxRate  float64
	allowNoDP                   bool
	requireSecAgg, sparseGraphs bool
	keygenName                  string
	minHonest                   int
	ddpRounds                   int
	unit, dir, data, trainer    string
	ledgerDir, dataSet          string
	retryFor, trainDelay        time.Duration
	fixedDelta                  float64
	logLevel, logFormat         string
	json                        bool

	// The local trainer (--trainer local).
	partition, optimizer, centreDir  string
	alpha, weightDecay               float64
	partitionSeed, seed              uint64
	minImages, maxPeople, microBatch int
	centreCount, maxPerIdentity      int
	head                             headFlags
	// describers, if set, replace the face networks (tests).
	describers *training.Describers
}

func newFedClientCmd(e *env) *cobra.Command {
	cmd, _ := clientCmd(e)
	return cmd
}

// clientHelp is veil fed client's --help.
const clientHelp = `Join the coordinator at --coordinator over mutual TLS, wait to be selected,
train each round's task on the data in --data with DP-SGD, and send back
only the update. Exits 0 when the coordinator says the run is over.

Data and model: --data is an LFW-layout folder (peopleDevTrain.txt, the
development pairs files, one folder of images per person); the client trains
on part K of N of its identities (--partition K/N, the split veil fed sim
makes, the same on every machine for the same --alpha and --partition-seed),
and describes only that part's images.
The network is veil fed sim's: an embedding head on --features (agegender by
default: face-api's public age/gender features) learning each image's
face-pipeline descriptor (distillation), trained by package training as veil
train trains. The coordinator's --init must be a checkpoint of that network:
veil fed init-model makes one (or veil train --model head --features
agegender --loss distill).

Identity: --pki DIR with --name NAME takes DIR/NAME.crt, DIR/NAME.key and
DIR/ca.crt (the files veil fed certs issue NAME made); or give --cert, --key
and --ca. The certificate's name is this client's id in the federation.

Privacy: --budget-epsilon and --budget-delta are this client's total budget
(in --privacy-unit: identity protects all of a person's images, example one
image); the coordinator records it at the first join and it cannot change.
They are this client's policy, with the least noise multiplier
(--min-noise-multiplier), the largest clip (--max-clip) and sampling rate
(--max-sampling-rate) it accepts: the owner sets it, not the coordinator. A
round outside it (without DP, another unit, a δ above --budget-delta, less
noise, a larger clip or sampling rate) is refused before any data are
touched: the client says which setting, leaves its ledger as it was, sends
nothing and exits with status 5. Rounds without DP are refused unless
--allow-no-dp is given (no privacy guarantee for this client's data).
Secure aggregation: the client takes part in masking rounds (veil fed
coordinator --secagg masking), signing its key advert with its certificate's
key, only if their threshold t is at least --secagg-min-honest (T, the
honest surviving clients it assumes); with --require-secagg it refuses any
round the coordinator would see its update in (--secagg off). With
--ddp-rounds N it takes part in distributed DP-SGD rounds (veil fed
coordinator --ddp) whose plan adds a noise share large enough for N rounds,
with T = --secagg-min-honest honest clients, to fit in --budget-epsilon.
The client charges the privacy ledger of its data set (--dataset, lfw by
default, in --privacy-unit) in the ledger folder (--ledger-dir; default
$VEIL_LEDGERS, else ~/.local/share/veil/ledgers), the ledger veil train and
veil privacy dplc charge too, for the people of its part: a person's ε
composes every command that used them, and a fresh --dir is not a fresh
budget. The ledger's budget is set by the first command to charge the data
set; --budget-epsilon may lower it, never raise it once anything is charged
(veil privacy ledger reset). Before training in a round the client works
out what the round would cost, charges the ledger before touching the data,
and stops with exit status 4 when a round would take one of its people past
the budget. The coordinator keeps a ledger for this client too and refuses
updates beyond the budget.

The client holds one stream open to the coordinator, which pushes it each
round's task the moment the round opens: it never polls. A round it refuses
(its budget, its policy) it declines, naming the reason (a setting's name,
nothing else), so the round does not wait for it.

Reliability: while the coordinator is unreachable (restarting, network
down) the client reconnects with backoff for --retry-for, then gives up:
that bounds the whole wait, each attempt's included (a coordinator that
accepts connections but never answers costs --retry-for, not a connect
timeout per attempt). A round's update is trained once: if sending it
failed, the same update is sent again when the coordinator offers the round
again, at no new privacy cost.

Progress goes to stderr (--quiet: none); logs are structured (log/slog).`

// clientCmd returns the command and the flags it fills.
func clientCmd(e *env) (*cobra.Command, *clientFlags) {
	f := &clientFlags{}
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Join a federation and train on a data folder under a privacy budget",
		Long:  clientHelp,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runFedClient(cmd.Context(), e, f) },
	}
	fl := cmd.Flags()
	f.registerIdentity(fl, "this client's", "the coordinator's host:port")
	fl.Float64Var(&f.budgetEps, "budget-epsilon", 0, "this client's total privacy budget ε per --privacy-unit, over every round of the federation (required)")
	fl.Float64Var(&f.budgetDelta, "budget-delta", 1e-5, "this client's δ; a round asking for a larger δ is refused")
	fl.StringVar(&f.unit, "privacy-unit", client.DefaultUnit, "privacy unit: identity (all of a person's images) or example (one image); a round with the other unit is refused")
	fl.Float64Var(&f.minNoise, "min-noise-multiplier", client.DefaultMinNoiseMultiplier, "least DP-SGD noise multiplier σ this client runs (noise σ·clip per step); a round asking for less is refused, and σ calibrated to the budget is raised to it (0: no floor beyond the budget)")
	fl.Float64Var(&f.maxClip, "max-clip", client.DefaultMaxClip, "largest DP-SGD clipping norm this client accepts")
	fl.Float64Var(&f.maxRate, "max-sampling-rate", client.DefaultMaxSamplingRate, "largest share q of this client's privacy units sampled per step, in (0, 1] (the ledger charges the q a round runs; lower it to refuse rounds whose batch samples more)")
	fl.StringVar(&f.keygenName, "keygen-name", "", "take part in DPHE rounds (veil fed coordinator --secagg dphe) whose key generator's certificate carries this name (default: refuse DPHE rounds)")
	fl.BoolVar(&f.requireSecAgg, "require-secagg", false, "refuse rounds without secure aggregation (where the coordinator would see this client's update)")
	fl.BoolVar(&f.sparseGraphs, "secagg-sparse-graphs", false, "take part in masking rounds on a sparse graph (SecAgg+) even where the coordinator's choice of its seed could surround this client with the n − T clients that may collude (default: refuse them; the complete graph, the coordinator's default up to 16 clients, is always accepted)")
	fl.IntVar(&f.minHonest, "secagg-min-honest", 2, "T: the least honest surviving clients this client assumes in a secure round, for masking and distributed DP alike; a threshold t below it is refused")
	fl.IntVar(&f.ddpRounds, "ddp-rounds", 0, "take part in distributed DP-SGD rounds (veil fed coordinator --ddp), whose noise share must make this many rounds, at T = --secagg-min-honest honest clients, fit in --budget-epsilon (0: refuse them)")
	fl.BoolVar(&f.allowNoDP, "allow-no-dp", false, "take part in rounds without differential privacy (no privacy guarantee for this client's data; default: refuse them)")
	fl.StringVar(&f.dir, "dir", "", "this client's folder: the last model it received (required; created)")
	addLedgerDirFlag(fl, &f.ledgerDir)
	fl.StringVar(&f.dataSet, "dataset", "lfw", "the data set --data holds, whose privacy ledger is charged (shared with veil train and veil privacy dplc)")
	fl.StringVar(&f.data, "data", "", "this client's data: an LFW-layout folder (peopleDevTrain.txt, pairs files, one folder of images per person; default <data>/lfw)")
	fl.StringVar(&f.partition, "partition", "1/1", "train on part K of N of --data's identities (K/N; the parts are disjoint and the same on every machine for the same --alpha and --partition-seed)")
	fl.Float64Var(&f.alpha, "alpha", 0, "Dirichlet concentration of the parts' shares of identities (0: an even split)")
	fl.Uint64Var(&f.partitionSeed, "partition-seed", 1, "seed of the split into parts")
	fl.IntVar(&f.minImages, "min-images", 1, "use identities with at least this many images")
	fl.IntVar(&f.maxPeople, "max-people", 0, "use at most this many of --data's identities before the split (0: all)")
	fl.IntVar(&f.microBatch, "micro-batch", 32, "examples per graph execution")
	fl.StringVar(&f.optimizer, "optimizer", "adam", "FedAvg's local optimiser: sgd or adam (the learning rate and batch are the round's)")
	fl.Float64Var(&f.weightDecay, "weight-decay", 5e-4, "FedAvg's local weight decay")
	fl.IntVar(&f.maxPerIdentity, "max-per-identity", 0, "identity unit: at most this many of a sampled person's images per step (0: --micro-batch)")
	fl.StringVar(&f.centreDir, "centre-images", "", "public face photos whose mean descriptor centres the distillation targets (default: <data>/mtfl/net_7876)")
	fl.IntVar(&f.centreCount, "centre-count", 512, "how many of --centre-images to average")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the data order (not of the privacy noise)")
	registerFedHead(cmd, &f.head)
	fl.StringVar(&f.trainer, "trainer", "local", "local trainer")
	fl.DurationVar(&f.trainDelay, "train-delay", 0, "--trainer fixed: time a round's training takes")
	fl.Float64Var(&f.fixedDelta, "fixed-delta", 0.01, "--trainer fixed: the update's value in every coordinate")
	// --trainer fixed sends a deterministic update without reading data:
	// for tests of the protocol and of the coordinator's crash safety.
	for _, n := range []string{"trainer", "train-delay", "fixed-delta"} {
		_ = fl.MarkHidden(n)
	}
	fl.DurationVar(&f.retryFor, "retry-for", 2*time.Minute, "keep retrying an unreachable coordinator this long in all, every attempt included (0: try once, for up to 2s)")
	fl.StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.BoolVar(&f.json, "json", false, "print the client's final report as JSON")
	return cmd, f
}

// clientReport is veil fed client's report.
type clientReport struct {
	Client        string  `json:"client"`
	Outcome       string  `json:"outcome"` // done, budget_exhausted, refused
	EpsilonSpent  float64 `json:"epsilon_spent"`
	BudgetEpsilon float64 `json:"budget_epsilon"`
	Delta         float64 `json:"delta"`
	PrivacyUnit   string  `json:"privacy_unit"`
	Ledger        string  `json:"ledger"`
	// Refusal says why a round was refused (outcome refused): the
	// setting of the client's policy and the flag that sets it.
	Refusal string `json:"refusal,omitempty"`
}

func runFedClient(ctx context.Context, e *env, f *clientFlags) error {
	log, err := newLogger(e, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	policy, err := f.policy()
	if err != nil {
		return err
	}
	id, serverName, err := dialIdentity(f.addr, f.serverName, f.pkiDir, f.name, f.cert, f.key, f.ca)
	if err != nil {
		return err
	}
	tr, members, err := clientTrainer(e, f)
	if err != nil {
		return err
	}
	ledgers, err := ledgerDir(f.ledgerDir)
	if err != nil {
		return err
	}
	name := id.Leaf.Subject.CommonName
	progress := func(msg string) {
		if !f.head.quiet {
			fmt.Fprintf(e.stderr, "veil fed client %s: %s\n", name, msg)
		}
	}
	reconnectFor := f.retryFor
	if reconnectFor == 0 {
		reconnectFor = -1 // try once (client.FirstJoinTimeout), no more
	}
	c, err := client.New(client.Options{Addr: f.addr, ServerName: serverName, Name: name, Creds: credentials.NewTLS(pki.ClientTLS(id, serverName)),
		Policy: policy, Identity: id, Dir: f.dir, Trainer: tr, Logger: log, LedgerDir: ledgers, DataSet: f.dataSet, Members: members,
		Progress: progress, ReconnectFor: reconnectFor, DPHE: client.DPHEOptions{KeyGenName: f.keygenName}})
	if err != nil {
		return err
	}
	defer c.Close()
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	runErr := c.Run(sctx)
	rep := clientReport{Client: name, BudgetEpsilon: f.budgetEps, Delta: f.budgetDelta, PrivacyUnit: f.unit, Ledger: c.LedgerPath()}
	if s, err := c.Spent(); err == nil {
		rep.EpsilonSpent = s.Epsilon
	}
	if sctx.Err() != nil && ctx.Err() == nil && runErr != nil && !errors.Is(runErr, client.ErrBudgetExhausted) && !errors.Is(runErr, client.ErrPolicy) {
		return &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted (spent ε = %s of %g); start again with the same --dir to continue", dp.FormatEpsilon(rep.EpsilonSpent), f.budgetEps)}
	}
	return f.report(e, rep, runErr)
}

// policy checks the flags of veil fed client and returns its owner's
// privacy policy.
func (f *clientFlags) policy() (client.Policy, error) {
	var err error
	switch {
	case f.addr == "":
		err = errors.New("--coordinator is required")
	case f.dir == "":
		err = errors.New("--dir is required: the client's model lives there")
	case f.budgetEps == 0:
		err = errors.New("--budget-epsilon is required: this client's total privacy budget ε")
	case !(f.budgetEps > 0) || math.IsInf(f.budgetEps, 0):
		err = fmt.Errorf("--budget-epsilon must be a positive number, got %g", f.budgetEps)
	case !(f.budgetDelta > 0 && f.budgetDelta < 1):
		err = fmt.Errorf("--budget-delta must be in (0, 1), got %g", f.budgetDelta)
	case f.unit != "identity" && f.unit != "example":
		err = fmt.Errorf("--privacy-unit %q: want identity (all of a person's images) or example (one image)", f.unit)
	case !(f.minNoise >= 0) || math.IsInf(f.minNoise, 0):
		err = fmt.Errorf("--min-noise-multiplier must be a finite number ≥ 0, got %g", f.minNoise)
	case !(f.maxClip > 0) || math.IsInf(f.maxClip, 0):
		err = fmt.Errorf("--max-clip must be positive and finite, got %g", f.maxClip)
	case !(f.maxRate > 0 && f.maxRate <= 1):
		err = fmt.Errorf("--max-sampling-rate must be in (0, 1], got %g", f.maxRate)
	case f.retryFor < 0:
		err = errors.New("--retry-for must not be negative")
	}
	p := client.Policy{Unit: f.unit, Budget: dp.Budget{Epsilon: f.budgetEps, Delta: f.budgetDelta}, MinNoiseMultiplier: f.minNoise,
		MaxClip: f.maxClip, MaxSamplingRate: f.maxRate, AllowNoDP: f.allowNoDP,
		SecAgg: client.SecAggPolicy{Require: f.requireSecAgg, MinHonest: f.minHonest, SparseGraphs: f.sparseGraphs}, DDP: client.DDPPolicy{Rounds: f.ddpRounds}}
	if err == nil && (f.minHonest < 2 || f.minHonest > 1<<16) {
		err = fmt.Errorf("--secagg-min-honest must be at least 2, got %d", f.minHonest)
	}
	if err == nil && f.ddpRounds < 0 {
		err = fmt.Errorf("--ddp-rounds must not be negative, got %d", f.ddpRounds)
	}
	return p, err
}

// report prints the client's report for the outcome of its run (runErr)
// and returns the command's exit status.
func (f *clientFlags) report(e *env, rep clientReport, runErr error) error {
	var gave *client.GaveUpError
	var pe *client.PolicyError
	switch {
	case runErr == nil:
		rep.Outcome = "done"
	case errors.Is(runErr, client.ErrBudgetExhausted):
		rep.Outcome = "budget_exhausted"
	case errors.Is(runErr, client.ErrPolicy):
		rep.Outcome = "refused"
		if errors.As(runErr, &pe) {
			runErr = fmt.Errorf("%w (%s)", runErr, policyFlag[pe.Setting])
		}
		rep.Refusal = runErr.Error()
	case errors.As(runErr, &gave):
		return fmt.Errorf("gave up after trying for %s (--retry-for): %w", f.retryFor, gave.Err)
	default:
		return runErr
	}
	if f.json {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "client %s: %s, spent ε = %s of %g (δ = %g, per %s)\n", rep.Client, rep.Outcome, dp.FormatEpsilon(rep.EpsilonSpent), f.budgetEps, f.budgetDelta, f.unit)
	}
	switch {
	case rep.Outcome == "refused":
		return &exitError{code: exitPolicy, err: runErr}
	case runErr != nil:
		return &exitError{code: exitBudget, err: runErr}
	}
	return nil
}

// policyFlag is the flag that sets each setting of the client's policy.
var policyFlag = map[client.Setting]string{
	client.SettingDP:           "--allow-no-dp",
	client.SettingUnit:         "--privacy-unit",
	client.SettingDelta:        "--budget-delta",
	client.SettingNoise:        "--min-noise-multiplier",
	client.SettingClip:         "--max-clip",
	client.SettingSamplingRate: "--max-sampling-rate",
	client.SettingSteps:        "the trainer's plan",
	client.SettingSecAgg:       "--require-secagg",
	client.SettingThreshold:    "--secagg-min-honest",
	client.SettingBits:         "the smallest modulus (16 bits)",
	client.SettingSecAggNoise:  "the round's quantisation",
	client.SettingDDP:          "--ddp-rounds",
}

// clientTrainer returns the trainer --trainer names and the members of
// the data it trains on (nil: it cannot name them, so every member of the
// data set is charged).
func clientTrainer(e *env, f *clientFlags) (client.Trainer, []string, error) {
	switch f.trainer {
	case "fixed":
		return fixedTrainer{delta: float32(f.fixedDelta), delay: f.trainDelay, minSigma: f.minNoise}, nil, nil
	case "local":
		return localTrainer(e, f)
	}
	return nil, nil, fmt.Errorf("--trainer %q: unknown", f.trainer)
}

// parsePart reads --partition K/N.
func parsePart(s string) (k, n int, err error) {
	if _, err := fmt.Sscanf(s, "%d/%d", &k, &n); err != nil || n < 1 || k < 1 || k > n || fmt.Sprintf("%d/%d", k, n) != s {
		return 0, 0, fmt.Errorf("--partition %q: want K/N with 1 ≤ K ≤ N", s)
	}
	return k, n, nil
}

// localTrainer loads this client's part of the data and builds the
// federated trainer on it: the embedding head of veil fed sim (--features,
// the distillation loss), trained by package training as veil train does.
// It returns the members of the part (its people, or its images under the
// example unit).
func localTrainer(e *env, f *clientFlags) (client.Trainer, []string, error) {
	k, n, err := parsePart(f.partition)
	if err != nil {
		return nil, nil, err
	}
	m := training.ModelOptions{Kind: "head", Features: f.head.features, Loss: "distill"}
	o := training.OptimOptions{Batch: 32, MicroBatch: f.microBatch, Optimizer: f.optimizer, LearningRate: 0.01,
		WeightDecay: f.weightDecay, Seed: f.seed}
	if o.Engine, err = e.engine(); err != nil {
		return nil, nil, err
	}
	f.head.engine = o.Engine
	// Only this client's identities are read and described.
	d := local.DataOptions{LFW: f.data, MinImages: f.minImages, MaxPeople: f.maxPeople, CentreImages: f.centreDir, CentreCount: f.centreCount,
		Part:       &training.DataPart{Index: k - 1, Options: dataset.PartitionOptions{Clients: n, Alpha: f.alpha, Seed: f.partitionSeed}},
		Describers: training.Describers{Inputs: f.head.openInputs, Teacher: f.head.openDescriber}}
	if f.describers != nil {
		d.Describers = *f.describers
	}
	draw := &trainProgress{w: e.stderr, quiet: f.head.quiet}
	d.Progress = draw.event
	data, err := local.LoadData(m, o, d)
	draw.finish()
	if err != nil {
		return nil, nil, err
	}
	tr, err := local.New(local.Options{Model: m, Optim: o, Data: data, MaxPerIdentity: f.maxPerIdentity, MinNoiseMultiplier: f.minNoise})
	if err != nil {
		return nil, nil, err
	}
	return tr, data.Members(train.Unit(f.unit)), nil
}

// fixedTrainer is the hidden --trainer fixed: its update is delta in every
// coordinate, and it states DP-SGD with σ = 1 (or the round's or the
// owner's least σ, if larger),
// q = 0.1 and the round's steps (10 per local epoch when the round gives
// epochs). It reads no data: it exists to test the protocol and the
// coordinator's crash safety with real processes, quickly.
type fixedTrainer struct {
	delta    float32
	delay    time.Duration
	minSigma float64
}

func (f fixedTrainer) Plan(task *fedpb.RoundConfig, _ float64) (*fedpb.DPParams, error) {
	d := task.GetDp()
	steps := uint64(task.GetLocalSteps())
	if steps == 0 {
		steps = 10 * uint64(task.GetLocalEpochs())
	}
	return &fedpb.DPParams{NoiseMultiplier: max(1, f.minSigma, d.GetNoiseMultiplier()), Clip: d.GetClip(), SamplingRate: 0.1, Steps: steps,
		Delta: d.GetDelta(), PrivacyUnit: d.GetPrivacyUnit()}, nil
}

func (f fixedTrainer) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	select {
	case <-ctx.Done():
		return client.Update{}, ctx.Err()
	case <-time.After(f.delay):
	}
	up := model.Clone()
	for i := range up {
		for j := range up[i].Values {
			up[i].Values[j] = f.delta
		}
	}
	u := client.Update{Weights: up, DP: plan}
	if task.GetDp() == nil {
		u.Examples = 1
	}
	return u, nil
}
