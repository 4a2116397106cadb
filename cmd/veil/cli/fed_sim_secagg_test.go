package cli

import (
	"strings"
	"testing"
)

// TestFedSimSecaggRefusesBadSettings: --secagg masking's settings are
// checked before the data are read (the data folder is empty), and the
// local-DP federation's own settings are refused with it.
func TestFedSimSecaggRefusesBadSettings(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--secagg", "paillier"}, `--secagg "paillier": want off, masking or dphe`},
		{[]string{"--dphe-count", "3"}, "--dphe-count applies to --secagg dphe only, not off"},
		{[]string{"--secagg", "masking", "--dphe-threshold", "1"}, "--dphe-threshold applies to --secagg dphe only, not masking"},
		{[]string{"--secagg", "dphe", "--strategy", "fedsgd"}, "--strategy does not apply to --secagg dphe"},
		{[]string{"--secagg", "dphe", "--dropout", "0.1"}, "simulates no drop-outs"},
		{[]string{"--secagg", "dphe", "--network"}, "give --data DIR"},
		{[]string{"--secagg", "dphe", "--dphe-count", "-1"}, "selection count must be at least one block"},
		{[]string{"--secagg", "dphe", "--clients", "2"}, "at least 3 clients"},
		{[]string{"--secagg", "dphe"}, "give --data DIR"},
		{[]string{"--drop-per-round", "2"}, "--drop-per-round applies to --secagg masking only"},
		{[]string{"--min-honest", "2"}, "--min-honest applies to --secagg masking only"},
		{[]string{"--secagg", "masking", "--strategy", "fedsgd"}, "--strategy does not apply to --secagg masking"},
		{[]string{"--secagg", "masking", "--no-dp"}, "--no-dp does not apply"},
		{[]string{"--secagg", "masking", "--local-epochs", "2"}, "--local-epochs does not apply"},
		{[]string{"--secagg", "masking", "--drop-per-round", "8"}, "--drop-per-round must be in [0, 8)"},
		{[]string{"--secagg", "masking", "--min-honest", "8"}, "--min-honest must be in [0, 7]"},
		{[]string{"--network"}, "--network applies to --secagg masking or dphe only"},
		{[]string{"--secagg", "masking", "--network", "--drop-per-round", "1"}, "--network simulates no drop-outs"},
		{[]string{"--secagg", "masking", "--network"}, "give --data DIR"},
		{[]string{"--secagg", "masking"}, "give --data DIR"},
	} {
		code, _, stderr := run(t, append([]string{"fed", "sim", "--data", t.TempDir()}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, stderr, c.want)
		}
	}
}
