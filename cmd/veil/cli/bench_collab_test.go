package cli

import (
	"strings"
	"testing"
)

func TestBenchCollabRefusesBadFlagsBeforeLoading(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--users", "1"}, "training users"},
		{[]string{"--photos-per-user", "2"}, "at least 4 photos"},
		{[]string{"--epsilon", "8", "--budget", "2"}, "every ledger would refuse"},
		{[]string{"--plot", "out.gif"}, "want a .png or .svg"},
	} {
		code, _, stderr := run(t, append([]string{"bench", "collab", "--data", t.TempDir()}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want 1 and an error naming %q", c.args, code, stderr, c.want)
		}
	}
}

func TestBenchCollabNoisyTagsRefusesBadFlagsBeforeLoading(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--fractions", "1.2"}, "fraction of wrong tags"},
		{[]string{"--alphas", "0"}, "α must be in (0, 1]"},
		{[]string{"--classes", "1"}, "2 hashed-tag classes"},
		{[]string{"--epochs", "-1"}, "epochs, batch and learning rate"},
		{[]string{"--plot", "out.gif"}, "want a .png or .svg"},
	} {
		code, _, stderr := run(t, append([]string{"bench", "collab", "noisy-tags", "--data", t.TempDir()}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want 1 and an error naming %q", c.args, code, stderr, c.want)
		}
	}
}

func TestBenchCollabAsyncRefusesBadFlagsBeforeLoading(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--users", "1"}, "at least 2 clients"},
		{[]string{"--drops", "1"}, "dropout rate p"},
		{[]string{"--periods", "0"}, "period λ"},
		{[]string{"--slowdown", "0.5"}, "slowdown"},
		{[]string{"--plot", "out.svg"}, "want a .png"},
	} {
		code, _, stderr := run(t, append([]string{"bench", "collab", "async", "--data", t.TempDir()}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want 1 and an error naming %q", c.args, code, stderr, c.want)
		}
	}
	code, _, stderr := run(t, "bench", "collab", "--data", t.TempDir(), "--epsilon", "0", "--epsilon-w0", "2")
	if code != 1 || !strings.Contains(stderr, "W₀'s ε needs bootstrapping under DP") {
		t.Errorf("--epsilon-w0 without --epsilon: exit %d, %q", code, stderr)
	}
}
