package coord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
)

// PrivacyLog is what a coordinator's state records about the privacy of
// its model: the model it started from, the rounds aggregated into it
// with and without DP, and every client's ledger. It is read from the
// state, not from the coordinator's flags, so a run restarted with other
// settings cannot change what earlier rounds did.
type PrivacyLog struct {
	// InitialVersion is the version of the model the state started from
	// (Options.Init when the state was new).
	InitialVersion string
	// DPRounds counts the done rounds whose task required DP-SGD (local
	// or distributed),
	// PlainRounds the done rounds whose task did not (their updates, in
	// the model, carry no privacy guarantee).
	DPRounds, PlainRounds int
	// Units are the privacy units the rounds with DP stated, done or not
	// (a failed round's accepted updates were charged too), sorted and
	// distinct; Deltas their δ, sorted and distinct.
	Units  []string
	Deltas []float64
	// Clients are the enrolled clients in id order, each with the events
	// its ledger was charged (accepted updates of DP rounds).
	Clients []ClientEvents
}

// ClientEvents is one client's ledger.
type ClientEvents struct {
	ID      string
	Updates int
	Events  []dp.Event
}

// InitialVersion returns the version of the model a coordinator state
// (opened by OpenStatus) started from.
func InitialVersion(ctx context.Context, db *sql.DB) (string, error) {
	var v string
	err := db.QueryRowContext(ctx, `SELECT version FROM models WHERE round = 0 ORDER BY created_ms LIMIT 1`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errors.New("coordinator privacy: the state holds no initial model")
	}
	if err != nil {
		return "", fmt.Errorf("coordinator privacy: %w", err)
	}
	return v, nil
}

// ReadPrivacy reads a coordinator state file's privacy log (the file
// opened by OpenStatus, also while the coordinator runs).
func ReadPrivacy(ctx context.Context, db *sql.DB) (*PrivacyLog, error) {
	v, err := InitialVersion(ctx, db)
	if err != nil {
		return nil, err
	}
	out := &PrivacyLog{InitialVersion: v}
	rows, err := db.QueryContext(ctx, `SELECT round, state, config FROM rounds ORDER BY round`)
	if err != nil {
		return nil, fmt.Errorf("coordinator privacy: %w", err)
	}
	units, deltas := map[string]bool{}, map[float64]bool{}
	for rows.Next() {
		var n uint64
		var state string
		var b []byte
		if err := rows.Scan(&n, &state, &b); err != nil {
			rows.Close()
			return nil, fmt.Errorf("coordinator privacy: %w", err)
		}
		cfg := &fedpb.RoundConfig{}
		if err := proto.Unmarshal(b, cfg); err != nil {
			rows.Close()
			return nil, fmt.Errorf("coordinator privacy: round %d's task: %w", n, err)
		}
		d, h := cfg.GetDp(), cfg.GetDphe()
		if d != nil {
			units[d.GetPrivacyUnit()], deltas[d.GetDelta()] = true, true
		}
		// A distributed DP-SGD round's DP is its plan (SecAggOptions.DDP).
		plan, distributed := secround.PlanOf(cfg.GetSecagg())
		if distributed {
			units[plan.Unit], deltas[plan.Delta] = true, true
		}
		if h != nil {
			// A DPHE release protects the client's whole update: each
			// person in it, at least.
			units["identity"], deltas[h.GetSelectionDelta()] = true, true
		}
		switch {
		case state != "done":
		case d != nil || distributed || h != nil:
			out.DPRounds++
		default:
			out.PlainRounds++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("coordinator privacy: %w", err)
	}
	if err := readAsyncPrivacy(ctx, db, out, units, deltas); err != nil {
		return nil, fmt.Errorf("coordinator privacy: %w", err)
	}
	for u := range units {
		out.Units = append(out.Units, u)
	}
	for d := range deltas {
		out.Deltas = append(out.Deltas, d)
	}
	slices.Sort(out.Units)
	slices.Sort(out.Deltas)
	crow, err := db.QueryContext(ctx, `SELECT id, updates, ledger FROM clients ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("coordinator privacy: %w", err)
	}
	defer crow.Close()
	for crow.Next() {
		var c ClientEvents
		var lb []byte
		if err := crow.Scan(&c.ID, &c.Updates, &lb); err != nil {
			return nil, fmt.Errorf("coordinator privacy: %w", err)
		}
		l, err := clientLedger(lb)
		if err != nil {
			return nil, err
		}
		if c.Events, err = l.Events(c.ID); err != nil {
			return nil, fmt.Errorf("coordinator privacy: %w", err)
		}
		out.Clients = append(out.Clients, c)
	}
	return out, crow.Err()
}
