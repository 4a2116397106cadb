package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/fed/asyncsim"
)

// benchCollabAsyncLong is veil bench collab async's help text.
const benchCollabAsyncLong = `Irene's Fig. 10: asynchronous training with one client --slowdown times slower.
One fifth (rounded up) of each named person's photos of LFW's development
training identities is held out; --users users are simulated from the rest as
in veil bench collab noisy-tags, each a client training a small classifier
(one fully connected hidden layer of --hidden units, softmax over --classes
hashed-tag classes) on its persons' descriptors by SGD, without DP.

A simulation in one process, with a simulated clock: a local step takes one
unit (--slowdown units for client 0), exchanges take none. For --duration
units each, from the same initial model and batches: asynchronous EASGD
(fed/strategy) with every period λ in --periods, EASGD at --drop-period with
the centre thinned by dropout at every rate in --drops (only the kept hidden
units are sent, trained until the client's next exchange and merged), FedBuff (--buffer updates per version, staleness
limit --max-staleness) and synchronous FedAvg (every round waits for the slow
client), FedBuff and FedAvg with --local-steps steps per update. Reported:
the shared model's accuracy on the held-out faces (right when it predicts one
of the person's hashed tags) every --eval-every units, against simulated time
and the bytes all clients sent and received (wire encoding), and when each
first reaches --target (default: half the best final accuracy).`

func newBenchCollabAsyncCmd(e *env) *cobra.Command {
	var lfw lfwFlags
	var asJSON bool
	var plotPath string
	var o asyncsim.Options
	cmd := &cobra.Command{
		Use:     "async",
		Short:   "Irene's Fig. 10: EASGD (λ, dropout), FedBuff and FedAvg with a slow client, accuracy against time and bytes",
		Long:    benchCollabAsyncLong,
		Example: `  nice veil bench collab async --json --plot fig10.png`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchCollabAsync(cmd.Context(), e, &lfw, asJSON, plotPath, o)
		},
	}
	lfw.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&plotPath, "plot", "", "also draw accuracy against time and bytes into this .png file")
	fl.IntVar(&o.Users, "users", 8, "simulated users (clients)")
	fl.IntVar(&o.MaxUsersPerPerson, "max-users-per-person", 2, "a training person is in 1 to this many users' libraries")
	fl.IntVar(&o.PhotosPerUser, "photos-per-user", 10, "at most this many photos of a person in one library")
	fl.IntVar(&o.Classes, "classes", 512, "hashed-tag classes n")
	fl.IntVar(&o.Hidden, "hidden", 64, "units of the hidden layer (the one dropout thins)")
	fl.IntVar(&o.Batch, "batch", 8, "examples per local step")
	fl.Float64Var(&o.LearningRate, "lr", 0.05, "local SGD learning rate")
	fl.IntSliceVar(&o.Periods, "periods", []int{16, 32, 64}, "EASGD communication periods λ (no dropout)")
	fl.Float64SliceVar(&o.Drops, "drops", []float64{0.3, 0.4, 0.5}, "dropout rates p, each in [0, 1), run with EASGD at --drop-period")
	fl.IntVar(&o.DropPeriod, "drop-period", 64, "EASGD period λ of the dropout runs")
	fl.Float64Var(&o.Beta, "beta", 0.2, "EASGD moving rate β, in (0, 1]")
	fl.IntVar(&o.LocalSteps, "local-steps", 32, "FedAvg's and FedBuff's local steps per update")
	fl.IntVar(&o.BufferSize, "buffer", 3, "FedBuff's updates per model version")
	fl.IntVar(&o.MaxStaleness, "max-staleness", 16, "FedBuff's staleness limit, in versions")
	fl.Float64Var(&o.Slowdown, "slowdown", 5, "how many times longer client 0's steps take")
	fl.Float64Var(&o.Duration, "duration", 3000, "simulated time of each run, in fast client steps")
	fl.Float64Var(&o.EvalEvery, "eval-every", 100, "simulated time between two measurements")
	fl.Float64Var(&o.Target, "target", 0, "accuracy whose first reaching is reported (0: half the best final one)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the simulation, held-out faces, initial weights, batches and thinning")
	return cmd
}

// runBenchCollabAsync checks the flags, loads LFW's development training
// split, runs collab.Async and prints its report.
func runBenchCollabAsync(ctx context.Context, e *env, lfw *lfwFlags, asJSON bool, plotPath string, o asyncsim.Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if plotPath != "" && strings.ToLower(filepath.Ext(plotPath)) != ".png" {
		return fmt.Errorf("--plot %s: want a .png file", plotPath)
	}
	in, err := collabInputs(e, lfw, "", false)
	if err != nil {
		return err
	}
	o.Progress = in.progress
	rep, err := asyncsim.Simulate(ctx, in.train, o)
	if err != nil {
		return err
	}
	if plotPath != "" {
		if err := asyncsim.Plot(rep, plotPath); err != nil {
			return err
		}
	}
	if asJSON {
		return writeJSON(e.stdout, map[string]*asyncsim.Report{"async": rep})
	}
	for _, r := range rep.Runs {
		fmt.Fprintf(e.stdout, "%-16s accuracy %.2f%% at time %g, %.1f MB; %d exchanges (%d refused stale)\n",
			r.Name, 100*r.Final.Accuracy, r.Final.Time, float64(r.Final.Bytes)/1e6, r.Exchanges, r.Refused)
	}
	return nil
}
