package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/fed/fedbench"
)

// benchFedResult is one run of veil bench fed (one TLS setting).
type benchFedResult struct {
	Clients int `json:"clients"`
	Params  int `json:"params"`
	// UpdatesPerS is the coordinator's accepted updates per second while
	// all clients submit at once.
	UpdatesPerS float64 `json:"updates_per_s"`
	// RoundS is the mean round wall time at the coordinator, start to
	// close, with clients that do not compute.
	RoundS         float64 `json:"round_s"`
	BytesPerUpdate float64 `json:"bytes_per_update"`
	// PeakRSSMB is the peak resident set of PeakRSSOf, in MiB.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	PeakRSSOf string  `json:"peak_rss_of"`
	TLS       bool    `json:"tls"`

	Rounds       int     `json:"rounds"`
	PayloadBytes int     `json:"payload_bytes"`
	SubmitS      float64 `json:"submit_s"`
	DownloadS    float64 `json:"download_s"`
	AggregateS   float64 `json:"aggregate_s"`
	// Split is where a round's time goes (fedbench.Split).
	Split fedbench.Split `json:"split"`
	// CoordinatorCPUS is the coordinator process's CPU time (user +
	// system) over the whole run: enrolment, serving the model, and
	// receiving, checking, charging and folding the updates.
	CoordinatorCPUS float64 `json:"coordinator_cpu_s,omitempty"`
	// CPUMsPerUpdate is CoordinatorCPUS per accepted update.
	CPUMsPerUpdate float64 `json:"coordinator_cpu_ms_per_update,omitempty"`
	// SubmitCPUMsPerUpdate is the coordinator's CPU time during the
	// submission phases alone (receiving, decrypting, checking, charging
	// and folding; no downloads), per accepted update.
	SubmitCPUMsPerUpdate float64 `json:"coordinator_submit_cpu_ms_per_update,omitempty"`
	// ClientCPUMsPerUpdate is the simulated clients' CPU time (this
	// process) during the submission phases, per update: with the
	// coordinator's, what the machine's cores spent per update.
	ClientCPUMsPerUpdate float64 `json:"client_submit_cpu_ms_per_update,omitempty"`
	// DerivedCapacity is a derived figure, not a measurement of
	// throughput: the machine's cores divided by SubmitCPUMsPerUpdate,
	// the updates per second the coordinator could fold in with every
	// core to itself (clients elsewhere).
	DerivedCapacity float64 `json:"derived_coordinator_capacity_updates_per_s,omitempty"`
}

// benchFedReport is veil bench fed's JSON: the TLS run's fields at the
// top level (the shape; TLS is how a federation runs), every run
// in runs, and TLS's cost as ratios measured in the same invocation.
type benchFedReport struct {
	benchFedResult
	Runs []benchFedResult `json:"runs"`
	// TLSUpdatesRatio is updates_per_s without TLS over updates_per_s
	// with TLS (present when both ran).
	TLSUpdatesRatio float64 `json:"tls_updates_ratio,omitempty"`
	// TLSCPURatio is the coordinator's CPU per update with TLS over
	// without.
	TLSCPURatio float64 `json:"tls_cpu_ratio,omitempty"`
	// LoadAverage is the machine's 1-minute load average when the
	// benchmark started: other work on the machine slows every figure.
	LoadAverage float64 `json:"load_average,omitempty"`
}

type benchFedFlags struct {
	clients, params, rounds int
	tls                     string
	inProcess, json         bool
	serve                   string // hidden: the coordinator child's folder
	serveTLS                bool
	cpuProfile              string
}

func newBenchFedCmd(e *env) *cobra.Command {
	f := &benchFedFlags{}
	cmd := &cobra.Command{
		Use:   "fed",
		Short: "The federation coordinator's throughput: updates/s, round time, bytes and memory, with and without TLS",
		Long: `Measures the federation's coordinator under N simulated clients (--clients)
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
"load_average" says how busy it was.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.serve != "" {
				return benchFedServe(cmd.Context(), e, f)
			}
			return runBenchFed(cmd.Context(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.clients, "clients", 100, "simulated clients")
	fl.IntVar(&f.params, "params", fedbench.HeadParams, "values per update (the head's 557,824 by default)")
	fl.IntVar(&f.rounds, "rounds", 3, "rounds per run")
	fl.StringVar(&f.tls, "tls", "both", "runs to make: both, on or off")
	fl.BoolVar(&f.inProcess, "in-process", false, "run the coordinator in this process (peak_rss_mb is then the whole process's, clients included)")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write the coordinator's CPU profile (pprof) of each run to FILE-tls and FILE-plain, and the clients' (this process) to FILE-tls-clients and FILE-plain-clients")
	fl.StringVar(&f.serve, "serve-coordinator", "", "run only the coordinator, with the certificates in this folder (used by the benchmark itself)")
	fl.BoolVar(&f.serveTLS, "serve-tls", false, "with --serve-coordinator: mutual TLS")
	for _, h := range []string{"serve-coordinator", "serve-tls"} {
		_ = fl.MarkHidden(h)
	}
	return cmd
}

func runBenchFed(ctx context.Context, e *env, f *benchFedFlags) error {
	var settings []bool
	switch f.tls {
	case "both":
		settings = []bool{false, true}
	case "on":
		settings = []bool{true}
	case "off":
		settings = []bool{false}
	default:
		return fmt.Errorf("--tls %q: want both, on or off", f.tls)
	}
	if f.clients < 1 || f.params < 1 || f.rounds < 1 {
		return fmt.Errorf("--clients, --params and --rounds must be at least 1, got %d, %d and %d", f.clients, f.params, f.rounds)
	}
	dir, err := os.MkdirTemp("", "veil-bench-fed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pkiDir := dir + "/pki"
	if err := fedbench.Prepare(pkiDir, f.clients); err != nil {
		return err
	}
	rep := benchFedReport{LoadAverage: load1()}
	for _, tls := range settings {
		s := fedbench.Settings{Clients: f.clients, Params: f.params, Rounds: f.rounds, TLS: tls, Dir: pkiDir}
		var r benchFedResult
		if f.inProcess {
			r, err = benchFedInProcess(ctx, s)
		} else {
			var prof string
			if f.cpuProfile != "" {
				prof = f.cpuProfile + map[bool]string{false: "-plain", true: "-tls"}[tls]
			}
			r, err = benchFedChild(ctx, s, prof)
		}
		if err != nil {
			return fmt.Errorf("veil bench fed (TLS %v): %w", tls, err)
		}
		fmt.Fprintf(e.stderr, "TLS %-5v %7.1f updates/s, round %.2f s, %.0f bytes/update, coordinator peak RSS %.0f MiB\n",
			tls, r.UpdatesPerS, r.RoundS, r.BytesPerUpdate, r.PeakRSSMB)
		rep.Runs = append(rep.Runs, r)
	}
	rep.benchFedResult = rep.Runs[len(rep.Runs)-1]
	if len(rep.Runs) == 2 {
		off, on := rep.Runs[0], rep.Runs[1]
		rep.TLSUpdatesRatio = off.UpdatesPerS / on.UpdatesPerS
		if off.CPUMsPerUpdate > 0 {
			rep.TLSCPURatio = on.CPUMsPerUpdate / off.CPUMsPerUpdate
		}
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

// result combines what the two halves measured.
func benchFedResultOf(s fedbench.Settings, sr *fedbench.ServeReport, dr *fedbench.DriveReport) benchFedResult {
	return benchFedResult{Clients: s.Clients, Params: s.Params, UpdatesPerS: dr.UpdatesPerSecond, RoundS: mean(sr.RoundSeconds),
		BytesPerUpdate: dr.BytesPerUpdate, TLS: s.TLS, Rounds: s.Rounds, PayloadBytes: dr.PayloadBytes, SubmitS: mean(dr.SubmitSeconds),
		DownloadS: mean(dr.DownloadSeconds), AggregateS: mean(sr.AggregateSeconds), Split: fedbench.SplitOf(sr, dr)}
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func benchFedInProcess(ctx context.Context, s fedbench.Settings) (benchFedResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr := make(chan string, 1)
	type served struct {
		r   *fedbench.ServeReport
		err error
	}
	done := make(chan served, 1)
	go func() {
		r, err := fedbench.Serve(ctx, s, "127.0.0.1:0", func(a string) { addr <- a })
		done <- served{r, err}
	}()
	var a string
	select {
	case a = <-addr:
	case sv := <-done:
		return benchFedResult{}, fmt.Errorf("the coordinator stopped: %w", sv.err)
	}
	dr, err := fedbench.Drive(ctx, s, a)
	if err != nil {
		cancel()
		<-done
		return benchFedResult{}, err
	}
	sv := <-done
	if sv.err != nil {
		return benchFedResult{}, sv.err
	}
	r := benchFedResultOf(s, sv.r, dr)
	r.PeakRSSMB, r.PeakRSSOf = float64(selfPeakRSS())/(1<<20), "this whole process (--in-process: coordinator and clients)"
	return r, nil
}

// benchFedChildReport is what the coordinator child prints last.
type benchFedChildReport struct {
	Serve *fedbench.ServeReport `json:"serve"`
}

// benchFedChild runs the coordinator as a child veil process and the
// clients here.
func benchFedChild(ctx context.Context, s fedbench.Settings, cpuProfile string) (benchFedResult, error) {
	self, err := os.Executable()
	if err != nil {
		return benchFedResult{}, fmt.Errorf("finding the veil binary to start the coordinator: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "bench", "fed", "--serve-coordinator", s.Dir, "--serve-tls="+strconv.FormatBool(s.TLS),
		"--clients", strconv.Itoa(s.Clients), "--params", strconv.Itoa(s.Params), "--rounds", strconv.Itoa(s.Rounds), "--cpuprofile", cpuProfile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return benchFedResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return benchFedResult{}, fmt.Errorf("starting the coordinator: %w", err)
	}
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil {
		cmd.Wait()
		return benchFedResult{}, fmt.Errorf("the coordinator did not start: %s", strings.TrimSpace(stderr.String()))
	}
	addr := strings.TrimSpace(line)
	pid := cmd.Process.Pid
	s.CoordinatorCPU = func() time.Duration { return childCPU(pid) }
	stopProfile, err := startProfile(cpuProfile, "-clients")
	if err != nil {
		cancel()
		cmd.Wait()
		return benchFedResult{}, err
	}
	dr, derr := fedbench.Drive(ctx, s, addr)
	stopProfile()
	if derr != nil {
		cancel()
	}
	rest, _ := io.ReadAll(rd)
	werr := cmd.Wait()
	if derr != nil {
		return benchFedResult{}, derr
	}
	if werr != nil {
		return benchFedResult{}, fmt.Errorf("the coordinator: %w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	var cr benchFedChildReport
	if err := json.Unmarshal(rest, &cr); err != nil || cr.Serve == nil {
		return benchFedResult{}, fmt.Errorf("the coordinator's report: %q", rest)
	}
	r := benchFedResultOf(s, cr.Serve, dr)
	ps := cmd.ProcessState
	r.CoordinatorCPUS = (ps.UserTime() + ps.SystemTime()).Seconds()
	if dr.Updates > 0 {
		r.CPUMsPerUpdate = 1000 * r.CoordinatorCPUS / float64(dr.Updates)
	}
	if dr.Updates > 0 && dr.CoordinatorSubmitCPUSeconds > 0 {
		r.SubmitCPUMsPerUpdate = 1000 * dr.CoordinatorSubmitCPUSeconds / float64(dr.Updates)
		r.ClientCPUMsPerUpdate = 1000 * dr.ClientSubmitCPUSeconds / float64(dr.Updates)
		r.DerivedCapacity = float64(runtime.NumCPU()) * 1000 / r.SubmitCPUMsPerUpdate
	}
	if rss := childPeakRSS(ps); rss > 0 {
		r.PeakRSSMB, r.PeakRSSOf = float64(rss)/(1<<20), "the coordinator process"
	}
	return r, nil
}

// benchFedServe is the coordinator child: it prints its address, serves
// until the rounds are over and prints its report as JSON.
func benchFedServe(ctx context.Context, e *env, f *benchFedFlags) error {
	s := fedbench.Settings{Clients: f.clients, Params: f.params, Rounds: f.rounds, TLS: f.serveTLS, Dir: f.serve}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	r, err := fedbench.Serve(ctx, s, "127.0.0.1:0", func(addr string) { fmt.Fprintln(e.stdout, addr) })
	if err != nil {
		return err
	}
	return json.NewEncoder(e.stdout).Encode(benchFedChildReport{Serve: r})
}

// startProfile starts this process's CPU profile into file+suffix (nothing
// when file is empty) and returns what stops it.
func startProfile(file, suffix string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	pf, err := os.Create(file + suffix)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		pf.Close()
	}, nil
}

// childCPU is the processor time (user and system, all threads) the
// process pid has used so far, from /proc/pid/stat in clock ticks of
// 1/100 s (Linux's USER_HZ); 0 if unknown.
func childCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	fs := strings.Fields(string(b[i+1:]))
	// fs[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fs) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(fs[11], 10, 64)
	st, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * (time.Second / 100)
}

// load1 is the 1-minute load average (0 if unknown).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	fs := strings.Fields(string(b))
	if len(fs) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(fs[0], 64)
	return v
}

// selfPeakRSS is this process's peak resident set in bytes (VmHWM; 0 if
// unknown).
func selfPeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
