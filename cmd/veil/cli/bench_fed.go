package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/fed/fedbench"
	"github.com/veil-privacy/veil/fed/ops"
)

// benchFedLong is veil bench fed's help text.
const benchFedLong = `Measures the federation's coordinator under N simulated clients (--clients)
sending updates of the federated embedding head's size (557,824 values; or
--params) over real gRPC on loopback, with mutual TLS and without, for
--rounds rounds each.

The coordinator is the real one (its SQLite state file, ledgers charged from
each update's DP metadata, every check), started as a separate veil process
so that its peak memory is its own; the clients send precomputed updates, so
nothing is spent on training. In each round every client is pushed the task
and downloads the model; once all have it, all submit at once.

  updates_per_s     updates accepted / time from the submissions' start to
                    the last acceptance (summed over rounds)
  round_s           mean round time at the coordinator, start to close
                    (push, downloads, submissions, aggregation)
  split             where a round's time goes, mean over rounds (s): wait
                    (round start to the last client holding its task),
                    download (then to the last holding the model), upload
                    (submissions' start to the last update received), fold
                    and commit (the coordinator's folds and their commits,
                    overlapping other uploads), close (aggregation and its
                    commit), last_update_to_close (last update received to
                    the round's close committed)
  bytes_per_update  bytes the clients' sockets wrote while submitting, per
                    update (payload, protobuf, HTTP/2 and TLS framing)
  peak_rss_mb       the coordinator process's peak resident set (MiB)
  coordinator_submit_cpu_ms_per_update, client_submit_cpu_ms_per_update
                    CPU time of the coordinator process and of the clients
                    (this process) during the submissions, per update
  derived_coordinator_capacity_updates_per_s
                    derived, not measured: the machine's cores divided by
                    the coordinator's submit CPU per update

The JSON's top level is the TLS run (how a federation runs); "runs" holds
each run, "tls_updates_ratio" is updates/s without TLS over with TLS and
"tls_cpu_ratio" the coordinator's CPU per update with over without, both
from this invocation. Clients and coordinator share the machine's cores:
"load_average" says how busy it was.

--secagg masking runs masking rounds (needs --tls on and at least 3
clients): the clients are real federation clients (their secure round:
key adverts signed with their certificates' keys, shares, the update
quantised with their noise share, masked, unmasking) returning a
precomputed update. The phases run in sequence without a barrier, so
updates_per_s is then the updates over the rounds' summed time at the
coordinator (round_updates_per_s, reported for plaintext runs too), and the
CPU per update and bytes per update cover the whole run. With more than 16
clients the coordinator's default graph is sparse, which real clients
refuse by default: the bench's clients accept it ("sparse_graphs": true).`

type benchFedFlags struct {
	clients, params, rounds int
	tls, secagg             string
	inProcess, json         bool
	serve                   string // hidden: the coordinator child's folder
	serveTLS                bool
	cpuProfile              string
	memoryLimit             string
}

func newBenchFedCmd(e *env) *cobra.Command {
	f := &benchFedFlags{}
	cmd := &cobra.Command{
		Use:   "fed",
		Short: "The federation coordinator's throughput: updates/s, round time, bytes and memory, with and without TLS",
		Long:  benchFedLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.serve != "" {
				if err := applyMemoryLimit(f.memoryLimit); err != nil {
					return err
				}
				s := fedbench.Settings{Clients: f.clients, Params: f.params, Rounds: f.rounds, TLS: f.serveTLS, Dir: f.serve, SecAgg: f.secagg}
				return fedbench.ServeChild(cmd.Context(), s, f.cpuProfile, e.stdout)
			}
			return runBenchFed(cmd.Context(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.clients, "clients", 100, "simulated clients")
	fl.IntVar(&f.params, "params", fedbench.HeadParams, "values per update (the head's 557,824 by default)")
	fl.IntVar(&f.rounds, "rounds", 3, "rounds per run")
	fl.StringVar(&f.tls, "tls", "both", "runs to make: both, on or off")
	fl.StringVar(&f.secagg, "secagg", fedbench.SecAggOff, "secure aggregation of the rounds: off or masking (masking needs --tls on)")
	fl.BoolVar(&f.inProcess, "in-process", false, "run the coordinator in this process (peak_rss_mb is then the whole process's, clients included)")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write the coordinator's CPU profile (pprof) of each run to FILE-tls and FILE-plain, and the clients' (this process) to FILE-tls-clients and FILE-plain-clients")
	fl.StringVar(&f.memoryLimit, "memory-limit", "off", memoryLimitHelp)
	fl.StringVar(&f.serve, "serve-coordinator", "", "run only the coordinator, with the certificates in this folder (used by the benchmark itself)")
	fl.BoolVar(&f.serveTLS, "serve-tls", false, "with --serve-coordinator: mutual TLS")
	for _, h := range []string{"serve-coordinator", "serve-tls"} {
		_ = fl.MarkHidden(h)
	}
	return cmd
}

// runOptions checks the flags and turns them into fedbench's options.
func (f *benchFedFlags) runOptions() (fedbench.RunOptions, error) {
	o := fedbench.RunOptions{Clients: f.clients, Params: f.params, Rounds: f.rounds, InProcess: f.inProcess,
		CPUProfile: f.cpuProfile, ChildCommand: benchFedChildCommand, SecAgg: f.secagg}
	switch f.tls {
	case "both":
		o.TLS = []bool{false, true}
	case "on":
		o.TLS = []bool{true}
	case "off":
		o.TLS = []bool{false}
	default:
		return o, fmt.Errorf("--tls %q: want both, on or off", f.tls)
	}
	var err error
	if o.MemoryLimit, err = ops.ParseMemoryLimit(f.memoryLimit); err != nil {
		return o, fmt.Errorf("--memory-limit: %w", err)
	}
	if o.MemoryLimit != 0 && f.inProcess {
		return o, fmt.Errorf("--memory-limit %s is the coordinator process's: it does not go with --in-process", f.memoryLimit)
	}
	if f.secagg != "" && f.secagg != fedbench.SecAggOff && f.secagg != fedbench.SecAggMasking {
		return o, fmt.Errorf("--secagg %q: want off or masking", f.secagg)
	}
	if f.secagg == fedbench.SecAggMasking && f.tls != "on" {
		return o, fmt.Errorf("--secagg masking needs --tls on (got %q): the clients sign their key adverts with their certificates' keys", f.tls)
	}
	if f.clients < 1 || f.params < 1 || f.rounds < 1 {
		return o, fmt.Errorf("--clients, --params and --rounds must be at least 1, got %d, %d and %d", f.clients, f.params, f.rounds)
	}
	return o, nil
}

// benchFedChildCommand is the command line of the coordinator child: this
// veil binary, bench fed --serve-coordinator.
func benchFedChildCommand(s fedbench.Settings, cpuProfile string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the veil binary to start the coordinator: %w", err)
	}
	return []string{self, "bench", "fed", "--serve-coordinator", s.Dir, "--serve-tls=" + strconv.FormatBool(s.TLS),
		"--clients", strconv.Itoa(s.Clients), "--params", strconv.Itoa(s.Params), "--rounds", strconv.Itoa(s.Rounds), "--cpuprofile", cpuProfile,
		"--memory-limit", childMemoryLimit(s.MemoryLimit), "--secagg", s.SecAgg}, nil
}

// childMemoryLimit is --memory-limit's value for a limit of n bytes.
func childMemoryLimit(n int64) string {
	if n == 0 {
		return "off"
	}
	return strconv.FormatInt(n, 10)
}

func runBenchFed(ctx context.Context, e *env, f *benchFedFlags) error {
	o, err := f.runOptions()
	if err != nil {
		return err
	}
	o.Progress = func(r fedbench.Result) {
		fmt.Fprintf(e.stderr, "TLS %-5v secagg %s %7.1f updates/s, round %.2f s, %.0f bytes/update, coordinator peak RSS %.0f MiB\n",
			r.TLS, r.SecAgg, r.UpdatesPerS, r.RoundS, r.BytesPerUpdate, r.PeakRSSMB)
	}
	rep, err := fedbench.Run(ctx, o)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(e.stdout, rep)
	}
	fmt.Fprintf(e.stdout, "%d clients, updates of %d values (%d bytes), %d rounds\n", f.clients, f.params, 4*f.params, f.rounds)
	fmt.Fprintf(e.stdout, "%-5s %12s %9s %16s %13s %18s %18s %18s\n", "TLS", "updates/s", "round s", "bytes/update", "peak RSS MiB", "CPU ms/update", "submit CPU ms/upd", "clients CPU ms/upd")
	for _, r := range rep.Runs {
		fmt.Fprintf(e.stdout, "%-5v %12.1f %9.2f %16.0f %13.0f %18.2f %18.2f %18.2f\n", r.TLS, r.UpdatesPerS, r.RoundS, r.BytesPerUpdate, r.PeakRSSMB, r.CPUMsPerUpdate, r.SubmitCPUMsPerUpdate, r.ClientCPUMsPerUpdate)
	}
	for _, r := range rep.Runs {
		p := r.Split
		fmt.Fprintf(e.stdout, "TLS %v, a round's time (s): wait %.3f, download %.3f, upload %.3f, fold %.3f, commit %.3f, close %.3f; last update to closed %.3f\n",
			r.TLS, p.WaitS, p.DownloadS, p.UploadS, p.FoldS, p.CommitS, p.CloseS, p.LastUpdateToCloseS)
	}
	if rep.TLSUpdatesRatio > 0 {
		fmt.Fprintf(e.stdout, "TLS: updates/s ×%.2f slower, coordinator CPU per update ×%.2f\n", rep.TLSUpdatesRatio, rep.TLSCPURatio)
	}
	return nil
}
