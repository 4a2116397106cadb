package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/collab"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/internal/engine"
)

// benchCollabLong is veil bench collab's help text.
const benchCollabLong = `Simulates --users users from LFW's development training identities (each
person with at least 5 photos in 1 to --max-users-per-person users' libraries,
at most --photos-per-user of their photos in each; each single-photo person a
stranger in one library) and --held-out users from the development test
identities (each person in one library), who never train.

The shared ψ (a head on the 128-d descriptor, initialised to the identity) is
trained on the training users' pooled data, each person of a library under a
hashed tag (HMAC under that library's own key, into --classes classes), with
Irene's noisy bootstrapping (Eq. 2, --alpha), under DP-SGD when --epsilon > 0
(unit: one person of one library; every user's ledger is charged first); then
MT-LMNN over the training users gives the shared W₀: under DP by a private
exchange (each library's clipped V₀ gradient, Gaussian noise on the sum,
--epsilon-w0 per person of a library, charged to the same ledgers, so
shared_w0's epsilon_per_user is the two composed).

With --public (the default), ψ is also trained as a head on public features
(the age/gender network's 2048 region features of LFW's fixed face box, as
the federation's head: the papers' setting), from a random map, with the same
hashed tags and its own ledgers: shared_bootstrap_public; then W₀ tuned on its
--public-out outputs by the same exchange as shared_w0, charged to those
ledgers (epsilon_per_user the two composed): shared_w0_public; and public_plain
for the raw public features.

For held-out users who name 1 or 3 photos per person, reported under methods:
plain (descriptors at the library's thresholds), local_lmnn (each user's own
LMNN, as veil library learn), shared_bootstrap (ψ), shared_w0 (W₀ on ψ) and
per_user_metric (each user's own LMNN on ψ): precision, coverage of named
people's other faces and the strangers' rate, with the library's suggestion
rule. Each space's thresholds are chosen on the training users only (3 named
photos): the main figures at precision ≥ 99.5% with no more strangers
suggested than plain descriptors at the library's thresholds (plain_defaults:
today's suggestions); library_goal at veil bench tagging --tune's criterion
(precision ≥ 98%, strangers < 5%). A user's own metric carries its base
space's threshold over, as veil library learn does.

Each method also reports epsilon_per_user (ε per person of a user's library,
as the user's ledger holds it; null: shared without a DP bound) and
bytes_per_user: what one user's device would send and receive if the method
ran federated as built, in the federation's plaintext weights encoding
(header and float32 payload; secure aggregation's masking adds to the
uploads): ψ's bootstrapping as one round per epoch, each ψ's download and its
update's upload; W₀'s private exchange as its --w0-steps, each V₀'s gradient
up and V₀ down, on top of ψ's; 0 for methods that share nothing; null for W₀
without DP, whose MT-LMNN fit has no federated form. wall_s gives each
stage's time in seconds.`

// benchCollabFlags are veil bench collab's flags besides the experiment's
// options.
type benchCollabFlags struct {
	lfw      lfwFlags
	asJSON   bool
	plotPath string
	public   bool
}

func newBenchCollabCmd(e *env) *cobra.Command {
	var f benchCollabFlags
	var o collab.Options
	cmd := &cobra.Command{
		Use:   "collab",
		Short: "Collaborative tagging (Irene): do held-out users' suggestions improve with a shared ψ trained from other users' tags?",
		Long:  benchCollabLong,
		Example: `  nice veil bench collab --json --plot collab.png
  veil bench collab --epsilon 0 --users 16 --json   # no DP`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchCollab(cmd.Context(), e, &f, o)
		},
	}
	cmd.AddCommand(newBenchCollabNoisyCmd(e), newBenchCollabAsyncCmd(e))
	f.lfw.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&f.plotPath, "plot", "", "also draw held-out users' coverage and strangers' rate per method into this .png or .svg file")
	fl.IntVar(&o.Users, "users", 24, "simulated training users")
	fl.IntVar(&o.HeldOut, "held-out", 4, "held-out users (development test identities)")
	fl.IntVar(&o.MaxUsersPerPerson, "max-users-per-person", 4, "a training person is in 1 to this many users' libraries")
	fl.IntVar(&o.PhotosPerUser, "photos-per-user", 10, "at most this many photos of a person in one training library")
	fl.IntVar(&o.Trials, "trials", 3, "random choices of the named photos per figure")
	fl.IntVar(&o.Classes, "classes", 1024, "hashed-tag classes n")
	fl.Float64Var(&o.Alpha, "alpha", 0.9, "Eq. 2's α: weight of the tags against min-entropy")
	fl.IntVar(&o.Hidden, "hidden", 0, "ψ's hidden width (0: linear)")
	fl.IntVar(&o.Epochs, "epochs", 20, "bootstrapping epochs")
	fl.IntVar(&o.Batch, "batch", 64, "bootstrapping batch (expected units per step under DP)")
	fl.Float64Var(&o.LearningRate, "lr", 1e-3, "bootstrapping learning rate (Adam)")
	fl.Float64Var(&o.Epsilon, "epsilon", 8, "DP target ε per person of a library for bootstrapping (0: no DP)")
	fl.Float64Var(&o.Delta, "delta", 1e-5, "δ of the DP guarantee")
	fl.Float64Var(&o.EpsilonW0, "epsilon-w0", 0, "DP target ε per person of a library for W₀'s exchange (default: --epsilon; 0 with --epsilon 0: W₀ by MT-LMNN without a bound)")
	fl.IntVar(&o.W0.Steps, "w0-steps", 20, "W₀'s private exchanges (gradient steps of V₀)")
	fl.Float64Var(&o.W0.LearningRate, "w0-lr", 0.01, "learning rate of W₀'s private exchanges")
	fl.Float64Var(&o.W0.Clip, "w0-clip", 1, "clip of each library's V₀ gradient (Frobenius norm)")
	fl.Float64Var(&o.Budget, "budget", 0, "each training user's ledger budget ε (default: --epsilon + --epsilon-w0)")
	fl.BoolVar(&f.public, "public", true, "also train ψ as a head on public features (the age/gender network's 2048 region features of LFW's face box): public_plain, shared_bootstrap_public and shared_w0_public")
	fl.IntVar(&o.PublicOut, "public-out", 128, "output size of ψ on public features")
	fl.IntVar(&o.PublicHidden, "public-hidden", 256, "hidden width of ψ on public features (-1: linear)")
	fl.IntVar(&o.PublicEpochs, "public-epochs", 0, "bootstrapping epochs of ψ on public features (default: --epochs)")
	fl.Float64Var(&o.PublicLearningRate, "public-lr", 0, "bootstrapping learning rate of ψ on public features (default: --lr)")
	fl.IntVar(&o.Iterations, "iterations", 100, "iterations of every LMNN and MT-LMNN fit")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the simulation, named photos and initial weights (privacy noise uses a CSPRNG)")
	return cmd
}

// runBenchCollab checks the flags, loads LFW's development splits, runs
// the experiment and prints its report.
func runBenchCollab(ctx context.Context, e *env, f *benchCollabFlags, o collab.Options) error {
	start := time.Now()
	if err := o.Validate(); err != nil {
		return err
	}
	in, err := collabInputs(e, &f.lfw, f.plotPath, f.public)
	if err != nil {
		return err
	}
	o.Engine, o.Progress = in.engine, in.progress
	rep, err := collab.Run(ctx, in.train, in.test, o)
	if err != nil {
		return err
	}
	rep.WallS["command"] = time.Since(start).Seconds()
	if f.plotPath != "" {
		if err := collab.Plot(rep, f.plotPath); err != nil {
			return err
		}
	}
	if f.asJSON {
		return writeJSON(e.stdout, rep)
	}
	for _, m := range append(collab.Methods, collab.PublicMethods...) {
		r, ok := rep.Methods[m]
		if !ok {
			continue
		}
		for i, s := range []collab.Score{r.Named1, r.Named3} {
			fmt.Fprintf(e.stdout, "%-17s %d named: precision %.2f%%, coverage %.2f%%, strangers %.2f%%\n",
				m, 1+2*i, 100*s.Precision, 100*s.Coverage, 100*s.StrangersRate)
		}
	}
	return nil
}

// benchCollabNoisyLong is veil bench collab noisy-tags' help text.
const benchCollabNoisyLong = `Irene's Fig. 7: noisy bootstrapping against the fraction of wrong tags and α.
One fifth (rounded up) of each named person's photos of LFW's development
training identities is held out; --users users are simulated from the rest as
in veil bench collab and pool their hashed tags (--classes classes). For each
fraction in --fractions, that share of the training faces gets a wrong tag (a
uniformly drawn other class, from --seed; the same faces for every α), and for
each α in --alphas (1 is plain cross-entropy) ψ and the classifier φ are
bootstrapped from the identity with Eq. 2, without DP. Reported, under
noisy_bootstrapping: φ's accuracy on the held-out faces (right when φ predicts
one of the person's clean hashed tags) per (fraction, α), and with clean tags;
and --held-out users' suggestions (development test identities, 3 named photos
per person) in each trained ψ's space, at the setting chosen on the training
users by veil bench collab's main goal (precision ≥ 99.5%, strangers no more
than plain descriptors'), with plain descriptors for reference.

The defaults (8 users, 10 epochs) are smaller than veil bench collab's so that
the ten trainings finish in minutes on 2 cores.`

// benchCollabNoisyFlags are veil bench collab noisy-tags' flags besides
// the experiment's options.
type benchCollabNoisyFlags struct {
	lfw      lfwFlags
	asJSON   bool
	plotPath string
}

func newBenchCollabNoisyCmd(e *env) *cobra.Command {
	var f benchCollabNoisyFlags
	var o collab.NoisyOptions
	cmd := &cobra.Command{
		Use:     "noisy-tags",
		Short:   "Irene's Fig. 7: bootstrapping accuracy against the fraction of wrong tags and α",
		Long:    benchCollabNoisyLong,
		Example: `  nice veil bench collab noisy-tags --json --plot fig7.png`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchCollabNoisy(cmd.Context(), e, &f, o)
		},
	}
	f.lfw.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&f.plotPath, "plot", "", "also draw accuracy against the fraction of wrong tags, per α, into this .png or .svg file")
	fl.Float64SliceVar(&o.Fractions, "fractions", []float64{0.3, 0.4, 0.5}, "fractions of wrong tags, each in [0, 1)")
	fl.Float64SliceVar(&o.Alphas, "alphas", []float64{0.8, 0.9, 1.0}, "Eq. 2's α values, each in (0, 1] (1: plain cross-entropy)")
	fl.IntVar(&o.Users, "users", 8, "simulated training users (veil bench collab: 24)")
	fl.IntVar(&o.HeldOut, "held-out", 4, "held-out users (development test identities)")
	fl.IntVar(&o.MaxUsersPerPerson, "max-users-per-person", 2, "a training person is in 1 to this many users' libraries")
	fl.IntVar(&o.PhotosPerUser, "photos-per-user", 10, "at most this many photos of a person in one training library")
	fl.IntVar(&o.Classes, "classes", 1024, "hashed-tag classes n")
	fl.IntVar(&o.Hidden, "hidden", 0, "ψ's hidden width (0: linear)")
	fl.IntVar(&o.Epochs, "epochs", 10, "bootstrapping epochs per training (veil bench collab: 20)")
	fl.IntVar(&o.Batch, "batch", 64, "bootstrapping batch")
	fl.Float64Var(&o.LearningRate, "lr", 3e-3, "bootstrapping learning rate (Adam)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the simulation, held-out faces, wrong tags and initial weights")
	return cmd
}

// runBenchCollabNoisy checks the flags, loads LFW's development training
// split, runs NoisyTags and prints its report.
func runBenchCollabNoisy(ctx context.Context, e *env, f *benchCollabNoisyFlags, o collab.NoisyOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	in, err := collabInputs(e, &f.lfw, f.plotPath, false)
	if err != nil {
		return err
	}
	o.Engine, o.Progress = in.engine, in.progress
	rep, err := collab.NoisyTags(ctx, in.train, in.test, o)
	if err != nil {
		return err
	}
	if f.plotPath != "" {
		if err := collab.PlotNoisy(rep, f.plotPath); err != nil {
			return err
		}
	}
	if f.asJSON {
		return writeJSON(e.stdout, map[string]*collab.NoisyReport{"noisy_bootstrapping": rep})
	}
	fmt.Fprintf(e.stdout, "plain descriptors: held-out users' coverage %.2f%%\n", 100*rep.PlainHeldOutUsers.Coverage)
	fmt.Fprintf(e.stdout, "clean tags, α = 1: accuracy %.2f%%, held-out users' coverage %.2f%%\n", 100*rep.CleanAccuracy, 100*rep.CleanHeldOutUsers.Coverage)
	for _, c := range rep.Cells {
		fmt.Fprintf(e.stdout, "%2.0f%% wrong tags, α = %.2f: accuracy %.2f%%, held-out users' coverage %.2f%%\n",
			100*c.Fraction, c.Alpha, 100*c.Accuracy, 100*c.HeldOutUsers.Coverage)
	}
	return nil
}

// collabIn is what both collab experiments read before they run.
type collabIn struct {
	engine      *engine.Engine
	train, test *collab.Split
	progress    func(string)
}

// collabInputs checks --plot, makes the command's engine, loads LFW's
// development splits (with the age/gender network's region features if
// public) and returns the progress printer (nil under -q).
func collabInputs(e *env, lfw *lfwFlags, plotPath string, public bool) (collabIn, error) {
	var in collabIn
	if plotPath != "" {
		if err := collab.CheckPlotPath(plotPath); err != nil {
			return in, fmt.Errorf("--plot %s: %w", plotPath, err)
		}
	}
	var err error
	if in.engine, err = e.engine(); err != nil {
		return in, err
	}
	src, err := lfw.source(e)
	if err != nil {
		return in, err
	}
	if public {
		in.train, in.test, err = loadPublicSplits(e, lfw, src)
	} else {
		in.train, in.test, err = collab.LoadDevSplits(src)
	}
	if err != nil {
		return in, err
	}
	if !lfw.head.quiet {
		in.progress = func(s string) { fmt.Fprintln(e.stderr, s) }
	}
	return in, nil
}

// loadPublicSplits opens the age/gender describer through the flags'
// cache and loads the development splits with public features.
func loadPublicSplits(e *env, lfw *lfwFlags, src *eval.LFWSource) (train, test *collab.Split, err error) {
	ag, err := lfw.head.describerOptions().AgeGender()
	if err != nil {
		return nil, nil, err
	}
	o := eval.LFWSourceOptions{Dir: lfw.dir(), Describe: ag, Workers: engine.Parallelism()}
	if !lfw.head.quiet {
		o.Progress = e.stderr
	}
	pub, err := eval.NewLFWSource(o)
	if err != nil {
		return nil, nil, err
	}
	return collab.LoadDevSplitsPublic(src, pub)
}
