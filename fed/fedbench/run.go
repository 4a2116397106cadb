package fedbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// Result is one run of the benchmark (one TLS setting): what Serve and
// Drive measured, put together, with the processes' CPU time and memory.
type Result struct {
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
	// Split is where a round's time goes (SplitOf).
	Split Split `json:"split"`
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
	// MemoryLimitMiB is the coordinator child's soft memory limit
	// (Settings.MemoryLimit; absent: none, the Go runtime's pacing).
	MemoryLimitMiB float64 `json:"coordinator_memory_limit_mib,omitempty"`
	// RoundUpdatesPerS is the updates over the rounds' summed wall time
	// at the coordinator (start to close): the figure comparable between
	// plaintext and masking rounds.
	RoundUpdatesPerS float64 `json:"round_updates_per_s"`
	// SecAgg is the rounds' secure aggregation (off or masking);
	// SparseGraphs says the clients accepted a sparse masking graph
	// (client.SecAggPolicy.SparseGraphs), which real clients refuse by
	// default.
	SecAgg       string `json:"secagg"`
	SparseGraphs bool   `json:"sparse_graphs,omitempty"`
}

// Report is veil bench fed's JSON: the last run's fields at the top level
// (with RunOptions.TLS both, the TLS run: how a federation runs), every
// run in runs, and TLS's cost as ratios measured in the same invocation.
type Report struct {
	Result
	Runs []Result `json:"runs"`
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

// ChildReport is what the coordinator child (ServeChild) prints last.
type ChildReport struct {
	Serve *ServeReport `json:"serve"`
}

// RunOptions configure Run.
type RunOptions struct {
	// Clients, Params and Rounds are every run's Settings (at least 1).
	Clients, Params, Rounds int
	// TLS lists the runs, in order: false without TLS, true with mutual
	// TLS. With {false, true} the report holds TLS's cost as ratios.
	TLS []bool
	// SecAgg is every run's Settings.SecAgg ("off", "" or "masking":
	// masking needs every run with TLS and at least 3 clients).
	SecAgg string
	// InProcess runs the coordinator in this process (the peak resident
	// set is then the whole process's, clients included); otherwise it
	// runs in a child process started with ChildCommand.
	InProcess bool
	// ChildCommand returns the command line (program first) of a process
	// that runs ServeChild for s and cpuProfile. Required unless
	// InProcess.
	ChildCommand func(s Settings, cpuProfile string) ([]string, error)
	// CPUProfile, if set, receives each run's CPU profiles (pprof): the
	// coordinator's in CPUProfile-tls or -plain, the clients' (this
	// process) in CPUProfile-tls-clients or -plain-clients. Child runs
	// only.
	CPUProfile string
	// MemoryLimit is the coordinator child's Settings.MemoryLimit.
	MemoryLimit int64
	// Progress, if set, receives each run's result as it ends.
	Progress func(Result)
}

func (o *RunOptions) validate() error {
	if o.Clients < 1 || o.Params < 1 || o.Rounds < 1 {
		return fmt.Errorf("fedbench: clients, params and rounds must be at least 1, got %d, %d and %d", o.Clients, o.Params, o.Rounds)
	}
	if len(o.TLS) == 0 {
		return errors.New("fedbench: no run asked for (RunOptions.TLS is empty)")
	}
	if o.InProcess && o.MemoryLimit != 0 {
		return errors.New("fedbench: a memory limit is the coordinator child's: it does not go with InProcess")
	}
	for _, tls := range o.TLS {
		s := Settings{Clients: o.Clients, TLS: tls, SecAgg: o.SecAgg}
		if err := s.validateSecAgg(); err != nil {
			return err
		}
	}
	if !o.InProcess && o.ChildCommand == nil {
		return errors.New("fedbench: a coordinator child needs RunOptions.ChildCommand")
	}
	return nil
}

// Run prepares certificates in a temporary folder (removed after) and
// makes one run per entry of o.TLS.
func Run(ctx context.Context, o RunOptions) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "veil-bench-fed-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pkiDir := dir + "/pki"
	if err := Prepare(pkiDir, o.Clients); err != nil {
		return nil, err
	}
	rep := &Report{LoadAverage: load1()}
	for _, tls := range o.TLS {
		s := Settings{Clients: o.Clients, Params: o.Params, Rounds: o.Rounds, TLS: tls, Dir: pkiDir, MemoryLimit: o.MemoryLimit, SecAgg: o.SecAgg}
		var r Result
		if o.InProcess {
			r, err = InProcess(ctx, s)
		} else {
			var prof string
			if o.CPUProfile != "" {
				prof = o.CPUProfile + map[bool]string{false: "-plain", true: "-tls"}[tls]
			}
			r, err = child(ctx, s, o.ChildCommand, prof)
		}
		if err != nil {
			return nil, fmt.Errorf("veil bench fed (TLS %v): %w", tls, err)
		}
		if o.Progress != nil {
			o.Progress(r)
		}
		rep.Runs = append(rep.Runs, r)
	}
	rep.Result = rep.Runs[len(rep.Runs)-1]
	if slices.Equal(o.TLS, []bool{false, true}) {
		off, on := rep.Runs[0], rep.Runs[1]
		rep.TLSUpdatesRatio = off.UpdatesPerS / on.UpdatesPerS
		if off.CPUMsPerUpdate > 0 {
			rep.TLSCPURatio = on.CPUMsPerUpdate / off.CPUMsPerUpdate
		}
	}
	return rep, nil
}

// ResultOf combines what the two halves measured.
func ResultOf(s Settings, sr *ServeReport, dr *DriveReport) Result {
	if dr.SecAgg == SecAggMasking {
		return secureResultOf(s, sr, dr)
	}
	r := Result{Clients: s.Clients, Params: s.Params, UpdatesPerS: dr.UpdatesPerSecond, SecAgg: SecAggOff, RoundS: mean(sr.RoundSeconds),
		BytesPerUpdate: dr.BytesPerUpdate, TLS: s.TLS, Rounds: s.Rounds, PayloadBytes: dr.PayloadBytes, SubmitS: mean(dr.SubmitSeconds),
		DownloadS: mean(dr.DownloadSeconds), AggregateS: mean(sr.AggregateSeconds), Split: SplitOf(sr, dr)}
	if total := r.RoundS * float64(len(sr.RoundSeconds)); total > 0 {
		r.RoundUpdatesPerS = float64(dr.Updates) / total
	}
	return r
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

// InProcess runs the coordinator (Serve) and the clients (Drive) in this
// process; the peak resident set is the whole process's.
func InProcess(ctx context.Context, s Settings) (Result, error) {
	sr, dr, err := serveAndDrive(ctx, s)
	if err != nil {
		return Result{}, err
	}
	r := ResultOf(s, sr, dr)
	r.PeakRSSMB, r.PeakRSSOf = float64(selfPeakRSS())/(1<<20), "this whole process (--in-process: coordinator and clients)"
	return r, nil
}

// serveAndDrive runs Serve and Drive for s in this process.
func serveAndDrive(ctx context.Context, s Settings) (*ServeReport, *DriveReport, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr := make(chan string, 1)
	type served struct {
		r   *ServeReport
		err error
	}
	done := make(chan served, 1)
	go func() {
		r, err := Serve(ctx, s, "127.0.0.1:0", func(a string) { addr <- a })
		done <- served{r, err}
	}()
	var a string
	select {
	case a = <-addr:
	case sv := <-done:
		return nil, nil, fmt.Errorf("the coordinator stopped: %w", sv.err)
	}
	dr, err := Drive(ctx, s, a)
	if err != nil {
		cancel()
		<-done
		return nil, nil, err
	}
	sv := <-done
	if sv.err != nil {
		return nil, nil, sv.err
	}
	return sv.r, dr, nil
}

// child runs the coordinator as a child process (the command line of
// command) and the clients here.
func child(ctx context.Context, s Settings, command func(Settings, string) ([]string, error), cpuProfile string) (Result, error) {
	argv, err := command(s, cpuProfile)
	if err != nil {
		return Result{}, err
	}
	if len(argv) == 0 {
		return Result{}, errors.New("fedbench: the coordinator child's command line is empty")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("starting the coordinator: %w", err)
	}
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil {
		cmd.Wait()
		return Result{}, fmt.Errorf("the coordinator did not start: %s", strings.TrimSpace(stderr.String()))
	}
	pid := cmd.Process.Pid
	s.CoordinatorCPU = func() time.Duration { return childCPU(pid) }
	stopProfile, err := startProfile(cpuProfile, "-clients")
	if err != nil {
		cancel()
		cmd.Wait()
		return Result{}, err
	}
	dr, derr := Drive(ctx, s, strings.TrimSpace(line))
	stopProfile()
	if derr != nil {
		cancel()
	}
	rest, _ := io.ReadAll(rd)
	werr := cmd.Wait()
	if derr != nil {
		return Result{}, derr
	}
	if werr != nil {
		return Result{}, fmt.Errorf("the coordinator: %w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	var cr ChildReport
	if err := json.Unmarshal(rest, &cr); err != nil || cr.Serve == nil {
		return Result{}, fmt.Errorf("the coordinator's report: %q", rest)
	}
	return childResult(s, cr.Serve, dr, cmd.ProcessState), nil
}

// childResult is ResultOf with the coordinator child's CPU time and peak
// resident set.
func childResult(s Settings, sr *ServeReport, dr *DriveReport, ps *os.ProcessState) Result {
	r := ResultOf(s, sr, dr)
	r.CoordinatorCPUS = (ps.UserTime() + ps.SystemTime()).Seconds()
	if dr.Updates > 0 {
		r.CPUMsPerUpdate = 1000 * r.CoordinatorCPUS / float64(dr.Updates)
	}
	if dr.Updates > 0 && dr.CoordinatorSubmitCPUSeconds > 0 {
		r.SubmitCPUMsPerUpdate = 1000 * dr.CoordinatorSubmitCPUSeconds / float64(dr.Updates)
		r.ClientCPUMsPerUpdate = 1000 * dr.ClientSubmitCPUSeconds / float64(dr.Updates)
		r.DerivedCapacity = float64(runtime.NumCPU()) * 1000 / r.SubmitCPUMsPerUpdate
	}
	r.MemoryLimitMiB = float64(s.MemoryLimit) / (1 << 20)
	if rss := childPeakRSS(ps); rss > 0 {
		r.PeakRSSMB, r.PeakRSSOf = float64(rss)/(1<<20), "the coordinator process"
	}
	return r
}

// ServeChild is the coordinator child of Run: it writes its CPU profile
// to cpuProfile (if set), serves s on loopback, prints its address as a
// line to w, serves until the rounds are over (at most 30 minutes) and
// prints its ChildReport as JSON.
func ServeChild(ctx context.Context, s Settings, cpuProfile string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	stop, err := startProfile(cpuProfile, "")
	if err != nil {
		return err
	}
	defer stop()
	r, err := Serve(ctx, s, "127.0.0.1:0", func(addr string) { fmt.Fprintln(w, addr) })
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(ChildReport{Serve: r})
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
