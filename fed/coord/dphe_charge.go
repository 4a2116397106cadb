package coord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/secagg/dphe"
)

// A DPHE round charges the coordinator's copy of each client's ledger (the
// clients table's ledger, what plaintext rounds charge when they accept an
// update) with exactly what the client charged its own: the events of the
// round's release (dphe.ContributionEvents of the Privacy the client
// builds from the round's settings: its clip, noise multiplier and
// selection, on the model's coordinates in blocks of the round's lanes).
// A contribution that would take the copy past the client's budget is
// refused before it enters the aggregator; the charges are stored in the
// transaction that closes the round, for the clients whose contributions
// the decrypted sum holds, so that a round either closes with its
// clients charged or not at all. A round whose sum was never decrypted
// released nothing of anyone and charges nothing.

// dpheEvents returns the events a client's contribution to d charged its
// own ledger, checked against l, the coordinator's copy for client.
func (d *dpheRound) dpheEvents(l *dp.Ledger, client string) ([]dp.Event, error) {
	cfg := d.cfg
	lanes := 1
	if p := d.r.Packing; p != nil {
		lanes = p.Lanes
	}
	p := dphe.Privacy{Clip: cfg.GetClip(), NoiseMultiplier: cfg.GetNoiseMultiplier(), Ledger: l, Principal: client,
		Select: &dphe.Selection{Epsilon: cfg.GetSelectionEpsilon(), Delta: cfg.GetSelectionDelta(), Threshold: cfg.GetSelectionThreshold(), Count: int(cfg.GetCount())}}
	evs, err := dphe.ContributionEvents(p, d.c.model.Len(), lanes)
	if err != nil {
		return nil, err
	}
	for i := range evs {
		evs[i].Label = fmt.Sprintf("%s, round %d", evs[i].Label, d.n)
	}
	return evs, nil
}

// dpheCharge works out the charge of client's contribution to its stored
// ledger (read by row): the ledger as stored and as charged, or a refusal
// if the charge would exceed the client's budget.
func (d *dpheRound) dpheCharge(row func(query string, args ...any) *sql.Row, client string) (base, next []byte, err error) {
	if err := row(`SELECT ledger FROM clients WHERE id = ?`, client).Scan(&base); err != nil {
		return nil, nil, refuse("unknown_client", "client %q is not enrolled", client)
	}
	l, err := clientLedger(base)
	if err != nil {
		return nil, nil, err
	}
	evs, err := d.dpheEvents(l, client)
	if err != nil {
		return nil, nil, refuse("dp", "round %d's release: %v", d.n, err)
	}
	s, err := l.Charge(client, evs...)
	if errors.Is(err, dp.ErrBudgetExceeded) {
		return nil, nil, refuse("budget", "accepting this contribution would take client %q past its privacy budget (it would have spent ε = %.4g)", client, s.Epsilon)
	}
	if err != nil {
		return nil, nil, refuse("dp", "charging the contribution: %v", err)
	}
	next, err = marshalLedger(l)
	return base, next, err
}

// checkDPHECharge refuses client's contribution if its charge would take
// the coordinator's copy of its ledger past its budget (nothing stored).
func (d *dpheRound) checkDPHECharge(ctx context.Context, client string) error {
	_, _, err := d.dpheCharge(func(q string, args ...any) *sql.Row { return d.c.st.db.QueryRowContext(ctx, q, args...) }, client)
	return err
}

// chargeDPHE stores, in the round's closing transaction tx, the charge of
// every client whose contribution the decrypted sum holds.
func (d *dpheRound) chargeDPHE(tx *sql.Tx) error {
	d.mu.Lock()
	clients := d.revealed
	d.mu.Unlock()
	for _, client := range clients {
		base, next, err := d.dpheCharge(tx.QueryRow, client)
		if err != nil {
			return fmt.Errorf("charging client %q's ledger for round %d: %w", client, d.n, err)
		}
		if err := execOne(tx, `UPDATE clients SET ledger = ? WHERE id = ? AND ledger = ?`, next, client, base); err != nil {
			return fmt.Errorf("client %q's ledger: %w", client, err)
		}
	}
	return nil
}
