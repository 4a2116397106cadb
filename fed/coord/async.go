package coord

// Asynchronous strategies: the coordinator serves exchanges instead of
// rounds. A client asks for work (Subscribe, then Poll after each
// exchange) and gets a ticket: a task bound to the model version it is
// based on (the current one) and, with thinning, to the units kept in the
// model served for it. It trains and sends its update on SubmitUpdate,
// which checks it as a round's update is checked (the caller's
// certificate, the payload's SHA-256, the served layout, finite values,
// the norm bound, the DP metadata against the task, the client's budget),
// and the loop folds it into the model in one transaction that also
// charges the client's ledger and records the exchange; it is
// acknowledged only after that commit, so a coordinator killed at any
// moment has lost no exchange it acknowledged. Nothing waits for anyone:
// each exchange is folded when it arrives, and a slow client's update is
// only staler. An exchange based on a version more than MaxStaleness
// versions old is refused ("stale") and changes nothing.
//
// EASGD (Irene Algorithm 1; Zhang, Choromanska & LeCun 2015): the client
// sends Δ = x − x̃_b, its parameters after its λ local steps minus the
// centre x̃_b it was served; the coordinator applies
// x̃ ← x̃ + β(x − x̃) with x = x̃_b + Δ and the current centre x̃, on the
// served (kept) units only. Each exchange is a model version.
//
// FedBuff (Nguyen et al. 2022): the update Δ waits in a buffer with the
// weight (1 + s)^−a, s its staleness; when the buffer holds K updates the
// model moves by η/K times their weighted sum (strategy.FedBuff), and the
// version advances. The buffer is stored with each exchange, and the
// write-ahead log emptied after each, as a round's running sum is.
//
// Thinning (Irene Section III.C): each ticket's model keeps each unit of
// the listed fully connected layers with probability 1 − p, drawn by a
// generator seeded from crypto/rand per ticket; the seed is kept with the
// ticket (and stored with the accepted exchange) and the update merged on
// the kept units (strategy.Thinned.Merge).
//
// Tickets live in memory (one per client: asking again replaces it); a
// restarted coordinator refuses an update of a ticket it did not issue,
// and the client asks for a new one. Under masking secure aggregation,
// FedBuff's buffers are masking rounds (asyncsec.go); EASGD and DPHE are
// refused.

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// Asynchronous strategies' names.
const (
	AsyncEASGD   = "easgd"
	AsyncFedBuff = "fedbuff"
)

// AsyncOptions makes the coordinator asynchronous (see the package's
// async.go): Options.Rounds is then the number of model versions to make
// (EASGD: accepted exchanges; FedBuff: full buffers), and the round
// settings (Fraction, MinAvailable, MinUpdates) are unused.
type AsyncOptions struct {
	// Strategy is AsyncEASGD or AsyncFedBuff.
	Strategy string
	// Beta is EASGD's moving rate β ∈ (0, 1].
	Beta float64
	// Period is EASGD's communication period λ ≥ 1: the local steps a
	// client runs between exchanges (the task's local steps).
	Period int
	// BufferSize is FedBuff's K ≥ 1.
	BufferSize int
	// MaxStaleness is the most model versions an exchange's base may be
	// behind the current model when its update is folded (≥ 0).
	MaxStaleness int
	// ServerLR is FedBuff's η (default 1) and Exponent its staleness
	// exponent a (default 0.5): strategy.FedBuffOptions.
	ServerLR, Exponent float64
	// Thin, if it lists layers, thins the model served per ticket (with
	// Drop 0 every unit is kept: the whole model, as a thinned one). With
	// Drop above 0 and no layers, the layers are the model's fully
	// connected layers but the last (FCLayers).
	Thin strategy.ThinOptions
}

func (a *AsyncOptions) validate(o *Options) error {
	switch {
	case a.Strategy != AsyncEASGD && a.Strategy != AsyncFedBuff:
		return fmt.Errorf("coordinator: asynchronous strategy %q (want %s or %s)", a.Strategy, AsyncEASGD, AsyncFedBuff)
	case a.MaxStaleness < 0:
		return fmt.Errorf("coordinator: the maximum staleness must not be negative, got %d", a.MaxStaleness)
	case !(a.Thin.Drop >= 0 && a.Thin.Drop < 1):
		return fmt.Errorf("coordinator: the dropout rate p of thinned models must be in [0, 1), got %g", a.Thin.Drop)
	}
	if a.Strategy == AsyncEASGD {
		if err := (strategy.EASGDOptions{Beta: a.Beta, Period: a.Period, LearningRate: o.Task.LearningRate}).Validate(); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		o.Task.LocalSteps, o.Task.LocalEpochs = a.Period, 0
	} else {
		// The options' own checks, on a one-value model.
		if _, err := strategy.NewFedBuff(strategy.FedBuffOptions{BufferSize: a.BufferSize, MaxStaleness: a.MaxStaleness, ServerLR: a.ServerLR,
			Exponent: a.Exponent}, wire.Weights{{Name: "x", Shape: []int{1}, Values: []float32{0}}}); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		if a.ServerLR == 0 {
			a.ServerLR = 1
		}
		if a.Exponent == 0 {
			a.Exponent = 0.5
		}
	}
	if o.SecAgg != nil || o.DPHE != nil {
		return a.validateSecure(o)
	}
	// The synchronous settings are unused: a placeholder strategy and
	// round sizes that pass their checks.
	o.Strategy = strategy.Options{Name: "fedavg", DP: o.Task.DP != nil}
	o.Fraction, o.MinAvailable, o.MinUpdates = 1, max(o.MinAvailable, 1), 1
	return nil
}

// asyncState is the asynchronous coordinator's state besides the model.
type asyncState struct {
	o AsyncOptions
	// mu guards tickets, open and next.
	mu      sync.Mutex
	tickets map[uint64]*ticket
	open    map[string]uint64 // each client's ticket
	next    uint64
	// buf is FedBuff's buffer (the loop's goroutine only).
	buf *strategy.Sum
	// closed ends drainAsync (Close).
	closed    chan struct{}
	closeOnce sync.Once
}

// ticket is one exchange offered to a client.
type ticket struct {
	n           uint64
	client      string
	base        uint64 // the model's sequence number
	baseVersion string
	served      string            // the served model's version
	seed        []byte            // thinning's seed (nil: not thinned)
	th          *strategy.Thinned // the thinned model served (nil: whole)
	cfg         *fedpb.RoundConfig
}

// stratName is the strategy recorded in the state file.
func (c *Coordinator) stratName() string {
	if c.o.secureBuffers() {
		// Not resumable as plaintext FedBuff, nor the other way round.
		return c.o.Async.Strategy + "+masking"
	}
	if c.o.Async != nil {
		return c.o.Async.Strategy
	}
	return c.strat.Name()
}

const asyncSchema = `CREATE TABLE IF NOT EXISTS async_exchanges (
		ticket INTEGER PRIMARY KEY,
		client TEXT NOT NULL,
		base INTEGER NOT NULL,
		staleness INTEGER NOT NULL,
		version INTEGER NOT NULL,
		seed BLOB,
		weight REAL NOT NULL,
		dp BLOB,
		accepted_ms INTEGER NOT NULL);
	CREATE TABLE IF NOT EXISTS async_buffer (
		id INTEGER PRIMARY KEY CHECK (id = 1),
		sum BLOB NOT NULL,
		weight REAL NOT NULL,
		count INTEGER NOT NULL);`

// restoreAsync sets up the asynchronous state from the state file: the
// model's sequence number, FedBuff's buffer, the next ticket.
func (c *Coordinator) restoreAsync() error {
	if _, err := c.st.db.Exec(asyncSchema); err != nil {
		return fmt.Errorf("coordinator: asynchronous tables: %w", err)
	}
	a := &asyncState{o: *c.o.Async, tickets: map[uint64]*ticket{}, open: map[string]uint64{}, buf: strategy.NewSum(c.model), closed: make(chan struct{})}
	var open int
	if err := c.st.db.QueryRow(`SELECT COUNT(*) FROM rounds WHERE state = 'open'`).Scan(&open); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if open > 0 {
		return errors.New("coordinator: the state file has an open synchronous round: finish it with a synchronous strategy")
	}
	var seq uint64
	if b, err := getMeta(c.st.db, "async_seq"); err != nil {
		return fmt.Errorf("coordinator: the current model's sequence number: %w", err)
	} else if len(b) == 8 {
		seq = binary.LittleEndian.Uint64(b)
	}
	if err := c.st.db.QueryRow(`SELECT COALESCE(MAX(ticket), 0) + 1 FROM async_exchanges`).Scan(&a.next); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	var sumB []byte
	err := c.st.db.QueryRow(`SELECT sum, weight, count FROM async_buffer WHERE id = 1`).Scan(&sumB, &a.buf.Weight, &a.buf.Count)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("coordinator: FedBuff's buffer: %w", err)
	default:
		if a.buf.Values, err = decodeSum(sumB, c.model.Len()); err != nil {
			return err
		}
	}
	if a.o.Thin.Drop > 0 && len(a.o.Thin.Layers) == 0 {
		if a.o.Thin.Layers = FCLayers(c.model); len(a.o.Thin.Layers) == 0 {
			return errors.New("coordinator: thinned models need fully connected layers to thin, and the model has none but its output layer")
		}
	}
	c.async = a
	c.completed = int(seq)
	c.done = c.completed >= c.o.Rounds
	return nil
}

// readAsyncPrivacy adds an asynchronous state's accepted exchanges to
// the privacy log: each is counted as a round with DP or without, with its
// task's unit and δ (nothing for a state without exchanges).
func readAsyncPrivacy(ctx context.Context, db *sql.DB, out *PrivacyLog, units map[string]bool, deltas map[float64]bool) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'async_exchanges'`).Scan(&n); err != nil || n == 0 {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT ticket, dp FROM async_exchanges ORDER BY ticket`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var t uint64
		var b []byte
		if err := rows.Scan(&t, &b); err != nil {
			return err
		}
		if b == nil {
			out.PlainRounds++
			continue
		}
		d := &fedpb.DPParams{}
		if err := proto.Unmarshal(b, d); err != nil {
			return fmt.Errorf("exchange %d's DP settings: %w", t, err)
		}
		units[d.GetPrivacyUnit()], deltas[d.GetDelta()] = true, true
		out.DPRounds++
	}
	return rows.Err()
}

// FCLayers returns the fully connected layers of model that thinning may
// drop units of (strategy.FCLayers).
func FCLayers(model wire.Weights) []strategy.FCLayer { return strategy.FCLayers(model) }

// issue offers client an exchange on the current model (nil when the run
// is over), replacing its earlier ticket.
func (c *Coordinator) issue(client string) (*fedpb.RoundConfig, error) {
	a := c.async
	c.mu.Lock()
	model, version, seq, done := c.model, c.version, uint64(c.completed), c.done
	c.lastPoll[client] = time.Now()
	seedTask := c.rng.Uint64()
	c.mu.Unlock()
	if done {
		return nil, nil
	}
	t := &ticket{client: client, base: seq, baseVersion: version, served: version}
	if len(a.o.Thin.Layers) > 0 {
		t.seed = make([]byte, 16)
		if _, err := rand.Read(t.seed); err != nil {
			return nil, err
		}
		th, err := strategy.Thin(model, a.o.Thin, seededRNG(t.seed))
		if err != nil {
			return nil, fmt.Errorf("coordinator: thinning the model: %w", err)
		}
		t.th, t.served = th, wire.Version(th.Model.Header())
	}
	o := c.o
	cfg := &fedpb.RoundConfig{ProtocolVersion: fedpb.ProtocolVersion, ModelVersion: t.served, Strategy: a.o.Strategy,
		LocalEpochs: uint32(o.Task.LocalEpochs), LocalSteps: uint32(o.Task.LocalSteps), LearningRate: o.Task.LearningRate,
		DeadlineUnixMs: time.Now().Add(o.RoundTimeout).UnixMilli(), MaxUpdateNorm: o.MaxUpdateNorm, Batch: uint32(o.Task.Batch),
		Seed: seedTask, Rounds: uint64(o.Rounds),
		Async: &fedpb.AsyncConfig{Strategy: a.o.Strategy, Beta: a.o.Beta, BufferSize: uint32(a.o.BufferSize), Base: seq,
			MaxStaleness: uint32(a.o.MaxStaleness), ThinP: a.o.Thin.Drop}}
	if o.Task.DP != nil {
		cfg.Dp = proto.Clone(o.Task.DP).(*fedpb.DPParams)
	}
	a.mu.Lock()
	t.n = a.next
	a.next++
	cfg.Round = t.n
	t.cfg = cfg
	if old, ok := a.open[client]; ok {
		delete(a.tickets, old)
	}
	a.tickets[t.n], a.open[client] = t, t.n
	a.mu.Unlock()
	return cfg, nil
}

// seededRNG is thinning's generator for a ticket's seed.
func seededRNG(seed []byte) *mrand.Rand {
	return mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:16])))
}

// ticketOf returns client's ticket n, or a refusal.
func (c *Coordinator) ticketOf(client string, n uint64, version string) (*ticket, error) {
	a := c.async
	a.mu.Lock()
	t := a.tickets[n]
	a.mu.Unlock()
	switch {
	case t == nil || t.client != client:
		return nil, refuse("stale", "exchange %d is not open for client %q (answered, replaced by a later one, or issued before the coordinator restarted): ask for a new one", n, client)
	case version != t.served:
		return nil, refuse("stale", "the update is for model %s, exchange %d served model %s", short(version), n, short(t.served))
	}
	return t, nil
}

// closeTicket ends ticket t (answered or declined).
func (c *Coordinator) closeTicket(t *ticket) {
	a := c.async
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.tickets, t.n)
	if a.open[t.client] == t.n {
		delete(a.open, t.client)
	}
}

// staleness returns how many versions t's base is behind, or a refusal
// past the limit.
func (c *Coordinator) staleness(t *ticket) (uint64, error) {
	c.mu.Lock()
	seq := uint64(c.completed)
	c.mu.Unlock()
	s := seq - t.base
	if s > uint64(c.async.o.MaxStaleness) {
		return s, refuse("stale", "exchange %d was based on model version %d, %d versions behind the current %d (the limit is %d): ask for a new exchange and train on the current model",
			t.n, t.base, s, seq, c.async.o.MaxStaleness)
	}
	return s, nil
}

// checkAsync checks an update's header against its ticket: binding,
// staleness and DP metadata (before the payload is read, and again when
// it is folded).
func (c *Coordinator) checkAsync(client string, h *fedpb.UpdateHeader) (*ticket, error) {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done {
		return nil, refuse("done", "the run is over: exchange %d came too late", h.GetRound())
	}
	t, err := c.ticketOf(client, h.GetRound(), h.GetModelVersion())
	if err != nil {
		return nil, err
	}
	if _, err := c.staleness(t); err != nil {
		return nil, err
	}
	if want := t.cfg.GetDp(); want != nil {
		got := h.GetDp()
		switch {
		case got == nil:
			return nil, refuse("dp", "exchange %d requires DP-SGD and the update states none", t.n)
		case got.GetClip() != want.GetClip() || got.GetDelta() != want.GetDelta() || got.GetPrivacyUnit() != want.GetPrivacyUnit():
			return nil, refuse("dp", "the update's clip, δ or unit differ from exchange %d's", t.n)
		case want.GetNoiseMultiplier() > 0 && got.GetNoiseMultiplier() < want.GetNoiseMultiplier():
			return nil, refuse("dp", "the update's noise multiplier is below exchange %d's", t.n)
		}
	}
	return t, nil
}

// receiveLayout returns the layout an update of client with header h must
// have and the time its buffer may wait for room until.
func (c *Coordinator) receiveLayout(client string, h *fedpb.UpdateHeader) (wire.Weights, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.async != nil {
		deadline := time.Now().Add(c.o.RoundTimeout)
		c.async.mu.Lock()
		defer c.async.mu.Unlock()
		if t := c.async.tickets[h.GetRound()]; t != nil && t.client == client && t.th != nil {
			return t.th.Model, deadline
		}
		return c.model, deadline
	}
	var deadline time.Time
	if r := c.round; r != nil {
		deadline = r.deadline
	}
	return c.model, deadline
}

// servedThinned returns the thinned model client's ticket served as
// version (nil if none).
func (c *Coordinator) servedThinned(client, version string) wire.Weights {
	if c.async == nil {
		return nil
	}
	a := c.async
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.tickets[a.open[client]]; t != nil && t.th != nil && t.served == version {
		return t.th.Model
	}
	return nil
}

// runAsync is Run for an asynchronous coordinator: it folds each exchange
// as it arrives, until Rounds model versions have been made.
func (c *Coordinator) runAsync(ctx context.Context) error {
	tick := time.NewTicker(c.tick)
	defer tick.Stop()
	for {
		c.mu.Lock()
		done := c.done
		c.mu.Unlock()
		if done {
			go c.drainAsync()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-c.queue:
			res := result{}
			res.spent, res.err = c.exchange(ctx, p)
			if p.release != nil {
				p.release()
			}
			c.answer(p, res)
		case d := <-c.declines:
			c.declineTicket(d)
		case <-c.wake:
		case <-tick.C:
			c.wipe(ctx)
			if c.tidy.Load() && !c.unwiped.Load() {
				if done, err := c.st.wipe(ctx); err == nil && done {
					c.tidy.Store(false)
				}
			}
		}
	}
}

// drainAsync refuses the updates queued once the run is over (their
// exchanges were issued before it ended), until Close.
func (c *Coordinator) drainAsync() {
	for {
		select {
		case p := <-c.queue:
			if p.release != nil {
				p.release()
			}
			c.answer(p, result{err: refuse("done", "the run is over: exchange %d came too late", p.round)})
		case d := <-c.declines:
			c.declineTicket(d)
		case <-c.async.closed:
			return
		}
	}
}

// closeAsync stops drainAsync (Close).
func (c *Coordinator) closeAsync() {
	if c.async != nil {
		c.async.closeOnce.Do(func() { close(c.async.closed) })
	}
}

// answer logs and answers an exchange's update.
func (c *Coordinator) answer(p *pending, res result) {
	if res.err != nil {
		reason := "internal"
		var rf *refusal
		if errors.As(res.err, &rf) {
			reason = rf.reason
		}
		c.o.Metrics.UpdateRefused(reason)
		c.log.Warn("exchange refused", "exchange", p.round, "client", p.client, "reason", reason)
	}
	p.reply <- res
}

// declineTicket ends the ticket a client declined (its policy, its
// budget): it is the client's business, and nothing waits for it.
func (c *Coordinator) declineTicket(d *decline) {
	a := c.async
	a.mu.Lock()
	t := a.tickets[d.round]
	a.mu.Unlock()
	if t != nil && t.client == d.client {
		c.closeTicket(t)
	}
	if wo, ok := c.o.Metrics.(WithdrawalObserver); ok {
		wo.ClientWithdrew(d.reason)
	}
	c.log.Info("exchange declined", "exchange", d.round, "client", d.client, "reason", d.reason)
	d.reply <- nil
}

// exchange folds one update into the model: checks it again against its
// ticket, the revocation list and its client's ledger, works out the next
// model (or FedBuff's buffer) and commits it with the charge and the
// exchange's record in one transaction. Every answered update ends its
// ticket.
func (c *Coordinator) exchange(ctx context.Context, p *pending) (float64, error) {
	h := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: p.round, ModelVersion: p.version, Dp: p.dp}
	t, err := c.checkAsync(p.client, h)
	if err != nil {
		return 0, err
	}
	defer c.closeTicket(t)
	if rev := c.rev.Load(); rev != nil && c.revoked(rev, p.client) {
		return 0, refuse(ReasonRevoked, "client %q's certificate is revoked", p.client)
	}
	s, err := c.staleness(t)
	if err != nil {
		return 0, err
	}
	var lb []byte
	if err := c.st.db.QueryRowContext(ctx, `SELECT ledger FROM clients WHERE id = ?`, p.client).Scan(&lb); err != nil {
		return 0, refuse("unknown_client", "client %q is not enrolled", p.client)
	}
	acc := acceptance{base: lb, ledger: lb}
	if t.cfg.GetDp() != nil {
		ch := p.charged
		if ch == nil || !bytes.Equal(ch.base, lb) {
			fresh, err := c.charge(p.client, lb, p.dp, p.update.Len())
			if err != nil {
				return 0, fmt.Errorf("coordinator: charging the update: %w", err)
			}
			ch = &fresh
		}
		if ch.refusal != nil {
			return 0, ch.refusal
		}
		acc.spent, acc.ledger, acc.ch = ch.spent, ch.ledger, ch
	}
	step, err := c.asyncStep(t, p.update, s)
	if err != nil {
		return 0, err
	}
	if err := c.commitExchange(ctx, p, t, s, acc, step); err != nil {
		return 0, fmt.Errorf("coordinator: storing the exchange: %w", err)
	}
	if acc.ch != nil && acc.ch.l != nil {
		c.ledgers.put(p.client, acc.ch.ledger, acc.ch.l)
	}
	c.o.Metrics.UpdateAccepted(p.client, p.bytes, acc.spent)
	c.log.Info("exchange accepted", "exchange", t.n, "client", p.client, "staleness", s, "version", step.seq)
	return acc.spent, nil
}

// asyncMove is what an exchange does to the model: the next model (nil
// if it stays, FedBuff's buffer not full) and buffer.
type asyncMove struct {
	next    wire.Weights
	header  *fedpb.WeightsHeader
	payload []byte
	version string
	seq     uint64 // the model's sequence number after the exchange
	buf     *strategy.Sum
	weight  float64
}

// asyncStep works out the exchange of ticket t with update (on the
// served layout) and staleness s, changing nothing.
func (c *Coordinator) asyncStep(t *ticket, update wire.Weights, s uint64) (asyncMove, error) {
	a := c.async
	c.mu.Lock()
	cur, version, seq := c.model, c.version, uint64(c.completed)
	c.mu.Unlock()
	full, mask := update, []float64(nil)
	if t.th != nil {
		var err error
		if full, err = t.th.Merge(update); err != nil {
			return asyncMove{}, refuse("shape", "%v", err)
		}
		ones := t.th.Model.Clone()
		for i := range ones {
			for j := range ones[i].Values {
				ones[i].Values[j] = 1
			}
		}
		m, err := t.th.Merge(ones)
		if err != nil {
			return asyncMove{}, err
		}
		mask = flatten(m)
	}
	if err := cur.SameLayout(full); err != nil {
		return asyncMove{}, refuse("shape", "%v", err)
	}
	mv := asyncMove{seq: seq, weight: 1}
	d := flatten(full)
	switch a.o.Strategy {
	case AsyncEASGD:
		base := cur
		if t.baseVersion != version {
			var err error
			if base, _, err = c.st.loadModel(t.baseVersion); err != nil {
				return asyncMove{}, refuse("stale", "exchange %d's base model is no longer kept", t.n)
			}
		}
		b, x := flatten(base), flatten(cur)
		for i := range x {
			if mask != nil && mask[i] == 0 {
				continue
			}
			// x̃ ← x̃ + β(x − x̃), x = x̃_b + Δ.
			x[i] += a.o.Beta * (b[i] + d[i] - x[i])
		}
		mv.next = strategy.Unflatten(cur, x)
		mv.weight = a.o.Beta
	case AsyncFedBuff:
		mv.weight = strategy.StalenessWeight(int(s), a.o.Exponent)
		mv.buf = &strategy.Sum{Layout: a.buf.Layout, Values: append([]float64(nil), a.buf.Values...), Weight: a.buf.Weight, Count: a.buf.Count}
		if err := mv.buf.Add(full, mv.weight); err != nil {
			return asyncMove{}, refuse("shape", "%v", err)
		}
		if mv.buf.Count >= a.o.BufferSize {
			x := flatten(cur)
			scale := a.o.ServerLR / float64(mv.buf.Count)
			for i := range x {
				x[i] = float64(float32(x[i] + scale*mv.buf.Values[i]))
			}
			mv.next = strategy.Unflatten(cur, x)
			mv.buf = strategy.NewSum(cur)
		}
	}
	if mv.next != nil {
		if err := mv.next.CheckFinite(); err != nil {
			return asyncMove{}, refuse("non_finite", "the exchange would make the model not finite: %v", err)
		}
		mv.seq = seq + 1
		mv.header, mv.payload = mv.next.Encode()
		mv.version = wire.Version(mv.header)
	}
	return mv, nil
}

// commitExchange stores an accepted exchange in one transaction: the
// client's ledger and count, the exchange's record, the next model (and
// the versions too old to be a base dropped) or FedBuff's buffer; then
// makes it current.
func (c *Coordinator) commitExchange(ctx context.Context, p *pending, t *ticket, s uint64, acc acceptance, mv asyncMove) error {
	a := c.async
	err := c.st.tx(ctx, func(tx *sql.Tx) error {
		if err := execOne(tx, `UPDATE clients SET ledger = ?, updates = updates + 1 WHERE id = ? AND ledger = ?`, acc.ledger, p.client, acc.base); err != nil {
			return fmt.Errorf("client %q's ledger: %w", p.client, err)
		}
		var dpB []byte
		if d := t.cfg.GetDp(); d != nil {
			var err error
			if dpB, err = proto.Marshal(d); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(`INSERT INTO async_exchanges (ticket, client, base, staleness, version, seed, weight, dp, accepted_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.n, p.client, t.base, s, mv.seq, t.seed, mv.weight, dpB, time.Now().UnixMilli()); err != nil {
			return err
		}
		if mv.next != nil {
			if err := putModel(tx, mv.version, mv.seq, mv.header, mv.payload, nil); err != nil {
				return err
			}
			if err := setMeta(tx, "model", []byte(mv.version)); err != nil {
				return err
			}
			if err := setMeta(tx, "async_seq", binary.LittleEndian.AppendUint64(nil, mv.seq)); err != nil {
				return err
			}
			// A version more than MaxStaleness behind can be no exchange's
			// base (the initial model, round 0, is kept: the privacy
			// record names it).
			if _, err := tx.Exec(`DELETE FROM models WHERE round > 0 AND round < ? AND version != ?`, int64(mv.seq)-int64(a.o.MaxStaleness), mv.version); err != nil {
				return err
			}
		}
		if mv.buf != nil {
			if mv.buf.Count == 0 {
				_, err := tx.Exec(`DELETE FROM async_buffer`)
				return err
			}
			_, err := tx.Exec(`INSERT INTO async_buffer (id, sum, weight, count) VALUES (1, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET sum = excluded.sum, weight = excluded.weight, count = excluded.count`,
				appendSum(nil, mv.buf.Values), mv.buf.Weight, mv.buf.Count)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if mv.buf != nil {
		// The log holds the buffer before and after this update: emptied
		// before the client is told, as a round's running sum is.
		c.unwiped.Store(true)
		c.wipe(ctx)
		a.buf = mv.buf
	} else {
		c.tidy.Store(true)
	}
	if mv.next != nil {
		c.mu.Lock()
		c.model, c.version, c.completed = mv.next, mv.version, int(mv.seq)
		c.encoded.version, c.encoded.header, c.encoded.payload = mv.version, mv.header, mv.payload
		c.done = c.completed >= c.o.Rounds
		c.notifyLocked()
		c.mu.Unlock()
		c.o.Metrics.RoundClosed("done", time.Since(p.arrived), 0)
	}
	return nil
}

// flatten returns w's values as float64, in order.
func flatten(w wire.Weights) []float64 {
	out := make([]float64, 0, w.Len())
	for _, t := range w {
		for _, v := range t.Values {
			out = append(out, float64(v))
		}
	}
	return out
}

// pollAsync answers Poll with a new exchange, or the end of the run.
func (c *Coordinator) pollAsync(client string) (*fedpb.PollResponse, error) {
	cfg, err := c.issue(client)
	if err != nil {
		return nil, err
	}
	resp := &fedpb.PollResponse{ProtocolVersion: fedpb.ProtocolVersion}
	if cfg == nil {
		c.mu.Lock()
		resp.Reply = &fedpb.PollResponse_Done{Done: fmt.Sprintf("the run is over after %d model versions", c.completed)}
		c.mu.Unlock()
		return resp, nil
	}
	resp.Reply = &fedpb.PollResponse_Task{Task: cfg}
	return resp, nil
}

// subscribeAsync serves an asynchronous coordinator's Subscribe: the
// client's first exchange (it asks for the next ones, and learns that the
// run is over, with Poll), or the end of the run if it is over. The
// stream then stays open, keeping the client available, until the client
// closes it.
func (s *service) subscribeAsync(ctx context.Context, stream grpc.ServerStreamingServer[fedpb.Push], id string) error {
	c := s.c
	cfg, err := c.issue(id)
	if err != nil {
		return err
	}
	push := &fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Task{Task: cfg}}
	if cfg == nil {
		c.mu.Lock()
		push.Msg = &fedpb.Push_Done{Done: fmt.Sprintf("the run is over after %d model versions", c.completed)}
		c.mu.Unlock()
	}
	if err := stream.Send(push); err != nil {
		return err
	}
	if cfg == nil {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
