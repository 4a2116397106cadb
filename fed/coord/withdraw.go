package coord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/big"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
)

// ReasonRevoked is the withdrawal reason recorded for a selected client
// whose certificate has been revoked.
const ReasonRevoked = "revoked"

// decline is a client's Decline, handed to the loop.
type decline struct {
	client, reason string
	round          uint64
	reply          chan error
}

// ValidReason reports whether reason may be given in a Decline: it names a
// setting, never anything private, so it is held to a small alphabet
// (lower-case letters, digits, spaces, ':', '_', '-') and 64 characters,
// which also keeps it safe to log.
func ValidReason(reason string) bool {
	if reason == "" || len(reason) > 64 {
		return false
	}
	for i, r := range reason {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case i > 0 && (r == ' ' || r == ':' || r == '_' || r == '-'):
		default:
			return false
		}
	}
	return true
}

// withdraw ends client's part in round n (it declined, or it was
// revoked): recorded in the state file, then waited for no more. Called
// by the loop only, so it never races a fold. A client already counted
// cannot withdraw; one that has withdrawn already keeps its first reason.
func (c *Coordinator) withdraw(ctx context.Context, n uint64, client, reason string) error {
	c.mu.Lock()
	r := c.round
	var selected, counted bool
	var already string
	if r != nil {
		selected, counted, already = r.selected[client], r.counted[client], r.withdrawn[client]
	}
	c.mu.Unlock()
	switch {
	case r == nil || r.n != n:
		return refuse("stale", "round %d is not open", n)
	case !selected:
		return refuse("not_selected", "client %q was not selected for round %d", client, n)
	case counted:
		return refuse("counted", "client %q has already been counted in round %d", client, n)
	case already != "":
		return nil
	}
	err := c.st.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE round_clients SET withdrawn = ? WHERE round = ? AND client = ? AND counted = 0`, reason, n, client)
		return err
	})
	if err != nil {
		return fmt.Errorf("coordinator: recording that client %q withdrew from round %d: %w", client, n, err)
	}
	c.mu.Lock()
	r.withdrawn[client] = reason
	c.mu.Unlock()
	c.log.Info("client withdrew from the round", "round", n, "client", client, "reason", reason)
	if wo, ok := c.o.Metrics.(WithdrawalObserver); ok {
		wo.ClientWithdrew(reason)
	}
	return nil
}

// waitingFor returns how many of r's selected clients have neither been
// counted nor withdrawn.
func (c *Coordinator) waitingFor(r *openRound) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id := range r.selected {
		if !r.counted[id] && r.withdrawn[id] == "" {
			n++
		}
	}
	return n
}

// dropRevoked withdraws from r every selected client still waited for
// whose certificates are all revoked.
func (c *Coordinator) dropRevoked(ctx context.Context, r *openRound) error {
	rev := c.rev.Load()
	if rev == nil {
		return nil
	}
	var waiting []string
	c.mu.Lock()
	for id := range r.selected {
		if !r.counted[id] && r.withdrawn[id] == "" {
			waiting = append(waiting, id)
		}
	}
	c.mu.Unlock()
	for _, id := range waiting {
		if !c.revoked(rev, id) {
			continue
		}
		if err := c.withdraw(ctx, r.n, id, ReasonRevoked); err != nil {
			var rf *refusal
			if errors.As(err, &rf) {
				continue
			}
			return err
		}
	}
	return nil
}

// revoked reports whether every certificate client was seen with is
// revoked. A list that cannot be read says nothing here: the service
// refuses every call meanwhile, and the round keeps waiting until the
// list is back or the deadline passes.
func (c *Coordinator) revoked(rev *pki.Revocations, client string) bool {
	c.serialsMu.Lock()
	var serials []*big.Int
	for _, s := range c.serials[client] {
		serials = append(serials, s)
	}
	c.serialsMu.Unlock()
	if len(serials) == 0 {
		return false
	}
	for _, s := range serials {
		if r, err := rev.IsRevoked(s); err != nil || !r {
			return false
		}
	}
	return true
}

// noteSerial records that client called with the certificate numbered
// serial.
func (c *Coordinator) noteSerial(client string, serial *big.Int) {
	c.serialsMu.Lock()
	defer c.serialsMu.Unlock()
	m := c.serials[client]
	if m == nil {
		m = map[string]*big.Int{}
		c.serials[client] = m
	}
	if k := serial.String(); m[k] == nil {
		m[k] = new(big.Int).Set(serial)
	}
}

// restoreSerials loads the serial number of the certificate each client
// last joined with.
func (c *Coordinator) restoreSerials() error {
	rows, err := c.st.db.Query(`SELECT id, serial FROM clients WHERE serial != ''`)
	if err != nil {
		return fmt.Errorf("coordinator: reading the clients' certificates: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, s string
		if err := rows.Scan(&id, &s); err != nil {
			return fmt.Errorf("coordinator: reading the clients' certificates: %w", err)
		}
		n, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return fmt.Errorf("coordinator: client %q has certificate serial number %q", id, s)
		}
		c.noteSerial(id, n)
		c.joinedWith[id] = s
	}
	return rows.Err()
}

// peerSerial returns the serial number of the caller's verified
// certificate (nil without mutual TLS).
func peerSerial(ctx context.Context) *big.Int {
	if leaf := peerLeaf(ctx); leaf != nil {
		return leaf.SerialNumber
	}
	return nil
}

// rememberSerial keeps the serial number of the certificate client joined
// with, in memory and in the state file.
func (c *Coordinator) rememberSerial(ctx context.Context, client string, serial *big.Int) error {
	if serial == nil {
		return nil
	}
	c.noteSerial(client, serial)
	k := serial.String()
	c.serialsMu.Lock()
	same := c.joinedWith[client] == k
	c.serialsMu.Unlock()
	if same {
		return nil
	}
	if _, err := c.st.db.ExecContext(ctx, `UPDATE clients SET serial = ? WHERE id = ?`, k, client); err != nil {
		return err
	}
	c.serialsMu.Lock()
	c.joinedWith[client] = k
	c.serialsMu.Unlock()
	return nil
}

// Decline ends the calling client's part in a round it was selected for:
// it refuses the round (its budget, its owner's policy) or withdraws. The
// reason, a setting's name, is logged and kept; the round waits for the
// client no more, and closes at once if no one else is waited for.
func (s *service) Decline(ctx context.Context, req *fedpb.DeclineRequest) (*fedpb.DeclineResponse, error) {
	id, err := s.who(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		return nil, err
	}
	if !ValidReason(req.GetReason()) {
		return nil, status.Error(codes.InvalidArgument, "a decline's reason must be 1 to 64 lower-case letters, digits, spaces, ':', '_' or '-', starting with a letter or digit")
	}
	if err := s.enrolled(ctx, id); err != nil {
		return nil, err
	}
	d := &decline{client: id, round: req.GetRound(), reason: req.GetReason(), reply: make(chan error, 1)}
	select {
	case s.c.declines <- d:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	select {
	case err = <-d.reply:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		var rf *refusal
		if errors.As(err, &rf) {
			return nil, status.Errorf(codes.FailedPrecondition, "%s: %s", rf.reason, rf.msg)
		}
		return nil, status.Error(codes.Internal, "recording the decline")
	}
	return &fedpb.DeclineResponse{ProtocolVersion: fedpb.ProtocolVersion}, nil
}
