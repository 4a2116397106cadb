package cli

import (
	"strings"
	"testing"
)

// TestMistypedSubcommandIsAnError checks that every command group refuses
// an unknown subcommand (cobra alone prints the group's help and exits 0,
// so a script's typo would pass silently).
func TestMistypedSubcommandIsAnError(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"fed", "statsu"}, `veil fed has no command "statsu" (did you mean status?)`},
		{[]string{"fed", "certs", "isue"}, `veil fed certs has no command "isue" (did you mean issue?)`},
		{[]string{"bench", "fces"}, `veil bench has no command "fces" (did you mean faces`},
		{[]string{"privacy", "epsilom"}, `veil privacy has no command "epsilom" (did you mean epsilon?)`},
		{[]string{"people", "lsit"}, `veil people has no command "lsit" (did you mean list?)`},
		{[]string{"library", "zzz"}, `veil library has no command "zzz"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want non-zero and %q", code, stderr, tc.want)
			}
		})
	}
	// A group named alone still shows its help and succeeds.
	for _, g := range []string{"fed", "bench", "privacy", "fed certs"} {
		code, stdout, stderr := run(t, strings.Fields(g)...)
		if code != 0 || !strings.Contains(stdout+stderr, "Available Commands") {
			t.Fatalf("veil %s: exit %d, output %q", g, code, stdout+stderr)
		}
	}
}
