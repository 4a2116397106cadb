package cli

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/sim"
	"github.com/veil-privacy/veil/fed/strategy"
)

// fedSimAsync is veil fed sim's flags of the asynchronous strategies.
type fedSimAsync struct {
	beta, thinP                  float64
	period, bufferSize, maxStale int
}

func (a *fedSimAsync) register(fl *pflag.FlagSet) {
	fl.Float64Var(&a.beta, "easgd-beta", 0.5, "--strategy easgd: the moving rate β in (0, 1]")
	fl.IntVar(&a.period, "easgd-period", 16, "--strategy easgd: the period λ, local steps between exchanges (run as whole local epochs)")
	fl.IntVar(&a.bufferSize, "fedbuff-size", 4, "--strategy fedbuff: K, the updates buffered before the model moves")
	fl.IntVar(&a.maxStale, "max-staleness", 16, "--strategy easgd or fedbuff: refuse an update based on a model more than this many versions old")
	fl.Float64Var(&a.thinP, "thin-p", 0, "--strategy easgd or fedbuff: serve dropout-thinned models with unit dropout p in [0, 1); each client trains the thinned head it is served")
}

// apply sets so's asynchronous strategy for --strategy easgd or fedbuff.
func (a *fedSimAsync) apply(so *sim.Options) error {
	if so.Strategy != coord.AsyncEASGD && so.Strategy != coord.AsyncFedBuff {
		return nil
	}
	switch {
	case so.Strategy == coord.AsyncEASGD && !(a.beta > 0 && a.beta <= 1):
		return fmt.Errorf("fed sim: --easgd-beta must be in (0, 1], got %g", a.beta)
	case so.Strategy == coord.AsyncEASGD && a.period < 1:
		return fmt.Errorf("fed sim: --easgd-period must be at least 1, got %d", a.period)
	case so.Strategy == coord.AsyncFedBuff && a.bufferSize < 1:
		return fmt.Errorf("fed sim: --fedbuff-size must be at least 1, got %d", a.bufferSize)
	case a.maxStale < 0:
		return fmt.Errorf("fed sim: --max-staleness must not be negative, got %d", a.maxStale)
	case !(a.thinP >= 0 && a.thinP < 1):
		return fmt.Errorf("fed sim: --thin-p must be in [0, 1), got %g", a.thinP)
	}
	so.Async = &coord.AsyncOptions{Strategy: so.Strategy, MaxStaleness: a.maxStale, Thin: strategy.ThinOptions{Drop: a.thinP}}
	if so.Strategy == coord.AsyncEASGD {
		so.Async.Beta, so.Async.Period = a.beta, a.period
	} else {
		so.Async.BufferSize, so.Async.ServerLR = a.bufferSize, so.ServerLR
	}
	return nil
}
