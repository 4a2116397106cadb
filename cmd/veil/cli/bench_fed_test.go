package cli

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/fedbench"
)

func TestBenchFedInProcess(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "fed", "--clients", "3", "--params", "1000", "--rounds", "2", "--in-process", "--json"}
	if code := Main(args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep struct {
		fedbench.Result
		Runs            []fedbench.Result `json:"runs"`
		TLSUpdatesRatio float64           `json:"tls_updates_ratio"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	// The shape at the top level, for the TLS run.
	var top map[string]any
	if err := json.Unmarshal(out.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"clients", "params", "updates_per_s", "round_s", "bytes_per_update", "peak_rss_mb", "tls"} {
		if _, ok := top[k]; !ok {
			t.Errorf("no %q at the top level of %s", k, out.String())
		}
	}
	if len(rep.Runs) != 2 || rep.Runs[0].TLS || !rep.Runs[1].TLS || !rep.TLS || rep.Result != rep.Runs[1] {
		t.Fatalf("runs %+v, top %+v: want a run without TLS, then one with, on top", rep.Runs, rep.Result)
	}
	for _, r := range rep.Runs {
		if r.Clients != 3 || r.Params != 1000 || r.Rounds != 2 || r.PayloadBytes != 4000 || !(r.UpdatesPerS > 0) || !(r.RoundS > 0) ||
			r.BytesPerUpdate < 4000 || !(r.PeakRSSMB > 0) {
			t.Errorf("run %+v", r)
		}
	}
	if rep.TLSUpdatesRatio != rep.Runs[0].UpdatesPerS/rep.Runs[1].UpdatesPerS {
		t.Errorf("tls_updates_ratio %g, want %g", rep.TLSUpdatesRatio, rep.Runs[0].UpdatesPerS/rep.Runs[1].UpdatesPerS)
	}
}

func TestBenchFedRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--tls", "maybe"}, {"--clients", "0"}, {"--params", "-1"},
		{"--memory-limit", "lots"}, {"--memory-limit", "8MiB"}, {"--memory-limit", "64MiB", "--in-process"},
		{"--secagg", "dphe", "--tls", "on"}, {"--secagg", "masking"}, {"--secagg", "masking", "--tls", "off"}} {
		var out, errb bytes.Buffer
		if code := Main(append([]string{"bench", "fed"}, args...), strings.NewReader(""), &out, &errb); code == 0 {
			t.Errorf("%v: exit 0", args)
		} else if !strings.Contains(errb.String(), args[0]) {
			t.Errorf("%v: the error %q does not name the flag", args, errb.String())
		}
	}
}

// TestBenchFedChildGetsMemoryLimit checks that --memory-limit reaches the
// coordinator child's command line, and off stays off.
func TestBenchFedChildGetsMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		flag string
		want int64
		arg  string
	}{{"128MiB", 128 << 20, "134217728"}, {"off", 0, "off"}} {
		f := &benchFedFlags{clients: 2, params: 10, rounds: 1, tls: "on", memoryLimit: c.flag}
		o, err := f.runOptions()
		if err != nil {
			t.Fatal(err)
		}
		if o.MemoryLimit != c.want {
			t.Errorf("--memory-limit %s: RunOptions.MemoryLimit %d, want %d", c.flag, o.MemoryLimit, c.want)
		}
		argv, err := o.ChildCommand(fedbench.Settings{Clients: 2, Params: 10, Rounds: 1, Dir: t.TempDir(), MemoryLimit: o.MemoryLimit}, "")
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.Index(argv, "--memory-limit"); i < 0 || i+1 >= len(argv) || argv[i+1] != c.arg {
			t.Errorf("--memory-limit %s: the child's command line %q lacks --memory-limit %s", c.flag, argv, c.arg)
		}
	}
}

// --secagg masking, in process, with the real clients'
// secure round.
func TestBenchFedMasking(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "fed", "--clients", "3", "--params", "1000", "--rounds", "2", "--tls", "on", "--secagg", "masking", "--in-process", "--json"}
	if code := Main(args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r fedbench.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.SecAgg != "masking" || !r.TLS || r.Clients != 3 || r.Rounds != 2 || !(r.UpdatesPerS > 0) || !(r.RoundS > 0) || r.BytesPerUpdate < 4000 {
		t.Errorf("%+v", r)
	}
}
