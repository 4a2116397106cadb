package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/training"
)

// exitInterrupted is the exit status of a federation command stopped by
// SIGINT or SIGTERM before its run was over.
const exitInterrupted = 130

// newLogger returns the structured logger of a long-running command.
func newLogger(e *env, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(e.stderr, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(e.stderr, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

type coordinatorFlags struct {
	cfg                 ops.Config
	config              string
	logLevel, logFormat string
	json                bool
	memoryLimit         string
	// describers, if set, replace the face networks of --eval-data (tests).
	describers *training.Describers
}

func newFedCoordinatorCmd(e *env) *cobra.Command {
	cmd, _ := coordinatorCmd(e)
	return cmd
}

// coordinatorHelp is veil fed coordinator's --help.
const coordinatorHelp = `Serve the federation's coordinator over gRPC with mutual TLS until the
configured number of rounds have closed, then write the final model.

State: everything (enrolled clients with their budgets and ledgers, every
model version, the round log, the open round's running sum of accepted
updates) lives in the --state file (SQLite), changed one transaction at a
time. A coordinator stopped or killed at any moment continues where it
stopped when started again on the same --state: no accepted update is lost
or counted twice. The file is its owner's only (0600; a folder it creates,
0700); freed pages are zeroed and the write-ahead log is emptied whenever
the running sum changes, so a closed round's sum, and any single update,
cannot be read back from the file.

Model: --init is a checkpoint, from veil fed init-model (a new embedding
head, what veil fed client trains) or veil train (its parameters, by their
names, become the shared model; used only when --state is new). With --out the
final model is written as a checkpoint of the same network (fresh optimiser
state, not marked public), which veil embed/verify/compare --head can load
when the network is an embedding head. Under --dp, --init must be marked
public (veil fed init-model's is) or trained with DP-SGD only; a checkpoint
that may hold private data with no bound is refused.

Privacy record (--out, and "privacy" in --json): ε is the largest any one
client's releases spent, which holds for a person whose data one client
alone holds; a person in k clients' data (a friend in many users' photos)
is exposed to all k, and the record lists the ε for k = 1 ... all clients
(the k clients' mechanisms composed, worst case over which k). A DP-trained
--init's ε is added (basic composition, per the weaker unit) and its record
kept, saying whom each ε protects; rounds run without DP, and an --init
trained without DP, leave the model marked non-private for good.

Certificates: --pki DIR takes DIR/NAME.crt, DIR/NAME.key (NAME from --name,
default coordinator), DIR/ca.crt and DIR/revoked.crl; or give --cert, --key,
--ca and --crl. Revocations are re-read while serving. Without a revocation
list, or with one older (by its number) than the newest the coordinator has
accepted (kept in --state), every certificate is refused.

Address: --listen defaults to 127.0.0.1:7443, this machine only. To accept
clients from other machines listen on all interfaces (--listen 0.0.0.0:7443,
or [::]:7443) and issue the certificate for the name clients dial
(veil fed certs issue coordinator --role coordinator --host NAME).

Rounds: a round starts when --min-available clients have polled within
--available; it selects --fraction of them (at least --min-updates), sends
the task (--local-epochs or --local-steps, --lr, --batch; with --dp, DP-SGD
at --clip, --delta and --privacy-unit, and --noise-multiplier, or 0 to let
each client calibrate its noise to its own budget), and closes when every
selected client is counted or at the --deadline (failed below
--min-updates). Updates above --max-update-norm are refused. A client sends
one update stream at a time (a second is refused); a stream that sends
nothing for --stream-idle is ended; the buffers of updates being received
take at most --receive-budget-mib over all streams (beyond it a stream
waits, until its round's deadline).

Secure aggregation: with --secagg masking (SecAgg+ masking; the default
under --dp, which is the default, with fedavg, fedsgd and fedbuff) the
coordinator never sees an update in plaintext: it sees each client's
signed key advert, its encrypted shares for its neighbours, a masked
vector that alone is pseudorandom, and its unmasking shares, and it learns
only the sum, modulo 2^32, of the quantised updates of the round's
surviving clients (at least --secagg-threshold of them; a round with
fewer is abandoned without unmasking anything), which it decodes and
averages. It cannot check an update's norm: each client clips it to
--max-update-norm when it quantises. Rounds need at least 3 clients
(--min-available, which defaults to 3 under masking); clients must hold their federation certificates'
keys (they sign their adverts) and --secagg-min-honest is the T the
clients' policies are checked against (a client refuses a threshold
below its own T). Each phase (keys, shares, unmasking) has --secagg-phase
(default --deadline/6); the masked vectors are due one phase before
--deadline. With --secagg dphe (DPHE, Paillier encryption of sparse
updates) the key generator (veil fed keygen, --keygen and --keygen-name)
sets each round up; each client clips its update to --clip, adds its own
noise (--noise-multiplier, > 0) and a DP selection of at most --dphe-count
blocks, charged to its own ledger, and encrypts it; the coordinator
multiplies the ciphertexts and receives from the key generator only the
sum of at least 3 clients (a round with fewer decrypts nothing). With
--secagg off (the default only with --dp=false and with --strategy easgd,
which cannot be masked; otherwise it must be asked for) the coordinator
receives each client's clipped, noised update in plaintext.

Asynchronous strategies: with --strategy easgd or fedbuff there are no
rounds. Each client asks for an exchange when it is ready, trains on the
current model and sends its update; nobody waits for anyone, and --rounds
counts model versions. EASGD (Irene's Algorithm 1): a client trains
--easgd-period λ local steps on its own clock and sends its parameters x
(as x minus the model it was served); the coordinator moves the centre
x̃ ← x̃ + β(x − x̃), --easgd-beta β, one model version per exchange.
FedBuff: updates wait in a buffer and, when --fedbuff-size K have arrived,
the model moves by --server-lr (default 1) times their mean, each
weighted by 1/√(1 + s), s the versions it is behind. An update based on a
model more than --max-staleness versions old is refused, with the reason,
and changes nothing. --thin-p p serves each exchange a dropout-thinned
model (each fully connected unit but the output layer's kept with
probability 1 − p, chosen per exchange by a generator seeded from the
operating system's CSPRNG) and merges the update into the kept units only.
Each exchange gets every check a round's update gets (certificate,
SHA-256, layout, finite values, --max-update-norm, DP metadata, the
client's budget charged) and is stored in --state in one transaction
before it is acknowledged. With --secagg masking, FedBuff runs each
buffer as one masking round over --fedbuff-size K clients (K at least 3
and at least the threshold t): the coordinator sees only the buffer's
sum; buffers run one after another, so every update has staleness 0, and
a buffer left with fewer than t survivors is abandoned, unrevealed.
EASGD is refused with --secagg masking (each elastic exchange needs the
client's own parameters in plaintext), so --strategy easgd defaults to
--secagg off; --secagg dphe is refused with both, and --thin-p with masking
(pass --secagg off with it).

Distributed DP-SGD (--ddp): each round is one step of central DP-SGD over
the people of all the clients, instead of FedAvg of local training. Each
selected client Poisson-samples its people at q = --batch / --ddp-people,
sums their gradients clipped to --clip, adds its share of discrete Gaussian
noise and masks the result (--secagg masking, the default under --ddp; any
other --secagg is refused: a client's share alone is far less noise than
its DP needs, so the coordinator must see only sums). The coordinator
unmasks the sum of at least --secagg-threshold clients (at least T =
--secagg-min-honest), which carries the noise of at least T honest
clients, and takes veil train's optimiser step with it (--ddp-optimizer,
--ddp-lr, --ddp-weight-decay; --out writes the weights' moving average,
--ddp-ema). The noise share is calibrated so that --rounds rounds at T
honest clients spend --ddp-epsilon at --delta per --privacy-unit; each
client checks the plan against its own policy (its budget, T, clip and
rounds) and refuses a weaker one, and charges its own ledger. The
coordinator charges its copy of each client's ledger with the same
mechanism when it stores the client's masked vector, and refuses a
vector that would take the copy past the client's budget. The ε assumes
that at least T honest clients survive into every unmasked sum and that
the coordinator colludes with none of them. The server optimiser's state
is stored with each round's model, so a restarted coordinator continues
with exactly the same steps. --ddp needs --init (veil fed init-model's
embedding head).

Server learning rate: FedAvg adds --server-lr times the mean of the round's
updates. By default that is 1 without DP and, with --dp, √K rounded to a
whole number, K the updates in the round (3 for 8 clients), the setting
veil fed sim measured: each client's DP noise is averaged down by √K while
their common signal is not, and each client's optimiser scales its steps
to its own noise, so η = 1 would move the model √K times too little.
FedSGD has no default: give --server-lr (and --momentum).

Configuration file: --config FILE is JSON whose keys are these flags' names
(all but --config, --json and --log-*; e.g. {"state": "coord.db", "rounds":
20, "deadline": "5m", "dp": true}); unknown keys are refused, and flags
given on the command line win.

Evaluation: with --eval-data LFW_DIR the model is scored after every
aggregated round on LFW's development pairs (threshold on pairsDevTrain.txt,
accuracy on pairsDevTest.txt, as veil train scores), in the background;
veil fed status shows the last score.

Operations: structured logs (log/slog) on stderr (--log-level,
--log-format); the gRPC health service on the same port (it needs a
federation certificate like every call); with --metrics-listen ADDR,
Prometheus metrics at http://ADDR/metrics and a plain /healthz. The metrics
name clients and their ε, so over plain HTTP ADDR must be a loopback
address (127.0.0.1:9464, [::1]:9464, localhost:9464); with --metrics-tls
they are served at https://ADDR/metrics, any address, over mutual TLS with
the coordinator's certificate, to operator certificates only (veil fed
certs issue NAME --role operator). SIGINT or SIGTERM
stops gracefully (exit status 130; start again to continue). When the run
is over the coordinator keeps answering for up to --linger, so clients
learn it, then exits 0.`

// coordinatorCmd returns the command and the flags it fills.
func coordinatorCmd(e *env) (*cobra.Command, *coordinatorFlags) {
	f := &coordinatorFlags{cfg: ops.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Serve a federation: run its rounds, keep every client's ledger, write the final model",
		Long:  coordinatorHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.config != "" {
				if err := applyConfigFile(cmd.Flags(), f.config, &f.cfg); err != nil {
					return err
				}
			}
			return runFedCoordinator(cmd.Context(), e, f)
		},
	}
	c := &f.cfg
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "JSON configuration file (keys are these flags' names; flags override it)")
	fl.StringVar(&c.State, "state", "", "the coordinator's state file (SQLite; created if missing)")
	fl.StringVar(&c.PKI, "pki", "", "folder holding NAME.crt, NAME.key, ca.crt and revoked.crl")
	fl.StringVar(&c.Name, "name", c.Name, "the coordinator certificate's name in --pki")
	fl.StringVar(&c.Cert, "cert", "", "the coordinator's certificate (instead of --pki)")
	fl.StringVar(&c.Key, "key", "", "the coordinator's private key (instead of --pki)")
	fl.StringVar(&c.CA, "ca", "", "the authority's certificate (instead of --pki)")
	fl.StringVar(&c.CRL, "crl", "", "the authority's revocation list (default: revoked.crl beside --ca)")
	fl.StringVar(&c.Listen, "listen", c.Listen, "gRPC address (host:port); 0.0.0.0:7443 or [::]:7443 listens on all interfaces")
	fl.StringVar(&c.MetricsListen, "metrics-listen", "", "address of the HTTP /metrics and /healthz endpoint (a loopback one, e.g. 127.0.0.1:9464, unless --metrics-tls; empty: none)")
	fl.BoolVar(&c.MetricsTLS, "metrics-tls", false, "serve --metrics-listen over mutual TLS to operator certificates only (then any address)")
	fl.StringVar(&c.Init, "init", "", "the initial model: a checkpoint from veil fed init-model or veil train, under --dp marked public or DP-trained (needed when --state is new, and for --out)")
	fl.StringVar(&c.Out, "out", "", "write the final model here as a checkpoint of --init's network")
	fl.StringVar(&c.EvalData, "eval-data", "", "score the model after every aggregated round on the development pairs of this LFW-layout folder (needs --init, an embedding head; shown by veil fed status)")
	fl.StringVar(&c.CentreImages, "centre-images", "", "with --eval-data: public face photos the distillation targets are centred on (default: <data>/mtfl/net_7876)")
	fl.IntVar(&c.CentreCount, "centre-count", c.CentreCount, "with --eval-data: how many of --centre-images to average")
	registerRoundFlags(fl, c)
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.BoolVar(&f.json, "json", false, "print the run's summary as JSON")
	fl.StringVar(&f.memoryLimit, "memory-limit", "off", memoryLimitHelp)
	return cmd, f
}

// registerRoundFlags adds the coordinator's flags of its rounds: the
// strategy, the task and its DP, the limits.
func registerRoundFlags(fl *pflag.FlagSet, c *ops.Config) {
	fl.StringVar(&c.Strategy, "strategy", c.Strategy, "fedavg or fedsgd (rounds), or easgd or fedbuff (asynchronous exchanges)")
	fl.Float64Var(&c.EASGDBeta, "easgd-beta", c.EASGDBeta, "with --strategy easgd: the moving rate β in (0, 1] of x̃ ← x̃ + β(x − x̃)")
	fl.IntVar(&c.EASGDPeriod, "easgd-period", c.EASGDPeriod, "with --strategy easgd: the period λ, each client's local steps between exchanges")
	fl.IntVar(&c.FedBuffSize, "fedbuff-size", c.FedBuffSize, "with --strategy fedbuff: K, the updates buffered before the model moves")
	fl.IntVar(&c.MaxStaleness, "max-staleness", c.MaxStaleness, "with --strategy easgd or fedbuff: refuse an update based on a model more than this many versions old")
	fl.Float64Var(&c.ThinP, "thin-p", 0, "with --strategy easgd or fedbuff: serve dropout-thinned models, each fully connected unit (but the output layer's) left out with probability p in [0, 1) (0: whole models)")
	fl.StringVar(&c.Weighting, "weighting", "", "FedAvg's mean: uniform or examples (default: uniform with --dp, else examples)")
	fl.Float64Var(&c.ServerLR, "server-lr", 0, "server learning rate η (default for fedavg: with --dp the square root of the updates in the round, rounded (3 for 8), as veil fed sim; 1 with --dp=false; fedsgd: required)")
	fl.Float64Var(&c.Momentum, "momentum", 0, "FedSGD's server momentum in [0, 1)")
	fl.IntVar(&c.Rounds, "rounds", c.Rounds, "rounds to run (done or failed)")
	fl.Float64Var(&c.Fraction, "fraction", c.Fraction, "fraction of the available clients selected per round, in (0, 1]")
	fl.IntVar(&c.MinAvail, "min-available", c.MinAvail, "clients that must be available before a round starts (0: 3 under --secagg masking, which needs rounds of at least 3, else 2)")
	fl.IntVar(&c.MinUpdate, "min-updates", c.MinUpdate, "accepted updates a round needs by its deadline")
	fl.DurationVar((*time.Duration)(&c.Deadline), "deadline", time.Duration(c.Deadline), "a round's deadline after its start")
	fl.DurationVar((*time.Duration)(&c.Available), "available", time.Duration(c.Available), "a client counts as available if it polled this recently")
	fl.DurationVar((*time.Duration)(&c.Linger), "linger", time.Duration(c.Linger), "keep answering this long after the run is over so clients learn it (less once all have)")
	fl.BoolVar(&c.AwaitFinalDownload, "await-final-download", false, "linger (at most --linger) until every client has also downloaded the final model (a federation of libraries: veil library join adopts it)")
	fl.DurationVar((*time.Duration)(&c.StreamIdle), "stream-idle", time.Duration(c.StreamIdle), "end an update stream that sends nothing for this long")
	fl.IntVar(&c.ReceiveBudgetMiB, "receive-budget-mib", c.ReceiveBudgetMiB, "MiB of update buffers held at once over all streams (at least one update; a stream beyond it waits until its round's deadline)")
	fl.IntVar(&c.LocalEpochs, "local-epochs", c.LocalEpochs, "local epochs per round (FedAvg)")
	fl.IntVar(&c.LocalSteps, "local-steps", 0, "local steps per round (instead of epochs)")
	fl.Float64Var(&c.LR, "lr", c.LR, "clients' learning rate")
	fl.IntVar(&c.Batch, "batch", c.Batch, "clients' expected batch (privacy units per step under DP)")
	fl.BoolVar(&c.DP, "dp", c.DP, "clients must run DP-SGD (--dp=false: plain training, no privacy guarantee)")
	fl.Float64Var(&c.Clip, "clip", c.Clip, "DP-SGD clipping norm")
	fl.Float64Var(&c.Delta, "delta", c.Delta, "DP δ of every client's accounting")
	fl.StringVar(&c.Unit, "privacy-unit", c.Unit, "privacy unit: identity (all of a person's images) or example (one image)")
	fl.Float64Var(&c.NoiseMultiplier, "noise-multiplier", 0, "least DP-SGD noise multiplier σ (0: each client calibrates σ to its budget)")
	fl.Float64Var(&c.MaxUpdateNorm, "max-update-norm", c.MaxUpdateNorm, "refuse updates whose L2 norm is above this (with --secagg masking: clients clip to it)")
	fl.StringVar(&c.SecAgg, "secagg", c.SecAgg, "secure aggregation: masking (the coordinator sees only sums of at least t clients' updates), dphe (the key generator decrypts only sums of at least 3 clients' encrypted, noised, sparse updates) or off (each update in plaintext); default: masking under --dp (the default) or --ddp with fedavg, fedsgd or fedbuff, so the coordinator sees only sums of at least t clients' updates; off with --dp=false, and with easgd, which cannot be masked")
	fl.StringVar(&c.KeyGen, "keygen", "", "with --secagg dphe: the key generator's HOST:PORT (veil fed keygen)")
	fl.StringVar(&c.KeyGenName, "keygen-name", c.KeyGenName, "with --secagg dphe: the name on the key generator's certificate (clients trust only the name their owner configured)")
	fl.IntVar(&c.DPHECount, "dphe-count", c.DPHECount, "with --secagg dphe: the most blocks of coordinates each client's DP selection sends")
	fl.Float64Var(&c.DPHESelectionEpsilon, "dphe-selection-epsilon", c.DPHESelectionEpsilon, "with --secagg dphe: the ε of each client's DP selection of blocks (at --delta, per round)")
	fl.Float64Var(&c.DPHEThreshold, "dphe-threshold", c.DPHEThreshold, "with --secagg dphe: the selection's threshold on a block's norm")
	fl.IntVar(&c.SecAggMinHonest, "secagg-min-honest", c.SecAggMinHonest, "with --secagg masking: T, the least honest surviving clients assumed (2 … --min-updates)")
	fl.IntVar(&c.SecAggDegree, "secagg-degree", 0, "with --secagg masking: k, each client's neighbours (0: all up to 16 clients, 2⌈log₂ n⌉ beyond)")
	fl.IntVar(&c.SecAggThreshold, "secagg-threshold", 0, "with --secagg masking: t, the least survivors unmasked (0: the least t with 2t > k+1, at least T)")
	fl.DurationVar((*time.Duration)(&c.SecAggPhase), "secagg-phase", 0, "with --secagg masking: the deadline of each key, share and unmasking phase (0: --deadline/6)")
	registerDDPFlags(fl, &c.DDPConfig)
}

// registerDDPFlags adds the flags of distributed DP-SGD rounds (--ddp).
func registerDDPFlags(fl *pflag.FlagSet, d *ops.DDPConfig) {
	fl.BoolVar(&d.DDP, "ddp", false, "distributed DP-SGD: each round is one DP-SGD step over the federation's people, each client sending its clipped gradient sum with its share of the noise under --secagg masking; the coordinator takes the optimiser step")
	fl.IntVar(&d.DDPPeople, "ddp-people", 0, "with --ddp: the privacy units over the federation (the sampling rate is --batch / this)")
	fl.Float64Var(&d.DDPEpsilon, "ddp-epsilon", 0, "with --ddp: the ε per client (at --delta, over --rounds, at T = --secagg-min-honest) the noise share is calibrated for; each client checks it against its own budget")
	fl.IntVar(&d.DDPMaxClients, "ddp-max-clients", d.DDPMaxClients, "with --ddp: the most clients a round sums (the modulus' wrap bound); no round selects more")
	fl.StringVar(&d.DDPOptimizer, "ddp-optimizer", d.DDPOptimizer, "with --ddp: the server's optimiser, adam or sgd (veil train's)")
	fl.Float64Var(&d.DDPLR, "ddp-lr", d.DDPLR, "with --ddp: the server optimiser's learning rate")
	fl.Float64Var(&d.DDPWeightDecay, "ddp-weight-decay", d.DDPWeightDecay, "with --ddp: the server optimiser's weight decay")
	fl.Float64Var(&d.DDPEMA, "ddp-ema", d.DDPEMA, "with --ddp: the decay of the weights' moving average, which --out writes (0: the last weights)")
}

// applyConfigFile reads a JSON configuration into cfg, then sets again the
// flags given on the command line (which are bound to cfg's fields).
func applyConfigFile(fs *pflag.FlagSet, path string, cfg *ops.Config) error {
	given := map[string]string{}
	fs.Visit(func(fl *pflag.Flag) { given[fl.Name] = fl.Value.String() })
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer file.Close()
	if err := ops.DecodeConfig(file, cfg); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	for name, v := range given {
		if err := fs.Lookup(name).Value.Set(v); err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
	}
	return nil
}

// coordinatorSummary is veil fed coordinator's report.
type coordinatorSummary struct {
	State        string            `json:"state"`
	Rounds       int               `json:"rounds"`
	Done         int               `json:"rounds_done"`
	Failed       int               `json:"rounds_failed"`
	ModelVersion string            `json:"model_version"`
	Out          string            `json:"out,omitempty"`
	PrivacyUnit  string            `json:"privacy_unit,omitempty"`
	Delta        float64           `json:"delta,omitempty"`
	Clients      []fedClientStatus `json:"clients"`
	Evaluation   *fedEvaluation    `json:"last_evaluation,omitempty"`
	// Privacy says what the federation's ε means (absent without DP).
	Privacy *checkpoint.Federation `json:"privacy,omitempty"`
}

func runFedCoordinator(ctx context.Context, e *env, f *coordinatorFlags) error {
	log, err := newLogger(e, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	if err := applyMemoryLimit(f.memoryLimit); err != nil {
		return err
	}
	o := ops.CoordinatorOptions{Config: f.cfg, Logger: log, Evaluation: func(features string) (training.Describers, *engine.Engine, error) {
		return f.evaluation(e, features)
	}}
	if o.Config.CentreImages == "" {
		o.Config.CentreImages = filepath.Join(datadir.Default(), "mtfl", "net_7876")
	}
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := ops.RunCoordinator(sctx, o)
	var stopped *ops.StoppedError
	if errors.As(err, &stopped) {
		if ctx.Err() == nil {
			return &exitError{code: exitInterrupted, err: stopped}
		}
		return stopped.Err
	}
	if err != nil {
		return err
	}
	cfg := f.cfg
	sum := coordinatorSummary{State: cfg.State, Rounds: cfg.Rounds, ModelVersion: res.Status.GetModelVersion(), Clients: statusFromPB(res.Status).Clients,
		Done: res.Done, Failed: res.Failed, Out: res.Out, Privacy: res.Privacy, Evaluation: evaluationFromPB(res.Status.GetLastEvaluation())}
	if cfg.DP {
		sum.PrivacyUnit, sum.Delta = cfg.Unit, cfg.Delta
	}
	if f.json {
		return writeJSON(e.stdout, sum)
	}
	if cfg.Strategy == "easgd" || cfg.Strategy == "fedbuff" {
		fmt.Fprintf(e.stdout, "the run is over: %d model versions (%s); model %s\n", sum.Done, cfg.Strategy, shortVersion(sum.ModelVersion))
	} else {
		fmt.Fprintf(e.stdout, "the run is over: %d rounds done, %d failed; model %s\n", sum.Done, sum.Failed, shortVersion(sum.ModelVersion))
	}
	if sum.Out != "" {
		fmt.Fprintf(e.stdout, "final model written to %s\n", sum.Out)
	}
	for _, c := range sum.Clients {
		fmt.Fprintf(e.stdout, "client %s: %d updates, ε = %s of %g\n", c.ID, c.Updates, dp.FormatEpsilon(c.Epsilon), c.Budget)
	}
	if ev := sum.Evaluation; ev != nil {
		fmt.Fprintf(e.stdout, "development-pairs accuracy after %d rounds: %.4f\n", ev.Round, ev.Accuracy)
	}
	printFederationPrivacy(e.stdout, sum.Privacy)
	return nil
}

// printFederationPrivacy prints what the federation's ε means.
func printFederationPrivacy(w io.Writer, f *checkpoint.Federation) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "privacy: %s\n", f.Assumption)
	for _, k := range f.KClients {
		clients := "clients'"
		if k.K == 1 {
			clients = "client's"
		}
		fmt.Fprintf(w, "  in %d %s data: ε = %.4g", k.K, clients, k.Epsilon)
		if !k.Exact {
			fmt.Fprint(w, " (upper bound)")
		}
		if k.WithInit > 0 {
			fmt.Fprintf(w, "; also in the initial model's data: ε = %.4g", k.WithInit)
		}
		fmt.Fprintln(w)
	}
	if in := f.Init; in != nil && in.Note != "" {
		fmt.Fprintf(w, "initial model: %s\n", in.Note)
	}
}

func shortVersion(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}
