package cli

import (
	"strconv"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/strategy"
)

// TestFedSimRefusesContradictoryFlags: settings that would be silently
// ignored are refused before any data are read.
func TestFedSimRefusesContradictoryFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--no-dp", "--target-epsilon", "4"}, "--target-epsilon is a DP setting"},
		{[]string{"--no-dp", "--clip", "2"}, "--clip is a DP setting"},
		{[]string{"--strategy", "fedsgd", "--local-epochs", "3"}, "one local step"},
		{[]string{"--momentum", "0.5"}, "for fedsgd"},
		// Bad settings are refused before the data are read (the folder
		// is empty: reading it would fail otherwise).
		{[]string{"--clients", "0"}, "at least one client"},
		{[]string{"--rounds", "0"}, "rounds must be positive"},
		{[]string{"--strategy", "fedprox"}, `unknown strategy "fedprox"`},
		{[]string{"--privacy-unit", "household"}, `unknown privacy unit "household"`},
		{[]string{"--min-updates", "9"}, "between 1 and the 8 clients"},
		{[]string{"--alpha", "-1"}, "Dirichlet concentration"},
		{[]string{"--dropout", "1"}, "drop-out probability"},
		{[]string{"--server-lr", "-1"}, "--server-lr must not be negative"},
		{[]string{"--target-epsilon", "0"}, "budget"},
		{[]string{"--strategy", "easgd", "--easgd-beta", "2"}, "--easgd-beta must be in (0, 1], got 2"},
		{[]string{"--strategy", "fedbuff", "--fedbuff-size", "0"}, "--fedbuff-size must be at least 1, got 0"},
		{[]string{"--strategy", "fedbuff", "--dropout", "0.2"}, "simulated in rounds only"},
		// Then a missing data folder says which flag to give.
		{nil, "give --data DIR"},
	}
	for _, c := range cases {
		code, _, stderr := run(t, append([]string{"fed", "sim", "--data", t.TempDir()}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, stderr, c.want)
		}
	}
}

// TestFedSimDefaultsAreTheExperiment: veil fed sim without flags runs the
// experiment's settings (the package documentation of fed/sim and the
// README's table): 20 rounds of one local epoch at batch 64 and Adam's
// 0.002, and FedAvg's server learning rate 3 under DP for its 8 clients
// (1 without DP), FedSGD's 1.
func TestFedSimDefaultsAreTheExperiment(t *testing.T) {
	cmd := newFedSimCmd(&env{})
	want := map[string]string{"clients": "8", "strategy": "fedavg", "rounds": "20", "local-epochs": "1", "batch": "64", "lr": "0.002",
		"optimizer": "adam", "target-epsilon": "8", "delta": "1e-05", "clip": "1", "privacy-unit": "identity", "ema": "0", "min-images": "1"}
	for name, v := range want {
		f := cmd.Flags().Lookup(name)
		if f == nil || f.DefValue != v {
			t.Errorf("--%s: default %v, want %s", name, f, v)
		}
	}
	for _, c := range []struct {
		args []string
		want float64
	}{{nil, 3}, {[]string{"--no-dp"}, 1}, {[]string{"--strategy", "fedsgd"}, 1}, {[]string{"--strategy", "fedsgd", "--no-dp"}, 1},
		{[]string{"--server-lr", "5"}, 5}} {
		if got := simServerLR(t, 8, c.args...); got != c.want {
			t.Errorf("%v: server learning rate %g with 8 clients, want %g", c.args, got, c.want)
		}
	}
}

// simServerLR is the server learning rate veil fed sim's coordinator
// applies to a round of k updates, with args.
func simServerLR(t *testing.T, k int, args ...string) float64 {
	t.Helper()
	cmd, f := fedSimCmd(&env{})
	if err := cmd.ParseFlags(append([]string{"--clients", strconv.Itoa(k), "--data", t.TempDir()}, args...)); err != nil {
		t.Fatal(err)
	}
	so, _, err := f.options(cmd.Flags().Changed)
	if err != nil {
		t.Fatal(err)
	}
	s, err := strategy.New(so.StrategyOptions())
	if err != nil {
		t.Fatal(err)
	}
	return s.ServerLR(k)
}

// TestFedCoordinatorServerLRIsFedSims: veil fed coordinator without
// --server-lr applies to a round of K updates the η veil fed sim applies
// with K clients, under DP and without (the coordinator took 1 under DP
// where veil fed sim took 3).
func TestFedCoordinatorServerLRIsFedSims(t *testing.T) {
	for _, dp := range []bool{true, false} {
		for _, k := range []int{1, 2, 3, 4, 8, 9, 16, 100} {
			cmd, f := coordinatorCmd(&env{})
			args := []string{"--state", "state.db", "--min-available", strconv.Itoa(k), "--min-updates", strconv.Itoa(k)}
			var simArgs []string
			if !dp {
				args, simArgs = append(args, "--dp=false"), []string{"--no-dp"}
			}
			if dp && k < 3 {
				// Masking, the default under --dp, needs rounds of 3.
				args = append(args, "--secagg", "off")
			}
			if err := cmd.ParseFlags(args); err != nil {
				t.Fatal(err)
			}
			o, err := f.cfg.Options()
			if err != nil {
				t.Fatal(err)
			}
			s, err := strategy.New(o.Strategy)
			if err != nil {
				t.Fatal(err)
			}
			coordLR, simLR := s.ServerLR(k), simServerLR(t, k, simArgs...)
			if coordLR != simLR {
				t.Errorf("DP %v, %d updates a round: the coordinator's η %g, veil fed sim's %g", dp, k, coordLR, simLR)
			}
			if want := 3.0; dp && k == 8 && coordLR != want {
				t.Errorf("DP, 8 updates a round: η %g, want the measured %g", coordLR, want)
			}
		}
	}
	// FedSGD has no default on a real coordinator.
	cmd, f := coordinatorCmd(&env{})
	if err := cmd.ParseFlags([]string{"--state", "state.db", "--strategy", "fedsgd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cfg.Options(); err == nil || !strings.Contains(err.Error(), "--server-lr") {
		t.Errorf("fedsgd without --server-lr: %v", err)
	}
}
