package ops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
)

// MaxConfigBytes bounds a configuration file.
const MaxConfigBytes = 1 << 20

// Config is a coordinator's configuration: veil fed coordinator's flags,
// and the keys of its JSON configuration file, which are the flags' names
// (all but --config, --json and the logging flags; flags given on the
// command line override the file).
type Config struct {
	State         string `json:"state"`
	PKI           string `json:"pki"`
	Cert          string `json:"cert"`
	Key           string `json:"key"`
	CA            string `json:"ca"`
	CRL           string `json:"crl"`
	Listen        string `json:"listen"`
	MetricsListen string `json:"metrics-listen"`
	// MetricsTLS serves the metrics over mutual TLS to the operator's
	// certificate only, which lets MetricsListen be any address; without
	// it MetricsListen must be a loopback address.
	MetricsTLS bool `json:"metrics-tls"`
	// Init is a veil train checkpoint: the initial model.
	Init string `json:"init"`
	// Out is where the final model is written as a checkpoint.
	Out string `json:"out"`
	// EvalData is an LFW-layout folder whose development pairs score the
	// model after every aggregated round; CentreImages and CentreCount
	// are the public photos the distillation targets are centred on.
	EvalData     string `json:"eval-data"`
	CentreImages string `json:"centre-images"`
	CentreCount  int    `json:"centre-count"`
	// Name is the coordinator certificate's name in PKI.
	Name string `json:"name"`

	Strategy  string  `json:"strategy"`
	Weighting string  `json:"weighting"`
	ServerLR  float64 `json:"server-lr"`
	Momentum  float64 `json:"momentum"`
	Rounds    int     `json:"rounds"`
	Fraction  float64 `json:"fraction"`
	// MinAvail is the clients a round waits for (0: 3 under --secagg
	// masking, which needs rounds of at least 3 clients, else 2).
	MinAvail  int      `json:"min-available"`
	MinUpdate int      `json:"min-updates"`
	Deadline  Duration `json:"deadline"`
	Available Duration `json:"available"`
	Linger    Duration `json:"linger"`
	// AwaitFinalDownload lingers (at most Linger) until every client has
	// also downloaded the final model (a federation of libraries).
	AwaitFinalDownload bool `json:"await-final-download"`
	// StreamIdle ends an update stream that sends nothing for this long;
	// ReceiveBudgetMiB bounds the MiB held, over all streams, by updates
	// being received or waiting to be folded (coord.Options).
	StreamIdle       Duration `json:"stream-idle"`
	ReceiveBudgetMiB int      `json:"receive-budget-mib"`

	LocalEpochs     int     `json:"local-epochs"`
	LocalSteps      int     `json:"local-steps"`
	LR              float64 `json:"lr"`
	Batch           int     `json:"batch"`
	DP              bool    `json:"dp"`
	Clip            float64 `json:"clip"`
	Delta           float64 `json:"delta"`
	Unit            string  `json:"privacy-unit"`
	NoiseMultiplier float64 `json:"noise-multiplier"`
	MaxUpdateNorm   float64 `json:"max-update-norm"`

	// SecAgg is the rounds' secure aggregation: "masking" (SecAgg+
	// masking: the coordinator sees only the sum of at least
	// SecAggThreshold clients' quantised updates), "off" (each update in
	// plaintext) or "dphe"; "" is masking under DP with a strategy masking
	// serves (fedavg, fedsgd, fedbuff), else off (see secAggDefault).
	// SecAggMinHonest is T, SecAggDegree k and SecAggThreshold
	// t (0: the defaults of coord.SecAggOptions), SecAggPhase the
	// deadline of each key, share and unmasking phase (0: --deadline/6).
	SecAgg          string   `json:"secagg"`
	SecAggMinHonest int      `json:"secagg-min-honest"`
	SecAggDegree    int      `json:"secagg-degree"`
	SecAggThreshold int      `json:"secagg-threshold"`
	SecAggPhase     Duration `json:"secagg-phase"`

	// With SecAgg "dphe" (package fed/dphefed): KeyGen is the key
	// generator's host:port and KeyGenName its certificate name; each
	// client releases its update clipped to Clip with noise multiplier
	// NoiseMultiplier (> 0) and a DP selection of at most DPHECount
	// blocks at ε DPHESelectionEpsilon and δ Delta, threshold
	// DPHEThreshold on a block's norm.
	KeyGen               string  `json:"keygen"`
	KeyGenName           string  `json:"keygen-name"`
	DPHECount            int     `json:"dphe-count"`
	DPHESelectionEpsilon float64 `json:"dphe-selection-epsilon"`
	DPHEThreshold        float64 `json:"dphe-threshold"`

	// With Strategy "easgd" or "fedbuff" the coordinator serves
	// asynchronous exchanges (coord.AsyncOptions): EASGD's moving rate
	// β and period λ (its clients' local steps per exchange), FedBuff's
	// buffer size K, the largest staleness accepted, and the dropout rate
	// p of thinned models (0: whole models).
	EASGDBeta    float64 `json:"easgd-beta"`
	EASGDPeriod  int     `json:"easgd-period"`
	FedBuffSize  int     `json:"fedbuff-size"`
	MaxStaleness int     `json:"max-staleness"`
	ThinP        float64 `json:"thin-p"`

	// DDPConfig are the distributed DP-SGD settings (--ddp).
	DDPConfig
}

// Duration is a time.Duration written in JSON as Go's duration text
// ("90s", "2m30s").
type Duration time.Duration

// MarshalJSON writes d as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads Go's duration text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`a duration is text such as "90s" or "2m"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// DefaultConfig returns the defaults of veil fed coordinator.
func DefaultConfig() Config {
	return Config{
		Listen: "127.0.0.1:7443", Name: "coordinator", CentreCount: 512, Strategy: "fedavg", EASGDBeta: 0.5, EASGDPeriod: 16, FedBuffSize: 4, MaxStaleness: 16, Rounds: 10, Fraction: 1, MinUpdate: 2,
		Deadline: Duration(10 * time.Minute), Available: Duration(30 * time.Second), Linger: Duration(10 * time.Second),
		StreamIdle: Duration(coord.DefaultStreamIdle), ReceiveBudgetMiB: coord.DefaultReceiveBudget >> 20,
		LocalEpochs: 1, LR: 0.01, Batch: 32, DP: true, Clip: 1, Delta: 1e-5, Unit: "identity", MaxUpdateNorm: 100,
		SecAggMinHonest: 2, DDPConfig: DefaultDDPConfig(),
		KeyGenName: "keygen", DPHECount: 64, DPHESelectionEpsilon: 1, DPHEThreshold: 0.1,
	}
}

// DecodeConfig reads a JSON configuration file over c (keys it does not
// name keep c's values). It refuses unknown keys, a value of the wrong
// type, more than one JSON value and files over MaxConfigBytes.
func DecodeConfig(r io.Reader, c *Config) error {
	b, err := io.ReadAll(io.LimitReader(r, MaxConfigBytes+1))
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if len(b) > MaxConfigBytes {
		return fmt.Errorf("configuration: larger than %d bytes", MaxConfigBytes)
	}
	next := *c
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&next); err != nil {
		if k, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("configuration: unknown key %s (the keys are veil fed coordinator's flag names)", k)
		}
		return fmt.Errorf("configuration: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("configuration: more than one JSON value")
	}
	*c = next
	return nil
}

// Options returns the coordinator's options (without the initial model,
// logger and metrics) after checking the configuration.
func (c *Config) Options() (coord.Options, error) {
	if c.State == "" {
		return coord.Options{}, errors.New("a state file is required (--state)")
	}
	for name, v := range map[string]float64{"server-lr": c.ServerLR, "momentum": c.Momentum, "fraction": c.Fraction, "lr": c.LR,
		"clip": c.Clip, "delta": c.Delta, "noise-multiplier": c.NoiseMultiplier, "max-update-norm": c.MaxUpdateNorm,
		"easgd-beta": c.EASGDBeta, "thin-p": c.ThinP} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return coord.Options{}, fmt.Errorf("--%s must be a finite number, got %g", name, v)
		}
	}
	if c.Deadline <= 0 || c.Available <= 0 || c.Linger < 0 {
		return coord.Options{}, errors.New("--deadline and --available must be positive and --linger not negative")
	}
	if c.StreamIdle <= 0 {
		return coord.Options{}, fmt.Errorf("--stream-idle must be positive, got %s", time.Duration(c.StreamIdle))
	}
	if c.ReceiveBudgetMiB < 1 || c.ReceiveBudgetMiB > 1<<20 {
		return coord.Options{}, fmt.Errorf("--receive-budget-mib must be in 1…%d, got %d", 1<<20, c.ReceiveBudgetMiB)
	}
	if err := c.check(); err != nil {
		return coord.Options{}, err
	}
	if err := checkAddress("listen", c.Listen, false); err != nil {
		return coord.Options{}, err
	}
	if err := checkAddress("metrics-listen", c.MetricsListen, true); err != nil {
		return coord.Options{}, err
	}
	if c.MetricsListen != "" && !c.MetricsTLS && !LoopbackAddress(c.MetricsListen) {
		return coord.Options{}, fmt.Errorf("--metrics-listen %q is not a loopback address: the metrics name every client and the ε it has spent, "+
			"so plain HTTP serves them on this machine only (e.g. 127.0.0.1:9464 or [::1]:9464); "+
			"add --metrics-tls to serve them to the operator's certificate over mutual TLS", c.MetricsListen)
	}
	o := coord.Options{
		StatePath: c.State,
		Strategy:  strategy.Options{Name: c.Strategy, Weighting: c.Weighting, DP: c.DP, ServerLR: c.ServerLR, Momentum: c.Momentum},
		Rounds:    c.Rounds, Fraction: c.Fraction, MinAvailable: c.MinAvail, MinUpdates: c.MinUpdate,
		RoundTimeout: time.Duration(c.Deadline), Available: time.Duration(c.Available), MaxUpdateNorm: c.MaxUpdateNorm,
		StreamIdle: time.Duration(c.StreamIdle), ReceiveBudget: int64(c.ReceiveBudgetMiB) << 20,
		Task: coord.Task{LocalEpochs: c.LocalEpochs, LocalSteps: c.LocalSteps, LearningRate: c.LR, Batch: c.Batch},
	}
	if c.DP && c.SecAgg != "dphe" && !c.DDP {
		o.Task.DP = &fedpb.DPParams{Clip: c.Clip, Delta: c.Delta, PrivacyUnit: c.Unit, NoiseMultiplier: c.NoiseMultiplier}
	}
	var err error
	if o.Async, err = c.asyncOptions(); err != nil {
		return coord.Options{}, err
	}
	if o.Async != nil {
		o.Strategy = strategy.Options{Name: "fedavg", DP: c.DP}
	}
	if _, err := strategy.New(o.Strategy); err != nil {
		return coord.Options{}, err
	}
	if c.SecAgg == "masking" {
		// The clients' authority (Roots) is the caller's to set: it
		// loads the coordinator's identity.
		o.SecAgg = &coord.SecAggOptions{Mode: c.SecAgg, MinHonest: c.SecAggMinHonest, Degree: c.SecAggDegree, Threshold: c.SecAggThreshold,
			PhaseTimeout: time.Duration(c.SecAggPhase)}
	}
	if c.SecAgg == "dphe" {
		// The key generator's connection (KeyGen) is the caller's to
		// make: it loads the coordinator's identity.
		o.DPHE = &coord.DPHEOptions{Addr: c.KeyGen, Name: c.KeyGenName, Count: c.DPHECount, Clip: c.Clip, NoiseMultiplier: c.NoiseMultiplier,
			SelectionEpsilon: c.DPHESelectionEpsilon, SelectionDelta: c.Delta, SelectionThreshold: c.DPHEThreshold}
	}
	return o, nil
}

// check validates the settings in the words of the flags (and so of the
// configuration file's keys), before package coord's own validation.
func (c *Config) check() error {
	c.secAggDefault()
	if err := c.checkDDP(); err != nil {
		return err
	}
	switch {
	case c.Strategy != "fedavg" && c.Strategy != "fedsgd" && !c.asyncStrategy():
		return fmt.Errorf("--strategy %q: want fedavg, fedsgd, easgd or fedbuff", c.Strategy)
	case c.Weighting != "" && c.Weighting != "uniform" && c.Weighting != "examples":
		return fmt.Errorf("--weighting %q: want uniform or examples", c.Weighting)
	case c.ServerLR < 0:
		return fmt.Errorf("--server-lr must not be negative, got %g (0: the default)", c.ServerLR)
	case c.Strategy == "fedsgd" && !(c.ServerLR > 0):
		return errors.New("--strategy fedsgd needs --server-lr > 0 (the coordinator applies the optimiser step)")
	case c.Strategy == "fedavg" && c.Momentum != 0:
		return errors.New("--momentum is for --strategy fedsgd")
	case !(c.Momentum >= 0 && c.Momentum < 1):
		return fmt.Errorf("--momentum must be in [0, 1), got %g", c.Momentum)
	case c.Rounds < 1:
		return fmt.Errorf("--rounds must be at least 1, got %d", c.Rounds)
	case !(c.Fraction > 0 && c.Fraction <= 1):
		return fmt.Errorf("--fraction must be in (0, 1], got %g", c.Fraction)
	case c.MinUpdate < 1:
		return fmt.Errorf("--min-updates must be at least 1, got %d", c.MinUpdate)
	case c.MinAvail < c.MinUpdate:
		return fmt.Errorf("--min-available (%d) must be at least --min-updates (%d): a round cannot count more clients than it starts with",
			c.MinAvail, c.MinUpdate)
	case c.LocalEpochs < 0 || c.LocalSteps < 0 || c.LocalEpochs == 0 && c.LocalSteps == 0:
		return errors.New("--local-epochs or --local-steps must be at least 1")
	case !(c.LR > 0):
		return fmt.Errorf("--lr must be positive, got %g", c.LR)
	case c.Batch < 1:
		return fmt.Errorf("--batch must be at least 1, got %d", c.Batch)
	case !(c.MaxUpdateNorm > 0):
		return fmt.Errorf("--max-update-norm must be positive, got %g", c.MaxUpdateNorm)
	case c.SecAgg != "masking" && c.SecAgg != "dphe" && c.SecAgg != "off":
		return fmt.Errorf("--secagg %q: want masking, dphe or off", c.SecAgg)
	case c.SecAgg == "dphe" && c.KeyGen == "":
		return errors.New("--secagg dphe needs --keygen, the key generator's address")
	case c.SecAgg == "dphe" && (c.MinAvail < 3 || c.MinUpdate < 3):
		return fmt.Errorf("--secagg dphe decrypts only sums of at least 3 clients: --min-available is %d, --min-updates %d", c.MinAvail, c.MinUpdate)
	case c.SecAgg == "dphe" && (!c.DP || !(c.NoiseMultiplier > 0)):
		return errors.New("--secagg dphe needs DP and --noise-multiplier > 0 (each client's release of its update)")
	case c.SecAgg == "dphe" && (c.DPHECount < 1 || !(c.DPHESelectionEpsilon > 0) || !(c.DPHEThreshold >= 0)):
		return fmt.Errorf("--secagg dphe needs --dphe-count ≥ 1, --dphe-selection-epsilon > 0 and --dphe-threshold ≥ 0, got %d, %g and %g", c.DPHECount, c.DPHESelectionEpsilon, c.DPHEThreshold)
	case c.SecAgg == "masking" && !c.asyncStrategy() && c.MinAvail < 3:
		return fmt.Errorf("--secagg masking needs rounds of at least 3 clients: --min-available is %d; pass --min-available 3 or more%s", c.MinAvail, secAggOffHint)
	case c.SecAgg == "masking" && !(c.SecAggMinHonest >= 2 && (c.asyncStrategy() || c.SecAggMinHonest <= c.MinUpdate)):
		return fmt.Errorf("--secagg-min-honest must be in [2, --min-updates = %d], got %d", c.MinUpdate, c.SecAggMinHonest)
	case c.SecAggDegree < 0 || c.SecAggThreshold < 0 || c.SecAggPhase < 0:
		return errors.New("--secagg-degree, --secagg-threshold and --secagg-phase must not be negative")
	}
	if !c.DP {
		return nil
	}
	switch {
	case !(c.Clip > 0):
		return fmt.Errorf("--clip must be positive, got %g", c.Clip)
	case !(c.Delta > 0 && c.Delta < 1):
		return fmt.Errorf("--delta must be in (0, 1), got %g", c.Delta)
	case c.NoiseMultiplier < 0:
		return fmt.Errorf("--noise-multiplier must not be negative, got %g", c.NoiseMultiplier)
	case c.Unit != "identity" && c.Unit != "example":
		return fmt.Errorf("--privacy-unit %q: want identity (all of a person's images) or example (one image)", c.Unit)
	}
	return nil
}

// LoopbackAddress reports whether addr (HOST:PORT) names a loopback
// address: localhost or an IP address in 127.0.0.0/8 or ::1. An empty
// host (every interface) or any other name is not one.
func LoopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkAddress checks that the address of --flag is HOST:PORT with a port
// in 0…65535 (empty allowed if optional), so a typo is refused in the
// flag's words before anything is opened.
func checkAddress(flag, addr string, optional bool) error {
	if addr == "" && optional {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		var p uint64
		if p, err = strconv.ParseUint(port, 10, 16); err == nil && p > 65535 {
			err = errors.New("port out of range")
		}
	}
	if err != nil {
		return fmt.Errorf("--%s %q: want HOST:PORT, e.g. 127.0.0.1:7443 (0.0.0.0:7443 for all interfaces)", flag, addr)
	}
	return nil
}
