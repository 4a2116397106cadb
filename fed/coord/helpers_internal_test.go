package coord

import (
	"context"
	"testing"
)

// enrolled returns a coordinator made with o, closed when the test ends,
// with clients enrolled (ε = 100, δ = 1e-5 per identity) and, if start
// is set, a round open with all of them selected.
func enrolled(t *testing.T, o Options, start bool, clients ...string) *Coordinator {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for _, who := range clients {
		if _, err := c.enrol(ctx, who, 100, 1e-5, "identity"); err != nil {
			t.Fatal(err)
		}
	}
	if start {
		if err := c.startRound(ctx, clients); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
