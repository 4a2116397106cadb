package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/collab"
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
MT-LMNN over the training users gives the shared W₀.

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
space's threshold over, as veil library learn does.`

// benchCollabFlags are veil bench collab's flags besides the experiment's
// options.
type benchCollabFlags struct {
	lfw      lfwFlags
	asJSON   bool
	plotPath string
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
	fl.Float64Var(&o.Budget, "budget", 0, "each training user's ledger budget ε (default: --epsilon)")
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
	if f.plotPath != "" {
		if err := collab.CheckPlotPath(f.plotPath); err != nil {
			return fmt.Errorf("--plot %s: %w", f.plotPath, err)
		}
	}
	var err error
	if o.Engine, err = e.engine(); err != nil {
		return err
	}
	src, err := f.lfw.source(e)
	if err != nil {
		return err
	}
	train, test, err := collab.LoadDevSplits(src)
	if err != nil {
		return err
	}
	if !f.lfw.head.quiet {
		o.Progress = func(s string) { fmt.Fprintln(e.stderr, s) }
	}
	rep, err := collab.Run(ctx, train, test, o)
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
	for _, m := range collab.Methods {
		r := rep.Methods[m]
		for i, s := range []collab.Score{r.Named1, r.Named3} {
			fmt.Fprintf(e.stdout, "%-17s %d named: precision %.2f%%, coverage %.2f%%, strangers %.2f%%\n",
				m, 1+2*i, 100*s.Precision, 100*s.Coverage, 100*s.StrangersRate)
		}
	}
	return nil
}
