package fedbench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary play Run's coordinator child: started as
// "fedbench-child SETTINGS-JSON PROFILE" it runs ServeChild, as
// "fedbench-child-fail" it fails before serving.
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "fedbench-child" {
		var s childSettings
		if err := json.Unmarshal([]byte(os.Args[2]), &s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		set := Settings{Clients: s.Clients, Params: s.Params, Rounds: s.Rounds, TLS: s.TLS, Dir: s.Dir}
		if err := ServeChild(context.Background(), set, os.Args[3], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) == 2 && os.Args[1] == "fedbench-child-fail" {
		fmt.Fprintln(os.Stderr, "no coordinator here")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// childSettings are the Settings a child is started with.
type childSettings struct {
	Clients, Params, Rounds int
	TLS                     bool
	Dir                     string
}

func testChild(s Settings, prof string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(childSettings{Clients: s.Clients, Params: s.Params, Rounds: s.Rounds, TLS: s.TLS, Dir: s.Dir})
	if err != nil {
		return nil, err
	}
	return []string{self, "fedbench-child", string(b), prof}, nil
}

func runCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Run with the coordinator in a child process: a run without TLS, then
// one with, the TLS run on top, TLS's cost as ratios of the two runs, the
// child's CPU time and peak memory, and each run's profiles.
func TestRunInAChildProcess(t *testing.T) {
	prof := t.TempDir() + "/cpu"
	var progress []Result
	rep, err := Run(runCtx(t), RunOptions{Clients: 3, Params: 1000, Rounds: 2, TLS: []bool{false, true},
		ChildCommand: testChild, CPUProfile: prof, Progress: func(r Result) { progress = append(progress, r) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].TLS || !rep.Runs[1].TLS || rep.Result != rep.Runs[1] || len(progress) != 2 || progress[1] != rep.Runs[1] {
		t.Fatalf("runs %+v, top %+v, progress %+v: want a run without TLS, then one with, on top, each reported", rep.Runs, rep.Result, progress)
	}
	for _, r := range rep.Runs {
		if r.Clients != 3 || r.Params != 1000 || r.Rounds != 2 || r.PayloadBytes != 4000 || !(r.UpdatesPerS > 0) || !(r.RoundS > 0) ||
			r.BytesPerUpdate < 4000 || !(r.CoordinatorCPUS > 0) || r.CPUMsPerUpdate != 1000*r.CoordinatorCPUS/6 {
			t.Errorf("run %+v", r)
		}
		if runtime.GOOS == "linux" && (!(r.PeakRSSMB > 0) || r.PeakRSSOf != "the coordinator process") {
			t.Errorf("TLS %v: peak RSS %g MiB of %q, want the coordinator process's", r.TLS, r.PeakRSSMB, r.PeakRSSOf)
		}
	}
	if want := rep.Runs[0].UpdatesPerS / rep.Runs[1].UpdatesPerS; rep.TLSUpdatesRatio != want {
		t.Errorf("tls_updates_ratio %g, want %g", rep.TLSUpdatesRatio, want)
	}
	if want := rep.Runs[1].CPUMsPerUpdate / rep.Runs[0].CPUMsPerUpdate; rep.TLSCPURatio != want {
		t.Errorf("tls_cpu_ratio %g, want %g", rep.TLSCPURatio, want)
	}
	for _, suffix := range []string{"-plain", "-tls", "-plain-clients", "-tls-clients"} {
		if st, err := os.Stat(prof + suffix); err != nil || st.Size() == 0 {
			t.Errorf("profile %s: %v", suffix, err)
		}
	}
}

// In process, one run with TLS: no ratios, and the peak memory is said to
// be the whole process's.
func TestRunInProcess(t *testing.T) {
	rep, err := Run(runCtx(t), RunOptions{Clients: 2, Params: 500, Rounds: 1, TLS: []bool{true}, InProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Result
	if len(rep.Runs) != 1 || r != rep.Runs[0] || !r.TLS || r.Clients != 2 || r.PayloadBytes != 2000 || !(r.UpdatesPerS > 0) ||
		rep.TLSUpdatesRatio != 0 || rep.TLSCPURatio != 0 || r.CoordinatorCPUS != 0 || !strings.Contains(r.PeakRSSOf, "whole process") {
		t.Fatalf("report %+v", rep)
	}
	if runtime.GOOS == "linux" && !(r.PeakRSSMB > 0) {
		t.Errorf("peak RSS %g MiB", r.PeakRSSMB)
	}
}

func TestRunRefusesBadOptions(t *testing.T) {
	ok := RunOptions{Clients: 1, Params: 1, Rounds: 1, TLS: []bool{true}, InProcess: true}
	for _, c := range []struct {
		name string
		edit func(*RunOptions)
		want string
	}{
		{"no clients", func(o *RunOptions) { o.Clients = 0 }, "clients, params and rounds"},
		{"negative params", func(o *RunOptions) { o.Params = -1 }, "got 1, -1 and 1"},
		{"no rounds", func(o *RunOptions) { o.Rounds = 0 }, "at least 1"},
		{"no run", func(o *RunOptions) { o.TLS = nil }, "no run"},
		{"no child command", func(o *RunOptions) { o.InProcess = false }, "ChildCommand"},
	} {
		o := ok
		c.edit(&o)
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// A child that exits before serving is reported with what it said.
func TestRunReportsAChildThatDoesNotStart(t *testing.T) {
	_, err := Run(runCtx(t), RunOptions{Clients: 1, Params: 10, Rounds: 1, TLS: []bool{false},
		ChildCommand: func(Settings, string) ([]string, error) {
			self, err := os.Executable()
			return []string{self, "fedbench-child-fail"}, err
		}})
	if err == nil || !strings.Contains(err.Error(), "did not start: no coordinator here") || !strings.Contains(err.Error(), "TLS false") {
		t.Fatalf("%v", err)
	}
	_, err = Run(runCtx(t), RunOptions{Clients: 1, Params: 10, Rounds: 1, TLS: []bool{false},
		ChildCommand: func(Settings, string) ([]string, error) { return nil, nil }})
	if err == nil || !strings.Contains(err.Error(), "command line is empty") {
		t.Fatalf("an empty command line: %v", err)
	}
}

// The /proc readers: this process's CPU time grows with work, its peak
// resident set is known, the load average is not negative; an unknown
// process has no CPU time.
func TestProcReaders(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before := childCPU(os.Getpid())
	x := uint64(1)
	for i := 0; childCPU(os.Getpid()) < before+50*time.Millisecond; i++ {
		if i >= 1<<34 {
			t.Fatalf("childCPU stayed at %v", before)
		}
		x = x*6364136223846793005 + 1442695040888963407
	}
	if childCPU(-1) != 0 {
		t.Error("a CPU time for pid -1")
	}
	if rss := selfPeakRSS(); rss < 1<<20 {
		t.Errorf("peak RSS %d bytes (x=%d)", rss, x)
	}
	if l := load1(); l < 0 {
		t.Errorf("load average %g", l)
	}
}
