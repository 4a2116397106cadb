package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFedClientPolicyFlags: --help explains the owner's policy flags, and
// a bad value is refused naming its flag before anything is dialled.
func TestFedClientPolicyFlags(t *testing.T) {
	help := mustVeil(t, "fed", "client", "--help")
	for _, f := range []string{"--min-noise-multiplier", "--max-clip", "--max-sampling-rate", "--allow-no-dp", "exits with status 5"} {
		if !strings.Contains(help, f) {
			t.Errorf("veil fed client --help does not mention %s", f)
		}
	}
	for _, c := range []struct{ flag, value string }{
		{"--min-noise-multiplier", "-1"}, {"--min-noise-multiplier", "NaN"}, {"--max-clip", "0"}, {"--max-clip", "+Inf"},
		{"--max-sampling-rate", "0"}, {"--max-sampling-rate", "1.5"},
	} {
		code, _, errs := runVeil(t, "", "fed", "client", "--coordinator", "127.0.0.1:1", "--budget-epsilon", "8",
			"--dir", filepath.Join(t.TempDir(), "c"), c.flag, c.value)
		if code == 0 || !strings.Contains(errs, c.flag) {
			t.Errorf("%s %s: exit %d, %q", c.flag, c.value, code, errs)
		}
	}
}
