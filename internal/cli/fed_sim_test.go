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
