package fedbench

import (
	"strings"
	"testing"
)

// Masking rounds through the real clients' secure round complete, every
// masked vector counted, and the report's fields are sane.
func TestMaskingRounds(t *testing.T) {
	for _, tc := range []struct{ clients, rounds int }{{3, 2}, {4, 1}} {
		rep, err := Run(runCtx(t), RunOptions{Clients: tc.clients, Params: 1000, Rounds: tc.rounds, TLS: []bool{true}, SecAgg: SecAggMasking, InProcess: true})
		if err != nil {
			t.Fatalf("%d clients: %v", tc.clients, err)
		}
		r := rep.Result
		if r.SecAgg != SecAggMasking || r.SparseGraphs || !r.TLS || r.Clients != tc.clients || r.Rounds != tc.rounds || !(r.UpdatesPerS > 0) ||
			r.UpdatesPerS != r.RoundUpdatesPerS || !(r.RoundS > 0) || r.BytesPerUpdate < 4000 || !(r.AggregateS >= 0) {
			t.Errorf("%d clients: %+v", tc.clients, r)
		}
		// The rounds' wall time bounds the throughput.
		if want := float64(tc.clients*tc.rounds) / (r.RoundS * float64(tc.rounds)); r.UpdatesPerS < 0.999*want || r.UpdatesPerS > 1.001*want {
			t.Errorf("%d clients: %g updates/s, want %g", tc.clients, r.UpdatesPerS, want)
		}
	}
}

// Bad secure aggregation settings are refused before anything runs.
func TestMaskingRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    RunOptions
		want string
	}{
		{"unknown mode", RunOptions{Clients: 3, Params: 10, Rounds: 1, TLS: []bool{true}, SecAgg: "dphe", InProcess: true}, `"dphe"`},
		{"without TLS", RunOptions{Clients: 3, Params: 10, Rounds: 1, TLS: []bool{false, true}, SecAgg: SecAggMasking, InProcess: true}, "mutual TLS"},
		{"two clients", RunOptions{Clients: 2, Params: 10, Rounds: 1, TLS: []bool{true}, SecAgg: SecAggMasking, InProcess: true}, "at least 3"},
	} {
		_, err := Run(runCtx(t), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

func TestSparseGraphsOptIn(t *testing.T) {
	for _, tc := range []struct {
		s    Settings
		want bool
	}{
		{Settings{Clients: 16, SecAgg: SecAggMasking}, false},
		{Settings{Clients: 17, SecAgg: SecAggMasking}, true},
		{Settings{Clients: 20, SecAgg: SecAggOff}, false},
	} {
		if got := tc.s.SparseGraphs(); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.s, got, tc.want)
		}
	}
}
