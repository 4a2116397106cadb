package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/sim"
	"github.com/veil-privacy/veil/training"
)

type fedSimFlags struct {
	clients, rounds, localEpochs, batch, microBatch, minImages, parallel, minUpdates int
	centreCount, maxPerIdentity, maxPeople                                           int
	strategy, data, centreDir, optimizer, unit, dir                                  string
	targetEps, delta, clip, dropout, stragglers, alpha                               float64
	lr, serverLR, momentum, weightDecay, ema                                         float64
	noDP, json, alone, curve                                                         bool
	seed, partitionSeed                                                              uint64
	roundTimeout                                                                     time.Duration
	head                                                                             headFlags
	secagg                                                                           fedSimSecagg
	async                                                                            fedSimAsync
}

func newFedSimCmd(e *env) *cobra.Command {
	cmd, _ := fedSimCmd(e)
	return cmd
}

// fedSimHelp is veil fed sim's --help.
const fedSimHelp = `Run a coordinator and --clients clients in one process, talking gRPC over real
sockets on 127.0.0.1 with mutual TLS from a temporary certificate authority,
the coordinator's state in a temporary SQLite file. LFW's development
training identities are split among the clients, each person's images going
to exactly one client: evenly, or skewed with --alpha (each client's share of
identities drawn from a Dirichlet(α) distribution). Every client trains veil
train's embedding head on public age/gender features by distillation
(the setting in which DP-SGD learns), at most --parallel at once.

--strategy fedavg: each round every client trains --local-epochs epochs from
the round's model and sends the difference of weights; the coordinator adds
their uniform mean times --server-lr, by default (as veil fed coordinator's)
under DP the square root of the updates in the round rounded to a whole
number, 3 for 8 clients (each client's Adam scales its steps to its own
noise, and the mean of K clients' noises is √K smaller), and 1 without DP.
--strategy fedsgd: each client sends one gradient over all its data (one
plain SGD step, B = ∞) and the coordinator takes an SGD step with momentum
(--server-lr, 1 by default here, and --momentum).
--strategy easgd or fedbuff: no rounds; each client exchanges with the
coordinator whenever it is ready (veil fed coordinator --help, Asynchronous
strategies): EASGD with --easgd-beta and --easgd-period, FedBuff with
--fedbuff-size; --max-staleness bounds an update's staleness; --rounds
counts model versions, and each client calibrates its noise as if it made
every exchange of the run.

Under DP (the default; --no-dp turns it off) every client has a budget of
--target-epsilon at --delta per --privacy-unit (identity: all the images of
one person) and calibrates its own noise so that all --rounds rounds spend it,
with q = min(1, --batch / its number of people) (FedSGD: q = 1). Each client's
ledger is charged before it touches its data; the coordinator charges its own
copy for every update it accepts.

Faults: --dropout P makes each selected client sit a round out with
probability P (no training, no charge); --stragglers F makes that fraction of
the clients always miss the deadline (--round-timeout): their updates are
refused. A round with fewer than --min-updates updates fails.

The final model is scored on the development pairs exactly as veil train
scores its model. --json prints the report: strategy, clients, rounds,
dev_accuracy, epsilon_per_client, delta, bytes_per_client_round (bytes on
the wire, TLS included, per accepted update), failed_rounds, wall_s and
more. Under DP, privacy says what the model's ε means: epsilon_one_client
(the largest ε one client spent) holds for a person whose data one client
alone holds; epsilon_k_clients gives the ε of a person in k clients' data
(their mechanisms composed by Rényi DP, up to all clients).`

// fedSimCmd returns the command and the flags it fills.
func fedSimCmd(e *env) (*cobra.Command, *fedSimFlags) {
	f := &fedSimFlags{}
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate a federation in one process: a coordinator and N clients over gRPC with mutual TLS on loopback",
		Long:  fedSimHelp,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runFedSim(e, cmd, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.clients, "clients", 8, "number of clients (each with its own identities)")
	fl.StringVar(&f.strategy, "strategy", "fedavg", "fedavg or fedsgd (rounds), or easgd or fedbuff (asynchronous exchanges)")
	fl.IntVar(&f.rounds, "rounds", 20, "rounds (each client's budget is spread over all of them)")
	fl.IntVar(&f.localEpochs, "local-epochs", 1, "FedAvg: local epochs per round")
	fl.IntVar(&f.batch, "batch", 64, "expected local batch (under DP, of people: q = batch / the client's people, at most 1)")
	fl.IntVar(&f.microBatch, "micro-batch", 32, "examples per graph execution")
	fl.Float64Var(&f.lr, "lr", 0.002, "local learning rate (FedAvg: of --optimizer; FedSGD: of the one SGD step, which the update divides out)")
	fl.StringVar(&f.optimizer, "optimizer", "adam", "FedAvg's local optimiser: sgd or adam")
	fl.Float64Var(&f.weightDecay, "weight-decay", 5e-4, "FedAvg's local weight decay")
	fl.Float64Var(&f.serverLR, "server-lr", 0, "the coordinator's learning rate η (default: FedAvg under DP √(updates per round) rounded, 3 for 8 clients, and 1 without DP; FedSGD 1)")
	fl.Float64Var(&f.momentum, "momentum", 0.9, "FedSGD: the coordinator's momentum")
	fl.BoolVar(&f.noDP, "no-dp", false, "train without DP-SGD (no privacy: the reference)")
	fl.Float64Var(&f.targetEps, "target-epsilon", 8, "each client's privacy budget ε per --privacy-unit, spent over all the rounds")
	fl.Float64Var(&f.delta, "delta", 1e-5, "δ of each client's budget")
	fl.Float64Var(&f.clip, "clip", 1, "DP-SGD clipping norm of one unit's gradient")
	fl.StringVar(&f.unit, "privacy-unit", "identity", "what DP protects: identity (all of a person's images) or example (one image)")
	fl.IntVar(&f.maxPerIdentity, "max-per-identity", 0, "identity unit: at most this many of a sampled person's images per step (0: --micro-batch)")
	fl.Float64Var(&f.dropout, "dropout", 0, "probability that a selected client sits a round out")
	fl.Float64Var(&f.stragglers, "stragglers", 0, "fraction of the clients that always miss the round's deadline")
	fl.DurationVar(&f.roundTimeout, "round-timeout", 10*time.Minute, "a round's deadline after its start")
	fl.IntVar(&f.minUpdates, "min-updates", 1, "updates a round needs; fewer by the deadline fail it")
	fl.Float64Var(&f.alpha, "alpha", 0, "Dirichlet concentration of the clients' shares of identities (0: an even split)")
	fl.Uint64Var(&f.partitionSeed, "partition-seed", 1, "seed of the split of identities")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the initial model, data order and fault injection (not of privacy noise)")
	fl.IntVar(&f.parallel, "parallel", 2, "clients training at once")
	fl.StringVar(&f.data, "data", "", "LFW folder (default: <data>/lfw)")
	fl.IntVar(&f.minImages, "min-images", 1, "use training identities with at least this many images")
	fl.IntVar(&f.maxPeople, "max-people", 0, "use at most this many training identities, the first of peopleDevTrain.txt (0: all)")
	fl.StringVar(&f.centreDir, "centre-images", "", "public face photos whose mean descriptor centres the distillation targets (default: <data>/mtfl/net_7876)")
	fl.IntVar(&f.centreCount, "centre-count", 512, "how many of --centre-images to average")
	fl.StringVar(&f.dir, "dir", "", "keep the CA, the coordinator's state and the clients' ledgers in this folder (default: a temporary folder, removed)")
	fl.Float64Var(&f.ema, "ema", 0, "score a moving average of the rounds' models with this decay (the mean of all rounds until 1/(1-decay) rounds, then exponential; 0: the last model); averages out the clients' DP noise at no privacy cost")
	fl.BoolVar(&f.curve, "curve", false, "also score every round's model and its moving average (one evaluation each)")
	fl.BoolVar(&f.json, "json", false, "print a JSON report")
	fl.BoolVar(&f.alone, "alone", false, "instead of federating, train each client alone on its own identities (same rounds, epochs and budget) and report each one's accuracy, their mean and the best")
	registerFedHead(cmd, &f.head)
	f.secagg.register(fl)
	f.async.register(fl)
	return cmd, f
}

func runFedSim(e *env, cmd *cobra.Command, f *fedSimFlags) error {
	so, d, err := f.options(cmd.Flags().Changed)
	if err != nil {
		return err
	}
	if so.Optim.Engine, err = e.engine(); err != nil {
		return err
	}
	f.head.engine = so.Optim.Engine
	quiet := f.head.quiet
	draw := &trainProgress{w: e.stderr, quiet: quiet}
	d.Progress = draw.event
	err = so.LoadData(d)
	draw.finish()
	if err != nil {
		return fmt.Errorf("fed %w", err)
	}
	if !quiet {
		start := time.Now()
		so.Progress = func(s string) { fmt.Fprintf(e.stderr, "[%5.0fs] %s\n", time.Since(start).Seconds(), s) }
	}
	if f.secagg.mode == "masking" {
		return f.secagg.run(cmd, e, f, so)
	}
	if f.alone {
		rep, err := sim.Alone(cmd.Context(), so)
		if err != nil {
			return err
		}
		if f.json {
			return writeJSON(e.stdout, rep)
		}
		fmt.Fprintf(e.stdout, "%d clients alone, %d rounds: development-pairs accuracy mean %.4f, best %.4f (as initialised %.4f; last models' mean %.4f)\n",
			rep.Clients, rep.Rounds, rep.MeanAccuracy, rep.BestAccuracy, rep.InitAccuracy, rep.MeanLastAccuracy)
		return nil
	}
	rep, err := sim.Run(cmd.Context(), so)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(e.stdout, rep)
	}
	printFedSim(e.stdout, rep)
	return nil
}

// options checks the flags (changed says which were given) and returns
// the simulation's options, all but its data, and the options of its data.
func (f *fedSimFlags) options(changed func(string) bool) (sim.Options, sim.DataOptions, error) {
	if err := f.secagg.check(changed, f.clients); err != nil {
		return sim.Options{}, sim.DataOptions{}, err
	}
	if f.noDP {
		for _, n := range []string{"target-epsilon", "delta", "clip", "privacy-unit", "max-per-identity"} {
			if changed(n) {
				return sim.Options{}, sim.DataOptions{}, fmt.Errorf("fed sim: --%s is a DP setting; it does not apply with --no-dp", n)
			}
		}
	}
	if f.strategy == "fedsgd" && changed("local-epochs") {
		return sim.Options{}, sim.DataOptions{}, errors.New("fed sim: FedSGD takes one local step a round; --local-epochs is for fedavg")
	}
	if f.strategy == "fedavg" && changed("momentum") {
		return sim.Options{}, sim.DataOptions{}, errors.New("fed sim: --momentum is the coordinator's, for fedsgd")
	}
	momentum := f.momentum
	if f.strategy != "fedsgd" {
		momentum = 0
	}
	// FedAvg's default η is the library's (strategy.DefaultServerLR), as
	// veil fed coordinator's. FedSGD has none there; 1 is this
	// experiment's setting (the README's FedSGD row).
	serverLR := f.serverLR
	if serverLR < 0 {
		return sim.Options{}, sim.DataOptions{}, fmt.Errorf("fed sim: --server-lr must not be negative, got %g (0: the default)", serverLR)
	}
	if serverLR == 0 && f.strategy == "fedsgd" {
		serverLR = 1
	}
	d := sim.DataOptions{LFW: f.data, MinImages: f.minImages, MaxPeople: f.maxPeople, CentreImages: f.centreDir, CentreCount: f.centreCount,
		Describers: training.Describers{Inputs: f.head.openInputs, Teacher: f.head.openDescriber}}
	so := sim.Options{Model: training.ModelOptions{Kind: "head", Features: f.head.features, Loss: "distill"},
		Optim: training.OptimOptions{Batch: f.batch, MicroBatch: f.microBatch, Optimizer: f.optimizer, LearningRate: f.lr,
			WeightDecay: f.weightDecay, Seed: f.seed},
		Partition: dataset.PartitionOptions{Clients: f.clients, Alpha: f.alpha, Seed: f.partitionSeed},
		Strategy:  f.strategy, Rounds: f.rounds, LocalEpochs: f.localEpochs, Batch: f.batch, LearningRate: f.lr,
		ServerLR: serverLR, Momentum: momentum, Dropout: f.dropout, Stragglers: f.stragglers, RoundTimeout: f.roundTimeout,
		MinUpdates: f.minUpdates, Parallel: f.parallel, Seed: f.seed, Dir: f.dir, EMA: f.ema, Curve: f.curve, Logger: slog.New(slog.DiscardHandler)}
	if err := so.CheckData(d); err != nil {
		return sim.Options{}, sim.DataOptions{}, fmt.Errorf("fed %w", err)
	}
	if !f.noDP {
		so.DP = &sim.DP{Epsilon: f.targetEps, Delta: f.delta, Clip: f.clip, Unit: f.unit, MaxPerIdentity: f.maxPerIdentity}
	}
	if err := f.async.apply(&so); err != nil {
		return sim.Options{}, sim.DataOptions{}, err
	}
	if f.secagg.mode == "dphe" {
		f.secagg.dphe.apply(&so, changed, f.secagg.network)
	}
	if err := so.Check(); err != nil {
		return sim.Options{}, sim.DataOptions{}, fmt.Errorf("fed %w", err)
	}
	return so, d, nil
}

// printFedSim prints the readable summary of a simulation.
func printFedSim(w io.Writer, r *sim.Report) {
	strategy := r.Strategy
	if r.ServerLR != "" {
		strategy += " (server learning rate " + r.ServerLR + ")"
	}
	fmt.Fprintf(w, "%s, %d clients, %d rounds (%d failed): %d updates accepted, %d refused, %d drop-outs\n",
		strategy, r.Clients, r.Rounds, r.FailedRounds, r.Updates, r.Refused, r.DropOuts)
	fmt.Fprintf(w, "LFW development pairs: accuracy %.4f (threshold %.3f); as initialised %.4f\n", r.DevAccuracy, r.Threshold, r.InitAccuracy)
	if r.EMA > 0 {
		fmt.Fprintf(w, "  (the moving average of the rounds' models, decay %g; the last model alone: %.4f)\n", r.EMA, r.LastAccuracy)
	}
	for k := range r.RoundAccuracy {
		fmt.Fprintf(w, "  after %d aggregated rounds: %.4f (average %.4f)\n", k+1, r.RoundAccuracy[k], r.RoundEMAAccuracy[k])
	}
	if r.EpsilonPerClient != nil {
		for _, n := range r.Names() {
			fmt.Fprintf(w, "  %s: %d people, %d images, q = %.4f, σ = %.3f, ε = %s at δ = %g per %s\n", n, r.IdentitiesPerClient[n],
				r.ImagesPerClient[n], r.SamplingRate[n], r.NoiseMultiplier[n], dp.FormatEpsilon(r.EpsilonPerClient[n]), r.Delta, r.PrivacyUnit)
		}
		printFederationPrivacy(w, r.Privacy)
		if r.DPHE != nil {
			printDPHE(w, r.DPHE)
		}
	} else {
		fmt.Fprintln(w, "privacy: none (trained without DP)")
	}
	fmt.Fprintf(w, "%d parameters; %.0f bytes on the wire per client and round; %.0f s\n", r.Parameters, r.BytesPerClientRound, r.WallS)
}
