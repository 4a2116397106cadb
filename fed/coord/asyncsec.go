package coord

// FedBuff under masking secure aggregation. The coordinator never sees an
// individual update, so it cannot fold one exchange at a time: it gathers
// the clients that ask for an exchange into a buffer of K clients
// (AsyncOptions.BufferSize, at least the masking threshold t and at least
// 3) and runs the buffer as one masking round (masking.go) among those K
// clients: the round's signed configuration (secround.ConfigDigest) names
// the strategy fedbuff, the model version the buffer was served, its
// roster and its threshold. Dropouts follow the masking protocol: a client
// that drops after sending its masked vector is recovered, one that drops
// before is excluded, and with fewer than t survivors nothing is unmasked
// and the buffer is abandoned (the round fails; the model stays).
//
// Staleness. FedBuff weighs each update by (1 + s)^−a, s its staleness;
// under masking the coordinator sees only the buffer's sum, so it cannot
// weigh the clients of a buffer differently. The rule here: buffers run
// one after another, every client of a buffer is served the same, current
// version, and the model moves only when the buffer closes, so every
// update's staleness is 0 and its weight (1 + 0)^−a = 1; the model moves
// by η/m times the unmasked sum, m the buffer's survivors (FedBuff's η/K
// with K the updates in the buffer). The price is that buffers do not
// overlap: within a buffer each client trains at its own pace until the
// masked vectors' deadline, but the next buffer is formed only once this
// one is closed. (Overlapping buffers would give a whole buffer one
// staleness, applied to its sum; not done.) Options.Rounds counts buffers,
// as it counts plaintext FedBuff's full buffers.
//
// EASGD stays refused under secure aggregation: each elastic exchange
// moves the centre by β(x − x̃) with x one client's own parameters, so the
// coordinator must see x (equivalently Δ = x − x̃_b) of every client in
// plaintext; there is no sum over clients to hide them in.

import (
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/fed/strategy"
)

// secureBuffers reports whether the coordinator runs FedBuff's buffers
// as masking rounds (AsyncOptions with SecAgg).
func (o *Options) secureBuffers() bool {
	return o.Async != nil && o.SecAgg != nil
}

// asyncExchanges reports whether the coordinator serves asynchronous
// exchanges one at a time (AsyncOptions without secure aggregation).
func (o *Options) asyncExchanges() bool {
	return o.Async != nil && o.SecAgg == nil
}

// validateSecure checks an asynchronous strategy under secure aggregation
// (after validate checked and defaulted its own options) and, for FedBuff
// under masking, sets the round settings that make each
// buffer a masking round of K clients.
func (a *AsyncOptions) validateSecure(o *Options) error {
	switch {
	case o.DPHE != nil:
		return fmt.Errorf("coordinator: the asynchronous strategy %s under DPHE secure aggregation is not supported yet; run it with --secagg masking (FedBuff) or without secure aggregation", a.Strategy)
	case a.Strategy == AsyncEASGD:
		return errors.New("coordinator: EASGD cannot run under secure aggregation: each elastic exchange moves the centre by β(x − x̃) with x one client's own parameters, so the coordinator must see every client's x in plaintext (there is no sum over clients to hide it in); use --strategy fedbuff with --secagg masking, or EASGD without --secagg")
	case o.SecAgg.DDP != nil:
		return errors.New("coordinator: distributed DP-SGD rounds are synchronous steps of one optimiser, not FedBuff's buffers of local updates: run them without an asynchronous strategy")
	case a.Thin.Drop > 0 || len(a.Thin.Layers) > 0:
		return errors.New("coordinator: thinned models are not supported under secure aggregation (each client is served a different sub-model, which the buffer's masked sum cannot merge); set the thinning rate to 0")
	}
	s := o.SecAgg
	k := a.BufferSize
	if k < 3 {
		return fmt.Errorf("coordinator: FedBuff under masking aggregates each buffer as one masking round, which needs at least 3 clients; the buffer size K is %d", k)
	}
	_, t := s.graph(k)
	if k < t {
		return fmt.Errorf("coordinator: FedBuff under masking needs a buffer of at least the secure threshold t = %d clients; the buffer size K is %d", t, k)
	}
	if s.MinHonest < 2 || s.MinHonest > t {
		return fmt.Errorf("coordinator: the minimum honest clients T = %d must be in [2, the buffer's threshold t = %d]", s.MinHonest, t)
	}
	// Each buffer is a round of exactly K clients (roundSize), closed
	// with at least t survivors, averaged uniformly and moved by η.
	o.Strategy = strategy.Options{Name: "fedavg", Weighting: "uniform", DP: o.Task.DP != nil, ServerLR: a.ServerLR}
	o.Fraction, o.MinAvailable, o.MinUpdates = 1, k, t
	return nil
}

// roundSize is the number of clients a round selects out of avail
// available, k by the fraction: a secure FedBuff buffer's K.
func (c *Coordinator) roundSize(k, avail int) int {
	if c.o.secureBuffers() {
		return min(c.o.Async.BufferSize, avail)
	}
	return k
}

// roundStrategy is the strategy a round's configuration names: fedbuff
// for a secure buffer (the clients train as FedBuff asks), else the
// synchronous strategy's.
func (c *Coordinator) roundStrategy() string {
	if c.o.secureBuffers() {
		return c.o.Async.Strategy
	}
	return c.strat.Name()
}
