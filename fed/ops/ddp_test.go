package ops_test

import (
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/ops"
)

// ddpConfig is a valid --ddp configuration of three-client rounds.
func ddpConfig() ops.Config {
	c := ops.DefaultConfig()
	c.State, c.Init, c.MinAvail, c.MinUpdate, c.SecAggMinHonest = "s.db", "init.ckpt", 3, 3, 3
	c.DDP, c.DDPPeople, c.DDPEpsilon = true, 100, 8
	return c
}

// --ddp's settings are checked before anything is served, in the words
// of the flags; masking is the default --secagg under --ddp and any
// other is refused.
func TestDDPConfigNamesTheFlag(t *testing.T) {
	cases := []struct {
		set  func(*ops.Config)
		want string
	}{
		{func(c *ops.Config) { c.SecAgg = "off" }, `--ddp needs --secagg masking (its default under --ddp), not "off"`},
		{func(c *ops.Config) { c.SecAgg, c.KeyGen = "dphe", "127.0.0.1:7444" }, `--ddp needs --secagg masking (its default under --ddp), not "dphe"`},
		{func(c *ops.Config) { c.DP = false }, "--ddp is DP training: it cannot run with --dp=false"},
		{func(c *ops.Config) { c.ServerLR = 1 }, "--strategy, --server-lr, --momentum and --weighting do not apply"},
		{func(c *ops.Config) { c.Strategy, c.ServerLR = "fedsgd", 1 }, "--strategy, --server-lr, --momentum and --weighting do not apply"},
		{func(c *ops.Config) { c.DDPPeople = 0 }, "--ddp needs --ddp-people"},
		{func(c *ops.Config) { c.DDPEpsilon = 0 }, "--ddp needs --ddp-epsilon > 0"},
		{func(c *ops.Config) { c.DDPMaxClients = 2 }, "--ddp-max-clients (2) must be at least --min-available (3)"},
		{func(c *ops.Config) { c.DDPOptimizer = "lion" }, `--ddp-optimizer "lion": want adam or sgd`},
		{func(c *ops.Config) { c.DDPLR = 0 }, "--ddp-lr must be positive"},
		{func(c *ops.Config) { c.DDPWeightDecay = -1 }, "--ddp-weight-decay must not be negative"},
		{func(c *ops.Config) { c.DDPEMA = 1 }, "--ddp-ema must be in [0, 1)"},
		{func(c *ops.Config) { c.Init = "" }, "--ddp needs --init"},
		{func(c *ops.Config) { c.MinAvail, c.MinUpdate, c.SecAggMinHonest, c.DDPMaxClients = 2, 2, 2, 2 }, "--secagg masking needs rounds of at least 3 clients"},
	}
	for _, tc := range cases {
		c := ddpConfig()
		tc.set(&c)
		if _, err := c.Options(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	c := ddpConfig()
	o, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	if c.SecAgg != "masking" || o.SecAgg == nil || o.SecAgg.MinHonest != 3 || o.Task.DP != nil {
		t.Errorf("--ddp: --secagg %q, secure aggregation %+v, task DP %v; want masking at T = 3 and no local DP-SGD", c.SecAgg, o.SecAgg, o.Task.DP)
	}
	plain := ops.DefaultConfig()
	plain.State, plain.DP = "s.db", false
	if _, err := plain.Options(); err != nil || plain.SecAgg != "off" {
		t.Errorf("without --ddp and --dp --secagg defaults to %q (%v), want off", plain.SecAgg, err)
	}
}
