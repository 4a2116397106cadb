package cli

import (
	"bytes"
	"encoding/json"
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
	for _, args := range [][]string{{"--tls", "maybe"}, {"--clients", "0"}, {"--params", "-1"}} {
		var out, errb bytes.Buffer
		if code := Main(append([]string{"bench", "fed"}, args...), strings.NewReader(""), &out, &errb); code == 0 {
			t.Errorf("%v: exit 0", args)
		} else if !strings.Contains(errb.String(), args[0]) {
			t.Errorf("%v: the error %q does not name the flag", args, errb.String())
		}
	}
}
