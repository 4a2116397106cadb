package coord

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/secagg/masking"
	"github.com/veil-privacy/veil/secagg/quant"
)

// A masking round (SecAgg+, secagg/masking) runs four phases over the
// clients' Subscribe streams and unary/client-streaming calls:
//
//  1. adverts: each selected client sends its key advert, signed by its
//     certificate's key (SecAggSend); the coordinator checks the
//     signature against the certificate the call came with.
//  2. shares: once every selected client advertised (or at the phase's
//     deadline) the coordinator pushes each advertiser its neighbours'
//     adverts and certificates; each sends its encrypted shares.
//  3. masked vectors: once every advertiser shared (or at the deadline)
//     it pushes each sharer the shares addressed to it; each trains,
//     quantises, masks and streams its masked vector (SubmitMasked),
//     which is charged to its ledger when it is stored.
//  4. unmasking: once every sharer sent its vector (or at the deadline)
//     it pushes every survivor the unmasking request; each answers with
//     its shares, and the coordinator unmasks the survivors' sum,
//     decodes it (secagg/quant) and the strategy steps with it.
//
// A phase left with fewer than t clients ends the round, failed, and
// nothing is unmasked: a client that misses a phase's deadline takes no
// further part (dropped before sending: excluded; dropped after sending
// its vector: its pairwise masks are recovered from its neighbours'
// shares of its mask key, as masking prescribes).
//
// Crash and restart. Every message is stored (table secagg) before it is
// acknowledged, and each phase change (table secagg_rounds, with the
// unmasking request's bytes) before any client is told of it. A restarted
// coordinator replays the stored messages into a fresh masking.Server,
// which is deterministic given them, so it reaches the same phase with
// the same relayed messages and the same unmasking request, and finishes
// the round from there: clients that were waiting are pushed the same
// phase message again (the fed client answers an identical message with
// its identical earlier answer and refuses a different one). So no
// accepted contribution (and no charge) is lost, and nothing is unmasked
// twice: the request is fixed by the stored masked vectors, and no masked
// vector is accepted once it is stored. Resuming rather than abandoning
// reveals nothing new: the stored messages are exactly what the
// coordinator was entitled to see in the round, and a client's own
// masking state refuses a second, different request.
type maskingRound struct {
	c   *Coordinator
	n   uint64
	cfg *fedpb.SecAggConfig
	p   masking.Params
	q   *quant.Quantizer
	// ddp is a distributed DP-SGD round's encoding (nil: q's).
	ddp   *ddp.Round
	dir   *secround.Directory
	ids   map[string]uint32
	names map[uint32]string
	// deadlines of phases 1–4 (the fourth is the round's).
	deadlines [4]time.Time

	mu    sync.Mutex
	keys  masking.StaticKeys
	srv   *masking.Server
	phase int // 1–4; 5 once finished
	// stored holds each phase's accepted messages as stored, by masking
	// id (phase 3: the masked vectors).
	stored [4]map[uint32][]byte
	certs  map[uint32][]byte
	// pushes are the current phase's messages, by masking id.
	pushes map[uint32]*fedpb.SecAggPhase
	sum    *strategy.Sum
	failed string
}

// Kinds of stored messages, by phase.
var maskingKinds = [4]string{"advert", "shares", "masked", "unmask"}

// beginMasking sets up round n's masking among the selected clients
// (sorted), from model version, starting at start with the round's
// deadline.
func (c *Coordinator) beginMasking(n uint64, sel []string, version string, start, deadline time.Time) (*maskingRound, error) {
	s := c.o.SecAgg
	roster := slices.Sorted(slices.Values(sel))
	k, t := s.graph(len(roster))
	cfg := &fedpb.SecAggConfig{Mode: secround.Masking, RoundId: make([]byte, 32), GraphSeed: make([]byte, 32),
		Degree: uint32(k), Threshold: uint32(t), MinHonest: uint32(s.MinHonest),
		AdvertsDeadlineUnixMs: start.Add(s.PhaseTimeout).UnixMilli(),
		SharesDeadlineUnixMs:  start.Add(2 * s.PhaseTimeout).UnixMilli(),
		MaskedDeadlineUnixMs:  deadline.Add(-s.PhaseTimeout).UnixMilli()}
	if _, err := rand.Read(cfg.RoundId); err != nil {
		return nil, err
	}
	if _, err := rand.Read(cfg.GraphSeed); err != nil {
		return nil, err
	}
	for i, id := range roster {
		cfg.Roster = append(cfg.Roster, &fedpb.SecAggMember{Id: uint32(i + 1), Client: id})
	}
	if d := s.DDP; d != nil {
		plan := d.Plan
		switch {
		case plan.Dim != c.model.Len():
			return nil, fmt.Errorf("coordinator: the distributed DP-SGD plan sums %d values, the model has %d", plan.Dim, c.model.Len())
		case plan.Clients < len(roster):
			return nil, fmt.Errorf("coordinator: the distributed DP-SGD plan's wrap bound covers %d clients, the round selected %d", plan.Clients, len(roster))
		}
		cfg.Ddp, cfg.Threshold, cfg.Length = secround.PlanProto(plan), uint32(max(t, plan.Threshold)), uint32(plan.Padded())
		return c.maskingFromConfig(n, cfg, version, deadline)
	}
	var err error
	if cfg.Quant, err = s.quantConfig(c.model.Len(), len(roster), c.o.MaxUpdateNorm); err != nil {
		return nil, err
	}
	return c.maskingFromConfig(n, cfg, version, deadline)
}

// maskingFromConfig makes round n's masking state from its config and
// model version (at the round's start or on a restart).
func (c *Coordinator) maskingFromConfig(n uint64, cfg *fedpb.SecAggConfig, version string, deadline time.Time) (*maskingRound, error) {
	model, err := secround.ModelDigest(version)
	if err != nil {
		return nil, fmt.Errorf("coordinator: round %d: %w", n, err)
	}
	p, q, err := MaskingParams(cfg, model)
	if err != nil {
		return nil, fmt.Errorf("coordinator: round %d: %w", n, err)
	}
	m := &maskingRound{c: c, n: n, cfg: cfg, p: p, q: q, dir: secround.NewDirectory(cfg, c.o.SecAgg.Roots), ids: map[string]uint32{}, names: map[uint32]string{},
		keys: masking.StaticKeys{}, phase: 1, certs: map[uint32][]byte{}, pushes: map[uint32]*fedpb.SecAggPhase{},
		deadlines: [4]time.Time{time.UnixMilli(cfg.GetAdvertsDeadlineUnixMs()), time.UnixMilli(cfg.GetSharesDeadlineUnixMs()),
			time.UnixMilli(cfg.GetMaskedDeadlineUnixMs()), deadline}}
	if q == nil {
		if m.ddp, _, err = secround.Round(cfg); err != nil {
			return nil, fmt.Errorf("coordinator: round %d: %w", n, err)
		}
	}
	for i := range m.stored {
		m.stored[i] = map[uint32][]byte{}
	}
	for _, mb := range cfg.GetRoster() {
		m.ids[mb.GetClient()], m.names[mb.GetId()] = mb.GetId(), mb.GetClient()
	}
	if m.srv, err = masking.NewServer(p, m.keys); err != nil {
		return nil, fmt.Errorf("coordinator: round %d: %w", n, err)
	}
	return m, nil
}

// MaskingParams returns the masking parameters and the quantiser (at the
// proposed noise) of a round's secure aggregation section, checked, bound
// to the round's model (secround.ModelDigest of the version served).
func MaskingParams(cfg *fedpb.SecAggConfig, model [32]byte) (masking.Params, *quant.Quantizer, error) {
	if _, ok := secround.PlanOf(cfg); ok {
		// Distributed DP-SGD: the plan's encoding (maskingFromConfig).
		if _, _, err := secround.Round(cfg); err != nil {
			return masking.Params{}, nil, err
		}
		p, err := secround.Params(cfg, model)
		return p, nil, err
	}
	q, err := secround.Quantizer(cfg, cfg.GetQuant().GetNoise())
	if err != nil {
		return masking.Params{}, nil, err
	}
	if cfg.GetLength() == 0 {
		cfg.Length = uint32(q.Padded())
	}
	p, err := secround.Params(cfg, model)
	return p, q, err
}

// begin stores the round's phase in tx (the round's start).
func (m *maskingRound) begin(tx *sql.Tx) error {
	_, err := tx.Exec(`INSERT INTO secagg_rounds (round, phase) VALUES (?, 1)`, m.n)
	return err
}

func (m *maskingRound) maskedSize() int {
	b, _ := (&masking.MaskedInput{Values: make([]uint32, m.p.Length)}).MarshalBinary()
	return len(b)
}

func (m *maskingRound) push(client string, after int) (*fedpb.SecAggPhase, int) {
	id, ok := m.ids[client]
	if !ok {
		return nil, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.phase <= after || m.phase > 4 {
		return nil, 0
	}
	if p := m.pushes[id]; p != nil {
		return p, m.phase
	}
	return nil, 0
}

// refusal reasons of a masking message.
func secRefuse(format string, a ...any) error { return refuse("secagg", format, a...) }

func (m *maskingRound) receive(ctx context.Context, client string, leaf *x509.Certificate, msg *fedpb.SecAggMessage) error {
	id, ok := m.ids[client]
	if !ok {
		return refuse("not_selected", "client %q is not in round %d's roster", client, m.n)
	}
	var phase int
	var data []byte
	switch x := msg.GetMsg().(type) {
	case *fedpb.SecAggMessage_Advert:
		phase, data = 1, x.Advert
	case *fedpb.SecAggMessage_Shares:
		phase, data = 2, x.Shares
	case *fedpb.SecAggMessage_Unmask:
		phase, data = 4, x.Unmask
	default:
		return refuse("malformed", "an empty secure aggregation message")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.stored[phase-1][id]; ok {
		if bytes.Equal(prev, data) {
			return nil // sent again after a reconnection: already stored
		}
		return secRefuse("client %q already sent its %s in round %d; a different one is refused (replay)", client, maskingKinds[phase-1], m.n)
	}
	if m.phase != phase {
		return secRefuse("round %d is not in its %s phase", m.n, maskingKinds[phase-1])
	}
	var cert []byte
	switch phase {
	case 1:
		var a masking.KeyAdvert
		if err := a.UnmarshalBinary(data); err != nil {
			return refuse("malformed", "%v", err)
		}
		if a.From != id {
			return secRefuse("client %q (id %d) sent an advert for id %d", client, id, a.From)
		}
		if leaf == nil {
			return secRefuse("a key advert needs the caller's certificate (mutual TLS)")
		}
		if err := m.dir.Check(id, leaf); err != nil {
			return secRefuse("%v", err)
		}
		m.keys[id] = leaf.PublicKey
		if err := m.srv.ReceiveAdvert(&a); err != nil {
			delete(m.keys, id)
			return secRefuse("%v", err)
		}
		cert = leaf.Raw
	case 2:
		round, shares, err := masking.DecodeShares(data)
		if err != nil {
			return refuse("malformed", "%v", err)
		}
		if round != m.p.RoundID {
			return secRefuse("client %q sent shares of another round (replay)", client)
		}
		if err := m.srv.ReceiveShares(id, shares); err != nil {
			return secRefuse("%v", err)
		}
	case 4:
		var u masking.UnmaskResponse
		if err := u.UnmarshalBinary(data); err != nil {
			return refuse("malformed", "%v", err)
		}
		if u.From != id {
			return secRefuse("client %q (id %d) sent an unmasking response for id %d", client, id, u.From)
		}
		if err := m.srv.ReceiveUnmask(&u); err != nil {
			return secRefuse("%v", err)
		}
	}
	err := m.c.st.tx(ctx, func(tx *sql.Tx) error {
		if cert != nil {
			if err := storeMsg(tx, m.n, client, "cert", cert); err != nil {
				return err
			}
		}
		return storeMsg(tx, m.n, client, maskingKinds[phase-1], data)
	})
	if err != nil {
		// The server holds a message the file does not: the round cannot
		// be resumed as it stands, so it ends with nothing unmasked.
		m.fail(fmt.Sprintf("storing client %q's %s failed", client, maskingKinds[phase-1]))
		return fmt.Errorf("coordinator: storing the %s: %w", maskingKinds[phase-1], err)
	}
	m.stored[phase-1][id] = data
	if cert != nil {
		m.certs[id] = cert
	}
	m.c.log.Info("secure aggregation message accepted", "round", m.n, "client", client, "kind", maskingKinds[phase-1])
	m.c.poke()
	return nil
}

func storeMsg(tx *sql.Tx, round uint64, client, kind string, data []byte) error {
	_, err := tx.Exec(`INSERT INTO secagg (round, client, kind, data) VALUES (?, ?, ?, ?)`, round, client, kind, data)
	return err
}

// receiveMasked stores and charges a masked vector. The coordinator
// cannot check an update's norm under masking: the client's quantiser
// clips it to the round's clip (MaxUpdateNorm).
func (m *maskingRound) receiveMasked(ctx context.Context, client string, h *fedpb.UpdateHeader, payload []byte) (float64, error) {
	c := m.c
	id, ok := m.ids[client]
	if !ok {
		return 0, refuse("not_selected", "client %q is not in round %d's roster", client, m.n)
	}
	var mi masking.MaskedInput
	if err := mi.UnmarshalBinary(payload); err != nil {
		return 0, refuse("malformed", "%v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.stored[2][id]; ok {
		if bytes.Equal(prev, payload) {
			// Sent again (a reconnection, a restart): stored and charged
			// once; the answer states what the client has spent.
			return c.spent(ctx, client)
		}
		return 0, secRefuse("client %q already sent its masked vector in round %d; a different one is refused (replay)", client, m.n)
	}
	switch {
	case m.phase != 3:
		return 0, secRefuse("round %d is not in its masked-vector phase", m.n)
	case mi.From != id:
		return 0, secRefuse("client %q (id %d) sent a masked vector for id %d", client, id, mi.From)
	case mi.RoundID != m.p.RoundID:
		return 0, secRefuse("client %q sent a masked vector of another round (replay)", client)
	case m.stored[1][id] == nil:
		return 0, secRefuse("client %q did not share its keys in round %d", client, m.n)
	case len(mi.Values) != m.p.Length:
		return 0, refuse("shape", "a masked vector of %d values, round %d has %d", len(mi.Values), m.n, m.p.Length)
	}
	if err := c.check(client, h); err != nil {
		return 0, err
	}
	c.mu.Lock()
	r, dim := c.round, c.model.Len()
	c.mu.Unlock()
	var ch *charged
	err := c.st.tx(ctx, func(tx *sql.Tx) error {
		var lb []byte
		if err := tx.QueryRow(`SELECT ledger FROM clients WHERE id = ?`, client).Scan(&lb); err != nil {
			return refuse("unknown_client", "client %q is not enrolled", client)
		}
		var x charged
		ev, distributed, err := c.ddpEvent(r.cfg)
		switch {
		case err != nil:
			return err
		case distributed:
			x, err = c.chargeEvent(client, lb, ev)
		case r.cfg.GetDp() != nil:
			x, err = c.charge(client, lb, h.GetDp(), dim)
		}
		if err != nil {
			return err
		}
		if x.refusal != nil {
			return x.refusal
		}
		if x.ledger != nil {
			ch, lb = &x, x.ledger
		}
		if _, err := tx.Exec(`UPDATE clients SET ledger = ?, updates = updates + 1 WHERE id = ?`, lb, client); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE round_clients SET counted = 1 WHERE round = ? AND client = ?`, m.n, client); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE rounds SET updates = updates + 1 WHERE round = ? AND state = 'open'`, m.n); err != nil {
			return err
		}
		return storeMsg(tx, m.n, client, "masked", payload)
	})
	if err != nil {
		var rf *refusal
		if errors.As(err, &rf) {
			return 0, err
		}
		return 0, fmt.Errorf("coordinator: storing the masked vector: %w", err)
	}
	if err := m.srv.ReceiveMasked(&mi); err != nil {
		m.fail("the masked-vector step refused a stored vector")
		return 0, fmt.Errorf("coordinator: %w", err)
	}
	m.stored[2][id] = payload
	var spent float64
	if ch != nil {
		spent = ch.spent
		c.ledgers.put(client, ch.ledger, ch.l)
	}
	c.mu.Lock()
	r.counted[client] = true
	c.mu.Unlock()
	c.o.Metrics.UpdateAccepted(client, len(payload), spent)
	c.log.Info("masked vector accepted", "round", m.n, "client", client)
	c.poke()
	return spent, nil
}

func (m *maskingRound) fail(reason string) {
	if m.failed == "" {
		m.failed = reason
	}
	m.phase = 5
}

// expected reports whether the phase's message of id is still awaited:
// id took part in the phase before and has not withdrawn.
func (m *maskingRound) expected(phase int, id uint32, withdrawn map[string]string) bool {
	if withdrawn[m.names[id]] != "" {
		return false
	}
	if phase == 1 {
		return true
	}
	if phase == 4 {
		_, ok := m.stored[2][id]
		return ok
	}
	_, ok := m.stored[phase-2][id]
	return ok
}

func (m *maskingRound) step(ctx context.Context, now time.Time) (bool, error) {
	c := m.c
	c.mu.Lock()
	withdrawn := maps.Clone(c.round.withdrawn)
	c.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.phase <= 4 {
		waiting := 0
		for _, id := range m.p.Roster {
			if _, got := m.stored[m.phase-1][id]; !got && m.expected(m.phase, id, withdrawn) {
				waiting++
			}
		}
		if waiting > 0 && now.Before(m.deadlines[m.phase-1]) {
			return false, nil
		}
		if err := m.next(ctx); err != nil {
			return false, err
		}
	}
	return true, nil
}

// next closes the current phase and opens the next (m.mu held): the
// phase change is stored before any client is told of it.
func (m *maskingRound) next(ctx context.Context) error {
	pushes := map[uint32]*fedpb.SecAggPhase{}
	var failure string
	switch m.phase {
	case 1:
		for id := range m.stored[0] {
			ads, err := m.srv.AdvertsFor(id)
			if err != nil {
				failure = err.Error()
				break
			}
			b, err := masking.EncodeAdverts(m.p.RoundID, ads)
			if err != nil {
				return err
			}
			msg := &fedpb.SecAggAdverts{Adverts: b}
			for _, a := range ads {
				msg.Certs = append(msg.Certs, &fedpb.SecAggCert{Id: a.From, Der: m.certs[a.From]})
			}
			pushes[id] = &fedpb.SecAggPhase{Round: m.n, Msg: &fedpb.SecAggPhase_Adverts{Adverts: msg}}
		}
		if len(m.stored[0]) == 0 {
			failure = "no client advertised keys"
		}
	case 2:
		for id := range m.stored[1] {
			sh, err := m.srv.SharesFor(id)
			if err != nil {
				failure = err.Error()
				break
			}
			b, err := masking.EncodeShares(m.p.RoundID, sh)
			if err != nil {
				return err
			}
			pushes[id] = &fedpb.SecAggPhase{Round: m.n, Msg: &fedpb.SecAggPhase_Shares{Shares: b}}
		}
		if len(m.stored[1]) == 0 {
			failure = "no client shared its keys"
		}
	case 3:
		req, err := m.srv.UnmaskRequest()
		if err != nil {
			failure = err.Error()
			break
		}
		b, err := req.MarshalBinary()
		if err != nil {
			return err
		}
		for _, id := range req.Survivors {
			pushes[id] = &fedpb.SecAggPhase{Round: m.n, Msg: &fedpb.SecAggPhase_Unmask{Unmask: b}}
		}
	case 4:
		res, err := m.srv.Sum()
		if err != nil {
			failure = err.Error()
			break
		}
		if m.c.onSecureSum != nil {
			m.c.onSecureSum(m.n, slices.Clone(res.Sum))
		}
		var dec []float64
		if m.ddp != nil {
			// Distributed DP-SGD: the released noisy gradient sum, which
			// the server's step divides by the plan's expected batch
			// (aggregate), not the mean of updates.
			var rel []float32
			if rel, err = m.ddp.Decode(res.Sum); err == nil {
				dec = make([]float64, len(rel))
				for i, v := range rel {
					dec[i] = float64(v)
				}
			}
		} else {
			dec, err = m.q.Decode(res.Sum)
		}
		if err != nil {
			failure = err.Error()
			break
		}
		c := m.c
		sum := strategy.NewSum(c.model)
		copy(sum.Values, dec)
		sum.Count, sum.Weight = len(res.Survivors), float64(len(res.Survivors))
		m.sum = sum
	}
	if failure != "" {
		m.fail(fmt.Sprintf("secure aggregation, %s phase: %s; nothing was unmasked", maskingKinds[m.phase-1], failure))
		m.c.log.Warn("secure round abandoned", "round", m.n, "reason", m.failed)
		return nil
	}
	if m.phase < 4 {
		err := m.c.st.tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.Exec(`UPDATE secagg_rounds SET phase = ? WHERE round = ?`, m.phase+1, m.n)
			return err
		})
		if err != nil {
			m.fail("storing the phase change failed")
			return fmt.Errorf("coordinator: round %d: storing the secure aggregation phase: %w", m.n, err)
		}
	}
	m.phase++
	m.pushes = pushes
	m.c.log.Info("secure aggregation phase", "round", m.n, "phase", m.phase, "clients", len(pushes))
	m.c.mu.Lock()
	m.c.notifyLocked()
	m.c.mu.Unlock()
	return nil
}

func (m *maskingRound) outcome() (*strategy.Sum, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sum, m.failed
}

func (m *maskingRound) erase(tx *sql.Tx) error {
	if _, err := tx.Exec(`DELETE FROM secagg WHERE round = ?`, m.n); err != nil {
		return err
	}
	_, err := tx.Exec(`DELETE FROM secagg_rounds WHERE round = ?`, m.n)
	return err
}

// restore replays round n's stored messages and phase (a restart).
func (m *maskingRound) restore(ctx context.Context, db *sql.DB) error {
	var phase int
	if err := db.QueryRowContext(ctx, `SELECT phase FROM secagg_rounds WHERE round = ?`, m.n).Scan(&phase); err != nil {
		return fmt.Errorf("coordinator: round %d's secure aggregation phase: %w", m.n, err)
	}
	rows, err := db.QueryContext(ctx, `SELECT client, kind, data FROM secagg WHERE round = ?`, m.n)
	if err != nil {
		return err
	}
	type stored struct {
		client string
		data   []byte
	}
	byKind := map[string][]stored{}
	for rows.Next() {
		var s stored
		var kind string
		if err := rows.Scan(&s.client, &kind, &s.data); err != nil {
			rows.Close()
			return err
		}
		byKind[kind] = append(byKind[kind], s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range byKind["cert"] {
		leaf, err := x509.ParseCertificate(s.data)
		if err != nil {
			return fmt.Errorf("coordinator: round %d: a stored certificate: %w", m.n, err)
		}
		id := m.ids[s.client]
		m.keys[id], m.certs[id] = leaf.PublicKey, s.data
	}
	// Replayed as received, phase by phase: the server is deterministic
	// given its messages.
	for {
		kind := maskingKinds[m.phase-1]
		for _, s := range byKind[kind] {
			var err error
			if m.phase == 3 {
				var mi masking.MaskedInput
				if err = mi.UnmarshalBinary(s.data); err == nil {
					err = m.srv.ReceiveMasked(&mi)
				}
			} else {
				err = m.replay(s.client, s.data)
			}
			if err != nil {
				return fmt.Errorf("coordinator: round %d: replaying %q's stored %s: %w", m.n, s.client, kind, err)
			}
			m.stored[m.phase-1][m.ids[s.client]] = s.data
		}
		if m.phase >= phase || m.phase > 4 {
			return nil
		}
		if err := m.next(ctx); err != nil {
			return err
		}
	}
}

// replay feeds a stored advert, shares or unmasking response to the server.
func (m *maskingRound) replay(client string, data []byte) error {
	id := m.ids[client]
	switch m.phase {
	case 1:
		var a masking.KeyAdvert
		if err := a.UnmarshalBinary(data); err != nil {
			return err
		}
		return m.srv.ReceiveAdvert(&a)
	case 2:
		_, shares, err := masking.DecodeShares(data)
		if err != nil {
			return err
		}
		return m.srv.ReceiveShares(id, shares)
	default:
		var u masking.UnmaskResponse
		if err := u.UnmarshalBinary(data); err != nil {
			return err
		}
		return m.srv.ReceiveUnmask(&u)
	}
}

// spent returns the ε client's stored ledger holds.
func (c *Coordinator) spent(ctx context.Context, client string) (float64, error) {
	var lb []byte
	if err := c.st.db.QueryRowContext(ctx, `SELECT ledger FROM clients WHERE id = ?`, client).Scan(&lb); err != nil {
		return 0, fmt.Errorf("coordinator: reading client %q's ledger: %w", client, err)
	}
	l, err := clientLedger(lb)
	if err != nil {
		return 0, err
	}
	s, err := l.Spent(client)
	return s.Epsilon, err
}
