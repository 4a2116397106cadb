package ops_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/ops"
)

func TestDecodeConfig(t *testing.T) {
	full := ops.DefaultConfig()
	full.State, full.PKI, full.Listen, full.MetricsListen = "/var/lib/veil/coordinator.db", "/etc/veil/pki", "0.0.0.0:7443", "127.0.0.1:9464"
	full.Init, full.Out, full.Rounds, full.Fraction, full.MinAvail, full.MinUpdate = "head.ckpt", "federated.ckpt", 20, 0.5, 4, 3
	full.Deadline, full.LocalEpochs, full.LR, full.Batch = ops.Duration(5*time.Minute), 2, 0.05, 16
	full.Clip, full.Delta, full.MaxUpdateNorm = 1.5, 1e-6, 50
	partial := ops.DefaultConfig()
	partial.DP, partial.Strategy, partial.ServerLR, partial.Momentum = false, "fedsgd", 0.5, 0.9
	cases := []struct {
		file    string
		want    *ops.Config
		errPart string
	}{
		{"full.json", &full, ""},
		{"partial.json", &partial, ""},
		{"unknown-key.json", nil, `unknown key "roundz" (the keys are veil fed coordinator's flag names)`},
		{"wrong-type.json", nil, "rounds"},
		{"bad-duration.json", nil, `duration "soon"`},
		{"two-values.json", nil, "more than one JSON value"},
		{"truncated.json", nil, "configuration"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "config", c.file))
			if err != nil {
				t.Fatal(err)
			}
			got := ops.DefaultConfig()
			err = ops.DecodeConfig(bytes.NewReader(b), &got)
			if c.want == nil {
				if err == nil || !strings.Contains(err.Error(), c.errPart) {
					t.Fatalf("got %v, want an error containing %q", err, c.errPart)
				}
				if !reflect.DeepEqual(got, ops.DefaultConfig()) {
					t.Fatal("a refused file changed the configuration")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, *c.want) {
				t.Fatalf("got %+v\nwant %+v", got, *c.want)
			}
		})
	}
}

func TestDecodeConfigRefusesLargeFiles(t *testing.T) {
	b := []byte(`{"state": "` + strings.Repeat("x", ops.MaxConfigBytes) + `"}`)
	c := ops.DefaultConfig()
	if err := ops.DecodeConfig(bytes.NewReader(b), &c); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("got %v", err)
	}
}

func TestConfigOptions(t *testing.T) {
	c := ops.DefaultConfig()
	if _, err := c.Options(); err == nil || !strings.Contains(err.Error(), "--state") {
		t.Fatalf("no state file: %v", err)
	}
	c.State = "s.db"
	o, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Task.DP == nil || o.Task.DP.GetClip() != 1 || o.Task.DP.GetPrivacyUnit() != "identity" || o.RoundTimeout != 10*time.Minute {
		t.Fatalf("options %+v", o)
	}
	if o.SecAgg == nil || o.SecAgg.Mode != "masking" || o.MinAvailable != 3 {
		t.Fatalf("by default (--dp) secure aggregation is %+v with --min-available %d, want masking over at least 3", o.SecAgg, o.MinAvailable)
	}
	c = ops.DefaultConfig()
	c.State, c.DP = "s.db", false
	if o, err := c.Options(); err != nil || o.Task.DP != nil || o.SecAgg != nil {
		t.Fatalf("--dp=false: DP %v, secure aggregation %+v, %v; want neither", o.Task.DP, o.SecAgg, err)
	}
	c.SecAgg, c.MinAvail, c.SecAggPhase = "masking", 3, ops.Duration(time.Minute)
	if o, err := c.Options(); err != nil || o.SecAgg == nil || o.SecAgg.Mode != "masking" || o.SecAgg.MinHonest != 2 || o.SecAgg.PhaseTimeout != time.Minute {
		t.Fatalf("--secagg masking: %+v, %v", o.SecAgg, err)
	}
	c.Strategy = "fedprox"
	if _, err := c.Options(); err == nil {
		t.Fatal("an unknown strategy was accepted")
	}
}

// Bad settings are refused in the words of the flags (the configuration
// file's keys), not of the coordinator's internals.
func TestConfigOptionsNameTheFlag(t *testing.T) {
	cases := []struct {
		set  func(*ops.Config)
		want string
	}{
		{func(c *ops.Config) { c.Strategy = "fedprox" }, `--strategy "fedprox": want fedavg, fedsgd, easgd or fedbuff`},
		{func(c *ops.Config) { c.Strategy, c.EASGDBeta = "easgd", 0 }, "--easgd-beta must be in (0, 1], got 0"},
		{func(c *ops.Config) { c.Strategy, c.EASGDPeriod = "easgd", 0 }, "--easgd-period must be at least 1, got 0"},
		{func(c *ops.Config) { c.Strategy, c.SecAgg, c.FedBuffSize = "fedbuff", "off", 0 }, "--fedbuff-size must be at least 1, got 0"},
		{func(c *ops.Config) { c.Strategy, c.FedBuffSize = "fedbuff", 2 }, "got 2; or pass --secagg off (masking is the default under --dp)"},
		{func(c *ops.Config) { c.Strategy, c.ThinP = "fedbuff", 0.2 }, "cannot merge; or pass --secagg off (masking is the default under --dp)"},
		{func(c *ops.Config) { c.Strategy, c.MaxStaleness = "fedbuff", -1 }, "--max-staleness must not be negative, got -1"},
		{func(c *ops.Config) { c.Strategy, c.ThinP = "easgd", 1 }, "--thin-p must be in [0, 1), got 1"},
		{func(c *ops.Config) { c.ThinP = 0.5 }, "--thin-p is for --strategy easgd or fedbuff, not fedavg"},
		{func(c *ops.Config) { c.Strategy, c.SecAgg, c.FedBuffSize = "fedbuff", "masking", 2 }, "--fedbuff-size clients, which must be at least 3 (and at least the threshold t): got 2"},
		{func(c *ops.Config) { c.Strategy, c.SecAgg, c.ThinP = "fedbuff", "masking", 0.2 }, "--thin-p is not supported with --secagg masking"},
		{func(c *ops.Config) { c.Strategy, c.SecAgg, c.MinAvail = "easgd", "masking", 3 }, "--strategy easgd cannot run with --secagg masking: each elastic exchange"},
		{func(c *ops.Config) {
			c.Strategy, c.SecAgg, c.KeyGen, c.MinAvail, c.MinUpdate, c.DP, c.NoiseMultiplier = "fedbuff", "dphe", "127.0.0.1:1", 3, 3, true, 1
		}, "--strategy fedbuff with --secagg dphe is not supported yet"},
		{func(c *ops.Config) { c.Weighting = "size" }, `--weighting "size"`},
		{func(c *ops.Config) { c.Strategy = "fedsgd" }, "--strategy fedsgd needs --server-lr > 0"},
		{func(c *ops.Config) { c.ServerLR = -1 }, "--server-lr must not be negative"},
		{func(c *ops.Config) { c.Momentum = 0.9 }, "--momentum is for --strategy fedsgd"},
		{func(c *ops.Config) { c.Strategy, c.ServerLR, c.Momentum = "fedsgd", 1, 1 }, "--momentum must be in [0, 1)"},
		{func(c *ops.Config) { c.Rounds = 0 }, "--rounds must be at least 1, got 0"},
		{func(c *ops.Config) { c.Fraction = 2 }, "--fraction must be in (0, 1], got 2"},
		{func(c *ops.Config) { c.MinUpdate = 0 }, "--min-updates must be at least 1"},
		{func(c *ops.Config) { c.MinAvail, c.MinUpdate = 1, 2 }, "--min-available (1) must be at least --min-updates (2)"},
		{func(c *ops.Config) { c.LocalEpochs, c.LocalSteps = 0, 0 }, "--local-epochs or --local-steps"},
		{func(c *ops.Config) { c.LR = 0 }, "--lr must be positive"},
		{func(c *ops.Config) { c.Batch = 0 }, "--batch must be at least 1"},
		{func(c *ops.Config) { c.MaxUpdateNorm = -1 }, "--max-update-norm must be positive"},
		{func(c *ops.Config) { c.Clip = 0 }, "--clip must be positive"},
		{func(c *ops.Config) { c.Delta = 1 }, "--delta must be in (0, 1)"},
		{func(c *ops.Config) { c.NoiseMultiplier = -1 }, "--noise-multiplier must not be negative"},
		{func(c *ops.Config) { c.Unit = "photo" }, `--privacy-unit "photo": want identity`},
		{func(c *ops.Config) { c.Listen = "nonsense" }, `--listen "nonsense": want HOST:PORT`},
		{func(c *ops.Config) { c.Listen = "127.0.0.1:99999" }, `--listen "127.0.0.1:99999": want HOST:PORT`},
		{func(c *ops.Config) { c.Listen = "" }, `--listen "": want HOST:PORT`},
		{func(c *ops.Config) { c.MetricsListen = "9464" }, `--metrics-listen "9464": want HOST:PORT`},
		{func(c *ops.Config) { c.StreamIdle = 0 }, "--stream-idle must be positive"},
		{func(c *ops.Config) { c.ReceiveBudgetMiB = 0 }, "--receive-budget-mib must be in 1…"},
		{func(c *ops.Config) { c.SecAgg = "dp" }, `--secagg "dp": want masking, dphe or off`},
		{func(c *ops.Config) { c.SecAgg = "dphe" }, "--secagg dphe needs --keygen"},
		{func(c *ops.Config) { c.SecAgg, c.KeyGen = "dphe", "127.0.0.1:7444" }, "--secagg dphe decrypts only sums of at least 3 clients"},
		{func(c *ops.Config) { c.SecAgg, c.KeyGen, c.MinAvail, c.MinUpdate = "dphe", "127.0.0.1:7444", 3, 3 }, "--secagg dphe needs DP and --noise-multiplier > 0"},
		{func(c *ops.Config) {
			c.SecAgg, c.KeyGen, c.MinAvail, c.MinUpdate, c.NoiseMultiplier, c.DPHECount = "dphe", "127.0.0.1:7444", 3, 3, 1, 0
		}, "--secagg dphe needs --dphe-count ≥ 1"},
		{func(c *ops.Config) { c.SecAgg, c.MinAvail = "masking", 2 }, "--secagg masking needs rounds of at least 3 clients: --min-available is 2"},
		{func(c *ops.Config) { c.MinAvail = 2 }, "--min-available is 2; pass --min-available 3 or more; or pass --secagg off (masking is the default under --dp)"},
		{func(c *ops.Config) { c.SecAgg, c.MinAvail, c.SecAggMinHonest = "masking", 3, 3 }, "--secagg-min-honest must be in [2, --min-updates = 2], got 3"},
		{func(c *ops.Config) { c.SecAgg, c.MinAvail, c.SecAggDegree = "masking", 3, -1 }, "--secagg-degree, --secagg-threshold and --secagg-phase must not be negative"},
	}
	for _, tc := range cases {
		c := ops.DefaultConfig()
		c.State = "s.db"
		tc.set(&c)
		if _, err := c.Options(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	// DPHE: the release's settings go to coord.DPHEOptions, and the task
	// asks for no DP-SGD (the release is the DP).
	d := ops.DefaultConfig()
	d.State, d.SecAgg, d.KeyGen, d.MinAvail, d.MinUpdate, d.NoiseMultiplier = "s.db", "dphe", "127.0.0.1:7444", 3, 3, 2
	o, err := d.Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Task.DP != nil || o.DPHE == nil || o.DPHE.Addr != d.KeyGen || o.DPHE.Name != "keygen" || o.DPHE.NoiseMultiplier != 2 || o.DPHE.Clip != d.Clip ||
		o.DPHE.SelectionDelta != d.Delta || o.DPHE.Count != 64 {
		t.Errorf("--secagg dphe: task DP %v, DPHE options %+v", o.Task.DP, o.DPHE)
	}
	// Without DP, the DP settings are not checked.
	c := ops.DefaultConfig()
	c.State, c.DP, c.Unit = "s.db", false, "photo"
	if _, err := c.Options(); err != nil {
		t.Errorf("--dp=false with an unused --privacy-unit: %v", err)
	}
}

// FuzzDecodeConfig: no input panics; a refused input leaves the
// configuration as it was; an accepted one survives a round trip.
func FuzzDecodeConfig(f *testing.F) {
	for _, name := range []string{"full.json", "partial.json", "unknown-key.json", "two-values.json", "bad-duration.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "config", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"deadline": "-1s", "rounds": -3, "fraction": 1e999}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := ops.DefaultConfig()
		if err := ops.DecodeConfig(bytes.NewReader(b), &c); err != nil {
			if !reflect.DeepEqual(c, ops.DefaultConfig()) {
				t.Fatal("a refused input changed the configuration")
			}
			return
		}
		_, _ = c.Options()
		enc, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var again ops.Config
		if err := ops.DecodeConfig(bytes.NewReader(enc), &again); err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("round trip changed %+v into %+v", c, again)
		}
	})
}
