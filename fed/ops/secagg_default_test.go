package ops_test

import (
	"testing"

	"github.com/veil-privacy/veil/fed/ops"
)

// --secagg defaults to masking under DP (the default) with every strategy
// masking serves, so that a default coordinator sees only sums of at
// least t clients' updates; plaintext (off) is the default only without
// DP and with easgd, which cannot be masked, and an explicit off is
// honoured. --min-available follows: 3 under masking, else 2.
func TestSecAggDefaults(t *testing.T) {
	cases := []struct {
		name      string
		set       func(*ops.Config)
		secagg    string
		available int
	}{
		{"dp (default) fedavg", func(*ops.Config) {}, "masking", 3},
		{"dp fedsgd", func(c *ops.Config) { c.Strategy, c.ServerLR = "fedsgd", 1 }, "masking", 3},
		{"dp fedbuff", func(c *ops.Config) { c.Strategy = "fedbuff" }, "masking", 2},
		{"dp easgd", func(c *ops.Config) { c.Strategy = "easgd" }, "off", 2},
		{"dp=false", func(c *ops.Config) { c.DP = false }, "off", 2},
		{"dp=false fedbuff", func(c *ops.Config) { c.DP, c.Strategy = false, "fedbuff" }, "off", 2},
		{"explicit off under dp", func(c *ops.Config) { c.SecAgg = "off" }, "off", 2},
		{"explicit masking without dp", func(c *ops.Config) { c.DP, c.SecAgg = false, "masking" }, "masking", 3},
		{"min-updates above the default", func(c *ops.Config) { c.MinUpdate, c.SecAggMinHonest = 4, 3 }, "masking", 4},
		{"explicit min-available", func(c *ops.Config) { c.MinAvail = 5 }, "masking", 5},
		{"ddp", func(c *ops.Config) { c.DDP, c.DDPPeople, c.DDPEpsilon, c.Init = true, 100, 8, "head.ckpt" }, "masking", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ops.DefaultConfig()
			c.State = "s.db"
			tc.set(&c)
			o, err := c.Options()
			if err != nil {
				t.Fatal(err)
			}
			if c.SecAgg != tc.secagg || c.MinAvail != tc.available || o.MinAvailable != tc.available {
				t.Fatalf("--secagg %q, --min-available %d (options %d); want %q and %d", c.SecAgg, c.MinAvail, o.MinAvailable, tc.secagg, tc.available)
			}
			if masked := o.SecAgg != nil && o.SecAgg.Mode == "masking"; masked != (tc.secagg == "masking") {
				t.Fatalf("--secagg %q but the coordinator's secure aggregation is %+v", c.SecAgg, o.SecAgg)
			}
		})
	}
}
