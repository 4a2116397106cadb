package coord

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// Distributed DP-SGD rounds (SecAggOptions.DDP). Each round is one step
// of central DP-SGD over the federation's units: the clients' clipped
// gradient sums with their noise shares, masked, summed, unmasked and
// decoded here, then stepped by the server's optimiser (DDPServer). Two
// things of such a round are the coordinator's to keep:
//
//   - the optimiser's state (moments, moving average, step count), stored
//     with the next model in the transaction that closes the round (meta
//     keys ddp_state and ddp_state_version) and given back to the server
//     when the coordinator starts, so that a restart, even after SIGKILL,
//     takes exactly the steps an uninterrupted run would;
//   - its copy of each client's ledger, charged with exactly what the
//     client's own ledger is charged for the round (the plan's mechanism at
//     the round's T, one round, per the plan's unit) in the transaction
//     that stores the client's masked vector: a vector whose charge would
//     take the client past its budget in the coordinator's copy is refused
//     (reason "budget") and never enters the sum, as in plaintext rounds.
//     The charge is made when the vector is stored, not when the round
//     closes, because a refusal at the close could not take a vector back
//     out of an unmasked sum; the client's own ledger is charged before it
//     sends (fed/client), so the two match for every client whose vector
//     was accepted.

// DDPServer is the server's optimiser of distributed DP-SGD rounds
// (fed/ddpserver.Server).
type DDPServer interface {
	// Step takes central DP-SGD's optimiser step from model with the
	// released noisy gradient sum (ddp.Round.Decode of the unmasked sum,
	// in the model's tensor order) divided by expectedBatch, recording
	// mechanism (what was released, with its trust assumption) in the
	// weights' privacy record; it returns the next model and the
	// optimiser's state after the step, which the coordinator stores with
	// the next model.
	Step(model wire.Weights, released []float32, expectedBatch float64, mechanism string) (next wire.Weights, state []byte, err error)
	// Restore sets the server to model with the state a Step returned
	// (nil: a fresh optimiser at model). The coordinator calls it when it
	// starts, with the state stored for its current model.
	Restore(model wire.Weights, state []byte) error
}

// Meta keys of the server optimiser's state and the model it belongs to.
const (
	metaDDPState        = "ddp_state"
	metaDDPStateVersion = "ddp_state_version"
)

// ddpOptions are the distributed DP-SGD options (nil: none).
func (c *Coordinator) ddpOptions() *DDPOptions {
	if c.o.SecAgg == nil {
		return nil
	}
	return c.o.SecAgg.DDP
}

// ddpStep is a distributed DP-SGD round's server step: central DP-SGD's
// optimiser step with the released sum (sum.Values, decoded from the
// unmasked sum), named by the mechanism at the coordinator's T; the
// strategy's state is kept as it was. It returns the next model, the
// strategy's state and the optimiser's state to store.
func (c *Coordinator) ddpStep(d *DDPOptions, sum *strategy.Sum) (wire.Weights, wire.Weights, []byte, error) {
	mech := d.Plan.Mechanism(c.o.SecAgg.MinHonest).Label()
	released := make([]float32, len(sum.Values))
	for i, v := range sum.Values {
		released[i] = float32(v)
	}
	next, state, err := d.Server.Step(c.model.Clone(), released, d.Plan.ExpectedBatch, mech)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("distributed DP-SGD step: %w", err)
	}
	if err := c.model.SameLayout(next); err != nil {
		return nil, nil, nil, fmt.Errorf("distributed DP-SGD step: %w", err)
	}
	if state == nil {
		return nil, nil, nil, errors.New("distributed DP-SGD step: the server returned no optimiser state to store")
	}
	return next, c.stratSt, state, nil
}

// putDDPState stores the optimiser's state of model version in tx (the
// round's close).
func putDDPState(tx *sql.Tx, version string, state []byte) error {
	if err := setMeta(tx, metaDDPState, state); err != nil {
		return err
	}
	return setMeta(tx, metaDDPStateVersion, []byte(version))
}

// restoreDDP gives the server the optimiser state stored with the
// current model (none yet: a fresh optimiser at it).
func (c *Coordinator) restoreDDP() error {
	d := c.ddpOptions()
	if d == nil {
		return nil
	}
	v, err := getMeta(c.st.db, metaDDPStateVersion)
	if err != nil {
		return fmt.Errorf("coordinator: reading the distributed DP-SGD optimiser state: %w", err)
	}
	var state []byte
	if v != nil {
		if string(v) != c.version {
			return fmt.Errorf("coordinator: the state file's distributed DP-SGD optimiser state belongs to model %s, not to the current model %s "+
				"(rounds of another kind closed since): continue with the settings the current model was made with", short(string(v)), short(c.version))
		}
		if state, err = getMeta(c.st.db, metaDDPState); err != nil || state == nil {
			return fmt.Errorf("coordinator: reading the distributed DP-SGD optimiser state: %v", errors.Join(err, errors.New("missing")))
		}
	}
	if err := d.Server.Restore(c.model.Clone(), state); err != nil {
		return fmt.Errorf("coordinator: restoring the distributed DP-SGD optimiser: %w", err)
	}
	return nil
}

// ddpEvent is the charge of one distributed DP-SGD round of cfg to a
// client's ledger: the round's plan's mechanism at the round's T (what
// the client's own ledger is charged, with its T the same), one round.
// ok is false for a round that is not distributed DP-SGD.
func (c *Coordinator) ddpEvent(cfg *fedpb.RoundConfig) (ev dp.Event, ok bool, err error) {
	sa := cfg.GetSecagg()
	plan, ok := secround.PlanOf(sa)
	if !ok {
		return dp.Event{}, false, nil
	}
	T := int(sa.GetMinHonest())
	if d := c.ddpOptions(); d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.event != nil && d.eventPlan == plan && d.eventT == T {
			return *d.event, true, nil
		}
	}
	ev, err = plan.Mechanism(T).Event(1)
	if err != nil {
		return dp.Event{}, true, err
	}
	if d := c.ddpOptions(); d != nil {
		d.event, d.eventPlan, d.eventT = &ev, plan, T
	}
	return ev, true, nil
}
