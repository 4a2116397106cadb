package coord

import (
	"bytes"
	"context"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/secagg/dphe"
)

// A DPHE round (Options.DPHE, package fed/dphefed): when the round opens
// the coordinator sets it up at the key generator (dphefed.StartRound),
// and the task it pushes names the key generator and the proposed
// release (RoundConfig.dphe). Each selected client fetches its round keys
// from the key generator, trains, releases its update with its own DP
// noise and selection, charged to its own ledger, encrypts it and sends
// its whole contribution in one SecAggSend. The coordinator checks every
// message (dphefed.Round.Receive: the sender's, authentic, of this round,
// not a replay), stores the contribution's bytes (ciphertexts, permuted
// positions, checksums and tags: no plaintext) before it acknowledges it,
// and once every selected client's contribution is in, or at the
// deadline if at least minDPHEClients are, multiplies the ciphertexts and
// has the key generator decrypt the product: the only plaintext the
// coordinator ever holds is that sum. Fewer contributions: the round
// fails and nothing is decrypted.
//
// Crash and restart: the stored contributions are replayed into the
// round's aggregator rebuilt from the key generator's keys
// (dphefed.ResumeRound); the key generator decrypts a round once, so a
// coordinator that crashed after decrypting cannot have a second sum of
// the same round.

// minDPHEClients is the least number of clients whose sum is decrypted
// (the key generator enforces it too).
const minDPHEClients = 3

// maxDPHEMessages bounds the messages of one contribution.
const maxDPHEMessages = 1 << 12

// DPHEOptions configures DPHE rounds (Options.DPHE).
type DPHEOptions struct {
	// KeyGen is the connection to the key generator (required).
	KeyGen *dphefed.KeyGen
	// Addr and Name are the key generator's host:port and certificate
	// name, sent to clients (required). A client dials it only under the
	// name its owner configured.
	Addr, Name string
	// Count is the number of blocks each client's DP selection chooses,
	// and DPHE's capacity per message (required, ≥ 1).
	Count int
	// Clip and NoiseMultiplier are the proposed release (> 0): a client
	// releases with at least its own policy's noise and at most its clip.
	Clip, NoiseMultiplier float64
	// SelectionEpsilon, SelectionDelta and SelectionThreshold are the
	// proposed DP selection (ε > 0, δ in (0, 1), threshold ≥ 0).
	SelectionEpsilon, SelectionDelta, SelectionThreshold float64
	// Bound is the magnitude bound of a released value for packing (0:
	// Clip·(1 + 10·NoiseMultiplier)).
	Bound float64

	// onSum, set by tests, is shown each decrypted sum.
	onSum func(round uint64, sum []float64)
}

// validate fills the defaults and checks d against the coordinator's
// options.
func (d *DPHEOptions) validate(o *Options) error {
	switch {
	case o.SecAgg != nil:
		return errors.New("coordinator: DPHE and masking secure aggregation are exclusive: set one")
	case d.KeyGen == nil:
		return errors.New("coordinator: DPHE needs a connection to the key generator")
	case d.Addr == "":
		return errors.New("coordinator: DPHE needs the key generator's address, sent to clients")
	case o.Task.DP != nil:
		return errors.New("coordinator: a DPHE round's DP is each client's release of its update (DPHE's); the task must not also ask for DP-SGD")
	case o.MinAvailable < minDPHEClients || o.MinUpdates < minDPHEClients:
		return fmt.Errorf("coordinator: DPHE decrypts only sums of at least %d clients; the minimum available is %d and the minimum updates %d", minDPHEClients, o.MinAvailable, o.MinUpdates)
	case d.Count < 1:
		return fmt.Errorf("coordinator: DPHE's selection count must be at least 1, got %d", d.Count)
	case !(d.Clip > 0) || math.IsInf(d.Clip, 0) || !(d.NoiseMultiplier > 0) || math.IsInf(d.NoiseMultiplier, 0):
		return fmt.Errorf("coordinator: DPHE needs a finite clip > 0 and noise multiplier > 0, got %g and %g", d.Clip, d.NoiseMultiplier)
	case !(d.SelectionEpsilon > 0) || math.IsInf(d.SelectionEpsilon, 0) || !(d.SelectionDelta > 0 && d.SelectionDelta < 1) || !(d.SelectionThreshold >= 0) || math.IsInf(d.SelectionThreshold, 0):
		return fmt.Errorf("coordinator: DPHE's selection needs ε > 0, δ in (0, 1) and a threshold ≥ 0, got %g, %g and %g", d.SelectionEpsilon, d.SelectionDelta, d.SelectionThreshold)
	case d.Bound < 0 || math.IsInf(d.Bound, 0) || math.IsNaN(d.Bound):
		return fmt.Errorf("coordinator: DPHE's packing bound must be ≥ 0 and finite, got %g", d.Bound)
	}
	if err := pki.CheckName(d.Name); err != nil {
		return fmt.Errorf("coordinator: the key generator's certificate name: %w", err)
	}
	if st, err := strategy.New(o.Strategy); err == nil {
		if w, err := st.Weight(0); err != nil || w != 1 {
			return errors.New("coordinator: DPHE averages the clients' updates uniformly (the coordinator never sees one to weigh it): use uniform weighting")
		}
	}
	if d.Bound == 0 {
		d.Bound = d.Clip * (1 + 10*d.NoiseMultiplier)
	}
	return nil
}

// dpheRound is one DPHE round's coordinator state (a secureRound).
type dpheRound struct {
	c        *Coordinator
	n        uint64
	cfg      *fedpb.DPHEConfig
	selected []string
	deadline time.Time

	mu sync.Mutex
	r  *dphefed.Round
	// got holds each client's accepted contribution as stored.
	got    map[string][]byte
	done   bool
	sum    *strategy.Sum
	failed string
	// revealed are the clients whose contributions a decrypted sum
	// holds: charged when the round closes (dphe_charge.go).
	revealed []string
}

// beginDPHE sets up round n at the key generator among the selected
// clients.
func (c *Coordinator) beginDPHE(ctx context.Context, n uint64, sel []string, deadline time.Time) (*dpheRound, error) {
	d := c.o.DPHE
	roster := slices.Sorted(slices.Values(sel))
	// The selection chooses at most every block: the count is capped at
	// the number of blocks of the key's packing.
	pk, frac, err := d.KeyGen.PublicKey(ctx)
	if err != nil {
		return nil, err
	}
	pack, err := dphe.NewPacking(pk, frac, c.model.Len(), d.Bound, len(roster))
	if err != nil {
		return nil, fmt.Errorf("coordinator: DPHE's packing: %w", err)
	}
	count := min(d.Count, pack.Blocks())
	cfg := &fedpb.DPHEConfig{KeygenAddr: d.Addr, KeygenName: d.Name, Round: n, Count: uint32(count), Clip: d.Clip,
		NoiseMultiplier: d.NoiseMultiplier, SelectionEpsilon: d.SelectionEpsilon, SelectionDelta: d.SelectionDelta, SelectionThreshold: d.SelectionThreshold}
	r, err := dphefed.StartRound(ctx, d.KeyGen, dphefed.RoundRequest{Round: n, Coordinates: c.model.Len(), Capacity: count, Clients: roster,
		Pack: true, Bound: d.Bound, MaxUsers: len(roster)})
	if err != nil {
		return nil, err
	}
	return &dpheRound{c: c, n: n, cfg: cfg, selected: roster, deadline: deadline, r: r, got: map[string][]byte{}}, nil
}

// restoreDPHE rebuilds open round n's DPHE state after a restart and
// replays its stored contributions.
func (c *Coordinator) restoreDPHE(ctx context.Context, n uint64, cfg *fedpb.DPHEConfig, selected map[string]bool, deadline time.Time) (*dpheRound, error) {
	if c.o.DPHE == nil {
		return nil, fmt.Errorf("coordinator: the open round %d is a DPHE round: restart with DPHE", n)
	}
	d := &dpheRound{c: c, n: n, cfg: cfg, selected: slices.Sorted(maps.Keys(selected)), deadline: deadline, got: map[string][]byte{}}
	rows, err := c.st.db.QueryContext(ctx, `SELECT client, data FROM secagg WHERE round = ? AND kind = 'dphe'`, n)
	if err != nil {
		return nil, fmt.Errorf("coordinator: round %d's DPHE contributions: %w", n, err)
	}
	for rows.Next() {
		var client string
		var data []byte
		if err := rows.Scan(&client, &data); err != nil {
			rows.Close()
			return nil, fmt.Errorf("coordinator: round %d's DPHE contributions: %w", n, err)
		}
		d.got[client] = data
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("coordinator: round %d's DPHE contributions: %w", n, err)
	}
	if err := d.rebuild(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// rebuild makes a fresh aggregator from the key generator's keys and
// replays the stored contributions into it (a restart, or a contribution
// refused half-way through, which left its first messages in the old
// aggregator).
func (d *dpheRound) rebuild(ctx context.Context) error {
	r, err := dphefed.ResumeRound(ctx, d.c.o.DPHE.KeyGen, d.cfg.GetRound())
	if err != nil {
		return fmt.Errorf("coordinator: round %d: %w", d.n, err)
	}
	for _, client := range slices.Sorted(maps.Keys(d.got)) {
		var ct fedpb.DPHEContribution
		if err := proto.Unmarshal(d.got[client], &ct); err != nil {
			return fmt.Errorf("coordinator: round %d: client %q's stored contribution: %w", d.n, client, err)
		}
		for _, m := range ct.GetMessages() {
			if err := r.Receive(client, m); err != nil {
				return fmt.Errorf("coordinator: round %d: replaying client %q's stored contribution: %w", d.n, client, err)
			}
		}
	}
	d.r = r
	return nil
}

func (d *dpheRound) push(string, int) (*fedpb.SecAggPhase, int) { return nil, 0 }

func (d *dpheRound) maskedSize() int { return 0 }

func (d *dpheRound) receiveMasked(context.Context, string, *fedpb.UpdateHeader, []byte) (float64, error) {
	return 0, secRefuse("round %d is a DPHE round: contributions go through SecAggSend", d.n)
}

func (d *dpheRound) receive(ctx context.Context, client string, _ *x509.Certificate, m *fedpb.SecAggMessage) error {
	if !slices.Contains(d.selected, client) {
		return refuse("not_selected", "client %q is not in round %d's roster", client, d.n)
	}
	ct := m.GetDphe()
	if ct == nil {
		return refuse("malformed", "round %d is a DPHE round: only DPHE contributions are taken", d.n)
	}
	msgs := ct.GetMessages()
	if len(msgs) == 0 || len(msgs) > maxDPHEMessages {
		return refuse("malformed", "a DPHE contribution of %d messages (1 to %d)", len(msgs), maxDPHEMessages)
	}
	data, err := proto.Marshal(ct)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if prev, ok := d.got[client]; ok {
		if bytes.Equal(prev, data) {
			return nil // sent again after a reconnection: already stored
		}
		return secRefuse("client %q already sent its contribution to round %d; a different one is refused (replay)", client, d.n)
	}
	if d.done {
		return secRefuse("round %d's sum is already taken", d.n)
	}
	if err := d.checkDPHECharge(ctx, client); err != nil {
		return err
	}
	for i, msg := range msgs {
		if err := d.r.Receive(client, msg); err != nil {
			if i > 0 {
				// The first messages are in the aggregator: start it
				// again from the stored contributions.
				if rerr := d.rebuild(ctx); rerr != nil {
					d.fail("rebuilding the aggregator after a refused contribution failed")
					return errors.Join(secRefuse("%v", err), rerr)
				}
			}
			return secRefuse("%v", err)
		}
	}
	err = d.c.st.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`UPDATE clients SET updates = updates + 1 WHERE id = ?`, client); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE round_clients SET counted = 1 WHERE round = ? AND client = ?`, d.n, client); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE rounds SET updates = updates + 1 WHERE round = ? AND state = 'open'`, d.n); err != nil {
			return err
		}
		return storeMsg(tx, d.n, client, "dphe", data)
	})
	if err != nil {
		// The aggregator holds a contribution the file does not: the
		// round cannot be resumed as it stands, so it ends undecrypted.
		d.fail(fmt.Sprintf("storing client %q's contribution failed", client))
		return fmt.Errorf("coordinator: storing the DPHE contribution: %w", err)
	}
	d.got[client] = data
	c := d.c
	c.mu.Lock()
	if c.round != nil && c.round.n == d.n {
		c.round.counted[client] = true
	}
	c.mu.Unlock()
	c.o.Metrics.UpdateAccepted(client, len(data), 0)
	c.log.Info("DPHE contribution accepted", "round", d.n, "client", client, "messages", len(msgs))
	c.poke()
	return nil
}

func (d *dpheRound) fail(reason string) {
	if d.failed == "" {
		d.failed = reason
	}
	d.done = true
}

func (d *dpheRound) step(ctx context.Context, now time.Time) (bool, error) {
	c := d.c
	c.mu.Lock()
	var withdrawn map[string]string
	if c.round != nil {
		withdrawn = maps.Clone(c.round.withdrawn)
	}
	c.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return true, nil
	}
	waiting := 0
	for _, id := range d.selected {
		if _, ok := d.got[id]; !ok && withdrawn[id] == "" {
			waiting++
		}
	}
	if waiting > 0 && now.Before(d.deadline) {
		return false, nil
	}
	if len(d.got) < minDPHEClients {
		d.fail(fmt.Sprintf("DPHE: %d complete contributions, fewer than %d; nothing was decrypted", len(d.got), minDPHEClients))
		c.log.Warn("secure round abandoned", "round", d.n, "reason", d.failed)
		return true, nil
	}
	d.done = true
	s, err := d.r.Finish(ctx)
	if err != nil {
		d.failed = fmt.Sprintf("DPHE: the sum was not decrypted: %v", err)
		c.log.Warn("secure round abandoned", "round", d.n, "reason", d.failed)
		return true, nil
	}
	want := slices.Sorted(maps.Keys(d.got))
	d.revealed = want
	if s.Round != d.cfg.GetRound() || len(s.Sum) != c.model.Len() || !slices.Equal(slices.Sorted(slices.Values(s.Clients)), want) {
		d.failed = fmt.Sprintf("DPHE: the key generator's sum is of round %d, %d values and %d clients; the round is %d, %d values and %d clients",
			s.Round, len(s.Sum), len(s.Clients), d.cfg.GetRound(), c.model.Len(), len(want))
		return true, nil
	}
	sum := strategy.NewSum(c.model)
	copy(sum.Values, s.Sum)
	sum.Count, sum.Weight = len(want), float64(len(want))
	d.sum = sum
	if c.o.DPHE.onSum != nil {
		c.o.DPHE.onSum(d.n, slices.Clone(s.Sum))
	}
	c.log.Info("DPHE sum decrypted", "round", d.n, "clients", len(want))
	return true, nil
}

func (d *dpheRound) outcome() (*strategy.Sum, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sum, d.failed
}

// erase deletes the round's contributions and, in the same closing
// transaction, charges the coordinator's copy of the ledger of every
// client the decrypted sum holds (dphe_charge.go).
func (d *dpheRound) erase(tx *sql.Tx) error {
	if _, err := tx.Exec(`DELETE FROM secagg WHERE round = ?`, d.n); err != nil {
		return err
	}
	return d.chargeDPHE(tx)
}
