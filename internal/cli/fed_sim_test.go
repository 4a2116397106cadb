package cli

import (
	"strings"
	"testing"
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
// 0.002, and FedAvg's server learning rate 3 under DP (1 without DP and
// for FedSGD).
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
		strategy string
		dp       bool
		want     float64
	}{{"fedavg", true, 3}, {"fedavg", false, 1}, {"fedsgd", true, 1}, {"fedsgd", false, 1}} {
		if got := defaultServerLR(c.strategy, c.dp); got != c.want {
			t.Errorf("server learning rate of %s (DP %v): %g, want %g", c.strategy, c.dp, got, c.want)
		}
	}
}
