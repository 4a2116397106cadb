package ops

import (
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/strategy"
)

// asyncStrategy reports whether the strategy is an asynchronous one.
func (c *Config) asyncStrategy() bool {
	return c.Strategy == coord.AsyncEASGD || c.Strategy == coord.AsyncFedBuff
}

// asyncOptions returns the asynchronous strategy's options (nil for a
// synchronous one), checked in the words of the flags.
func (c *Config) asyncOptions() (*coord.AsyncOptions, error) {
	if !c.asyncStrategy() {
		if c.ThinP != 0 {
			return nil, fmt.Errorf("--thin-p is for --strategy easgd or fedbuff, not %s", c.Strategy)
		}
		return nil, nil
	}
	switch {
	case c.SecAgg == "dphe":
		return nil, fmt.Errorf("--strategy %s with --secagg dphe is not supported yet; run --strategy fedbuff with --secagg masking, or --secagg off", c.Strategy)
	case c.SecAgg == "masking" && c.Strategy == coord.AsyncEASGD:
		return nil, errors.New("--strategy easgd cannot run with --secagg masking: each elastic exchange moves the centre by β(x − x̃) with one client's own parameters x, so the coordinator must see every client's x in plaintext; use --strategy fedbuff with --secagg masking, or --secagg off")
	case c.SecAgg == "masking" && c.FedBuffSize < 3:
		return nil, fmt.Errorf("--secagg masking aggregates each FedBuff buffer as one masking round of --fedbuff-size clients, which must be at least 3 (and at least the threshold t): got %d%s",
			c.FedBuffSize, secAggOffHint)
	case c.SecAgg == "masking" && c.ThinP != 0:
		return nil, fmt.Errorf("--thin-p is not supported with --secagg masking: each client would be served a different sub-model, which a buffer's masked sum cannot merge%s", secAggOffHint)
	case c.Momentum != 0:
		return nil, fmt.Errorf("--momentum is for --strategy fedsgd, not %s", c.Strategy)
	case c.MaxStaleness < 0:
		return nil, fmt.Errorf("--max-staleness must not be negative, got %d", c.MaxStaleness)
	case !(c.ThinP >= 0 && c.ThinP < 1):
		return nil, fmt.Errorf("--thin-p must be in [0, 1), got %g", c.ThinP)
	case c.Strategy == coord.AsyncEASGD && !(c.EASGDBeta > 0 && c.EASGDBeta <= 1):
		return nil, fmt.Errorf("--easgd-beta must be in (0, 1], got %g", c.EASGDBeta)
	case c.Strategy == coord.AsyncEASGD && c.EASGDPeriod < 1:
		return nil, fmt.Errorf("--easgd-period must be at least 1, got %d", c.EASGDPeriod)
	case c.Strategy == coord.AsyncFedBuff && c.FedBuffSize < 1:
		return nil, fmt.Errorf("--fedbuff-size must be at least 1, got %d", c.FedBuffSize)
	}
	a := &coord.AsyncOptions{Strategy: c.Strategy, MaxStaleness: c.MaxStaleness, Thin: strategy.ThinOptions{Drop: c.ThinP}}
	if c.Strategy == coord.AsyncEASGD {
		a.Beta, a.Period = c.EASGDBeta, c.EASGDPeriod
	} else {
		a.BufferSize, a.ServerLR = c.FedBuffSize, c.ServerLR
	}
	return a, nil
}
