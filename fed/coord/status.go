package coord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// ReadStatus reads the coordinator's state from its database: the current
// round and model, every client with its budget, spent ε and accepted
// updates, the round log, and the last evaluation of the model if one was
// recorded (RecordEvaluation).
func ReadStatus(ctx context.Context, db *sql.DB) (*fedpb.StatusResponse, error) {
	out := &fedpb.StatusResponse{ProtocolVersion: fedpb.ProtocolVersion}
	v, err := getMeta(db, "model")
	if err != nil {
		return nil, fmt.Errorf("coordinator status: %w", err)
	}
	out.ModelVersion = string(v)
	if b, err := getMeta(db, "evaluation"); err != nil {
		return nil, fmt.Errorf("coordinator status: %w", err)
	} else if b != nil {
		ev := &fedpb.Evaluation{}
		if err := proto.Unmarshal(b, ev); err != nil {
			return nil, fmt.Errorf("coordinator status: the stored evaluation: %w", err)
		}
		out.LastEvaluation = ev
	}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(round), 0) FROM rounds`).Scan(&out.Round); err != nil {
		return nil, fmt.Errorf("coordinator status: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT id, budget_epsilon, updates, ledger FROM clients ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("coordinator status: %w", err)
	}
	for rows.Next() {
		cs := &fedpb.ClientStatus{}
		var lb []byte
		if err := rows.Scan(&cs.Id, &cs.Budget, &cs.Updates, &lb); err != nil {
			rows.Close()
			return nil, fmt.Errorf("coordinator status: %w", err)
		}
		l, err := clientLedger(lb)
		if err != nil {
			rows.Close()
			return nil, err
		}
		s, err := l.Spent(cs.Id)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("coordinator status: %w", err)
		}
		cs.Epsilon = s.Epsilon
		out.Clients = append(out.Clients, cs)
	}
	rows.Close()
	rows, err = db.QueryContext(ctx, `SELECT round, state, updates, model_version FROM rounds ORDER BY round`)
	if err != nil {
		return nil, fmt.Errorf("coordinator status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		rs := &fedpb.RoundStatus{}
		if err := rows.Scan(&rs.Round, &rs.State, &rs.Updates, &rs.ModelVersion); err != nil {
			return nil, fmt.Errorf("coordinator status: %w", err)
		}
		out.Rounds = append(out.Rounds, rs)
	}
	return out, rows.Err()
}

// OpenStatus opens a coordinator's state file read-only for ReadStatus
// (the coordinator may be running: SQLite's WAL lets readers in).
func OpenStatus(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("coordinator status: opening %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("coordinator status: opening %s: %w", path, err)
	}
	return db, nil
}

// RecordEvaluation keeps ev as the latest evaluation of the coordinator's
// model (replacing the previous one); ReadStatus, and so veil fed status
// locally and over the network, report it. Only the score is kept, never
// anything about the pairs' faces.
func (c *Coordinator) RecordEvaluation(ctx context.Context, ev *fedpb.Evaluation) error {
	if ev == nil || ev.GetModelVersion() == "" {
		return errors.New("coordinator: an evaluation names the model version it scored")
	}
	b, err := proto.Marshal(ev)
	if err != nil {
		return err
	}
	if err := c.st.tx(ctx, func(tx *sql.Tx) error { return setMeta(tx, "evaluation", b) }); err != nil {
		return fmt.Errorf("coordinator: recording the evaluation: %w", err)
	}
	return nil
}

// ClientIDs returns the enrolled clients' ids from a state file opened by
// OpenStatus: what ReadStatus reports about clients, without decoding
// their ledgers (which replays every charge).
func ClientIDs(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM clients ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("coordinator status: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("coordinator status: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
