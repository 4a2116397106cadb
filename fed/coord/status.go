package coord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/big"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// ReadStatus reads the coordinator's state from its database: the current
// round and model, every client with its budget, spent ε and accepted
// updates, the round log with the clients that withdrew from each round
// (declined or revoked) and their reasons, and the last evaluation of the model if one was
// recorded (RecordEvaluation). It is the operator's view.
func ReadStatus(ctx context.Context, db *sql.DB) (*fedpb.StatusResponse, error) {
	return readStatus(ctx, db, nil)
}

// ReadClientStatus is ReadStatus as one client may see it: its own record
// (none if it has not joined), its own withdrawals, and nothing of any
// other client.
func ReadClientStatus(ctx context.Context, db *sql.DB, client string) (*fedpb.StatusResponse, error) {
	return readStatus(ctx, db, &client)
}

// readStatus reads the status with every client's record, or only the
// record of *only if only is not nil.
func readStatus(ctx context.Context, db *sql.DB, only *string) (*fedpb.StatusResponse, error) {
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
	q, args := `SELECT id, budget_epsilon, updates, ledger FROM clients ORDER BY id`, []any(nil)
	if only != nil {
		q, args = `SELECT id, budget_epsilon, updates, ledger FROM clients WHERE id = ?`, []any{*only}
	}
	rows, err := db.QueryContext(ctx, q, args...)
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
	byRound := map[uint64]*fedpb.RoundStatus{}
	for rows.Next() {
		rs := &fedpb.RoundStatus{}
		if err := rows.Scan(&rs.Round, &rs.State, &rs.Updates, &rs.ModelVersion); err != nil {
			return nil, fmt.Errorf("coordinator status: %w", err)
		}
		out.Rounds = append(out.Rounds, rs)
		byRound[rs.Round] = rs
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("coordinator status: %w", err)
	}
	if err := readWithdrawals(ctx, db, only, byRound); err != nil {
		return nil, err
	}
	return out, nil
}

// readWithdrawals adds to each round of byRound the clients that withdrew
// from it with their reasons (only *only's if only is not nil), in the
// order of the clients' ids.
func readWithdrawals(ctx context.Context, db *sql.DB, only *string, byRound map[uint64]*fedpb.RoundStatus) error {
	q, args := `SELECT round, client, withdrawn FROM round_clients WHERE withdrawn != '' ORDER BY round, client`, []any(nil)
	if only != nil {
		q, args = `SELECT round, client, withdrawn FROM round_clients WHERE withdrawn != '' AND client = ? ORDER BY round`, []any{*only}
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("coordinator status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n uint64
		w := &fedpb.Withdrawal{}
		if err := rows.Scan(&n, &w.Client, &w.Reason); err != nil {
			return fmt.Errorf("coordinator status: %w", err)
		}
		if rs := byRound[n]; rs != nil {
			rs.Withdrawals = append(rs.Withdrawals, w)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("coordinator status: %w", err)
	}
	return nil
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

// crlNumberKey is the meta key of the newest revocation list's number.
const crlNumberKey = "crl_number"

// HighestCRLNumber returns the number of the newest revocation list the
// coordinator has accepted (nil if none); with AcceptCRLNumber it is the
// pki.CRLNumbers of the coordinator's pki.Revocations, kept in its state
// file so that an older list is refused also after a restart.
func (c *Coordinator) HighestCRLNumber() (*big.Int, error) {
	b, err := getMeta(c.st.db, crlNumberKey)
	if err != nil || b == nil {
		return nil, err
	}
	n, ok := new(big.Int).SetString(string(b), 10)
	if !ok {
		return nil, fmt.Errorf("coordinator: the stored revocation list number %q is not a number", b)
	}
	return n, nil
}

// AcceptCRLNumber keeps n as the newest revocation list's number, unless
// a higher one is kept already (the number only grows).
func (c *Coordinator) AcceptCRLNumber(n *big.Int) error {
	if n == nil || n.Sign() < 0 {
		return errors.New("coordinator: a revocation list number is a non-negative integer")
	}
	err := c.st.tx(context.Background(), func(tx *sql.Tx) error {
		b, err := getMeta(tx, crlNumberKey)
		if err != nil {
			return err
		}
		if b != nil {
			if old, ok := new(big.Int).SetString(string(b), 10); ok && old.Cmp(n) >= 0 {
				return nil
			}
		}
		return setMeta(tx, crlNumberKey, []byte(n.String()))
	})
	if err != nil {
		return fmt.Errorf("coordinator: keeping the revocation list number: %w", err)
	}
	return nil
}
