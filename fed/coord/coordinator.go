// Package coord is the federation's coordinator: it holds the shared model,
// runs rounds (selects clients, pushes the round's task on each selected
// client's stream the moment the round opens, folds accepted updates into
// a running sum, and aggregates in the transaction that commits the last
// expected update, or at the deadline for stragglers), keeps every
// client's privacy ledger and refuses what would take a client past its
// budget, and serves all of it over gRPC with mutual TLS. Its whole state
// lives in one SQLite file, changed one transaction at a time, so a
// coordinator killed at any moment continues where it stopped.
//
// A round under DP selects only clients enrolled with its privacy unit
// (and a client declaring another unit is refused when it joins), so no
// round per example runs on a budget that protects identities, nor the
// other way round.
//
// An update is accepted only if it is bound to the open round, the model
// version of that round and a client selected for it that has not been
// counted yet; its DP metadata match the round's settings and fit the
// client's budget; and its tensors have the model's names and shapes,
// finite values and a norm within the bound. Anything else is refused with
// a reason and changes nothing. Update values are never logged.
//
// A selected client that refuses a round (its budget, its owner's policy)
// says so (Decline), and a selected client whose certificate is revoked
// is noticed at the loop's next step: either ends its part in the round
// at once, is logged with the reason and kept in the state file, and the
// round closes as soon as every selected client has been counted or has
// withdrawn, without waiting for the deadline (a round left with fewer
// updates than it needs fails then).
package coord

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// Task is what every selected client is asked to do in a round.
type Task struct {
	LocalEpochs  int
	LocalSteps   int
	LearningRate float64
	Batch        int
	// DP, if non-nil, is the DP-SGD clients must run: Clip, Delta and
	// Unit are fixed; NoiseMultiplier 0 lets each client calibrate its own
	// noise to its budget over the planned rounds.
	DP *fedpb.DPParams
}

// Options configures a coordinator.
type Options struct {
	// StatePath is the SQLite file of the coordinator's state.
	StatePath string
	// Init is the initial model, used when the state file is new; a state
	// file that already holds a model ignores it.
	Init     wire.Weights
	Strategy strategy.Options
	// Rounds is the number of rounds to run (successful or failed).
	Rounds int
	// Fraction of the available clients selected per round, in (0, 1].
	Fraction float64
	// MinAvailable clients must be available before a round starts.
	MinAvailable int
	// MinUpdates is the least number of accepted updates a round needs to
	// be aggregated; fewer by the deadline fail the round.
	MinUpdates int
	// RoundTimeout is a round's deadline after its start.
	RoundTimeout time.Duration
	Task         Task
	// MaxUpdateNorm bounds an update's L2 norm (required, > 0).
	MaxUpdateNorm float64
	// Available is how recently a client must have polled, or had its
	// Subscribe stream open, to count as available (default 10 s); a
	// client whose stream is open is available.
	Available time.Duration
	// StreamIdle ends an update stream that sends nothing for this long,
	// header or payload (default DefaultStreamIdle), so a stalled client
	// holds no buffer.
	StreamIdle time.Duration
	// ReceiveBudget bounds the bytes held, over all streams, by the
	// buffers of updates being received or waiting to be folded (default
	// DefaultReceiveBudget, or one update's payload if that is more; at
	// least one update's payload). A stream that would go over waits,
	// in order of arrival, until its round's deadline, then is refused
	// ("busy"). Each client may have one update stream open at a time.
	ReceiveBudget int64
	// Logger receives structured logs (default: discard).
	Logger *slog.Logger
	// Metrics, if non-nil, is told what happens.
	Metrics Observer
	// SecAgg, if non-nil, makes every round securely aggregated: the
	// coordinator never holds an individual update in plaintext (see
	// SecAggOptions and secagg.go).
	SecAgg *SecAggOptions
	// DPHE, if non-nil, makes every round a DPHE round (dphe.go).
	DPHE *DPHEOptions
	// Async, if non-nil, makes the coordinator asynchronous: it serves
	// exchanges (EASGD, FedBuff) instead of rounds (async.go).
	Async *AsyncOptions
}

// Observer is told of the coordinator's events (metrics).
type Observer interface {
	RoundClosed(state string, d time.Duration, aggregation time.Duration)
	UpdateAccepted(client string, bytes int, spentEpsilon float64)
	UpdateRefused(reason string)
	BytesOut(n int)
}

// RoundTiming is where a closed round's time went, as the coordinator
// saw it. Times are the wall clock's.
type RoundTiming struct {
	Round uint64
	// Started is when the round opened (when this process restored it,
	// after a restart); Closed when its close was committed.
	Started, Closed time.Time
	// LastArrival is when the last update counted in the round was
	// received whole (read, hashed and checked, before it was queued);
	// zero if none was counted by this process.
	LastArrival time.Time
	// Fold is the time the round's folds spent checking, charging and
	// adding updates to the running sum and writing it (their transactions
	// up to the commit); Commit the time of those commits and of the
	// write-ahead log's wipes after them.
	Fold, Commit time.Duration
	// Close is the time closing the round took: aggregation, its
	// transaction and the wipe.
	Close time.Duration
}

// TimingObserver is an Observer that is also told, for each closed
// round, where its time went (veil bench fed).
type TimingObserver interface {
	RoundTimed(RoundTiming)
}

// WithdrawalObserver is an Observer that is also told of each selected
// client's withdrawal from a round, with its reason: the one the client
// gave when it declined (ValidReason holds it to a setting's name), or
// ReasonRevoked. It is called once per client and round, after the
// withdrawal is recorded in the state file.
type WithdrawalObserver interface {
	ClientWithdrew(reason string)
}

type nopObserver struct{}

func (nopObserver) RoundClosed(string, time.Duration, time.Duration) {}
func (nopObserver) UpdateAccepted(string, int, float64)              {}
func (nopObserver) UpdateRefused(string)                             {}
func (nopObserver) BytesOut(int)                                     {}

func (o *Options) validate() error {
	if o.StatePath == "" {
		return errors.New("coordinator: a state file is required")
	}
	if o.Async != nil {
		if err := o.Async.validate(o); err != nil {
			return err
		}
	}
	if _, err := strategy.New(o.Strategy); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if o.Rounds < 1 {
		return fmt.Errorf("coordinator: rounds must be at least 1, got %d", o.Rounds)
	}
	if !(o.Fraction > 0 && o.Fraction <= 1) {
		return fmt.Errorf("coordinator: fraction of clients per round must be in (0, 1], got %g", o.Fraction)
	}
	if o.MinUpdates < 1 {
		return fmt.Errorf("coordinator: the minimum number of updates to aggregate must be at least 1, got %d", o.MinUpdates)
	}
	if o.MinAvailable < o.MinUpdates {
		return fmt.Errorf("coordinator: minimum available clients (%d) is below the minimum to aggregate (%d)", o.MinAvailable, o.MinUpdates)
	}
	if o.RoundTimeout <= 0 {
		return errors.New("coordinator: the round timeout must be positive")
	}
	if !(o.MaxUpdateNorm > 0) || math.IsInf(o.MaxUpdateNorm, 0) {
		return fmt.Errorf("coordinator: the update norm bound must be positive and finite, got %g", o.MaxUpdateNorm)
	}
	t := o.Task
	if t.LocalEpochs < 0 || t.LocalSteps < 0 || (t.LocalEpochs == 0 && t.LocalSteps == 0) {
		return errors.New("coordinator: the task needs local epochs or local steps")
	}
	if !(t.LearningRate > 0) || t.Batch < 1 {
		return fmt.Errorf("coordinator: the task needs a learning rate > 0 and a batch ≥ 1, got %g and %d", t.LearningRate, t.Batch)
	}
	if d := t.DP; d != nil {
		if !(d.GetClip() > 0) || !(d.GetDelta() > 0 && d.GetDelta() < 1) || d.GetNoiseMultiplier() < 0 {
			return errors.New("coordinator: DP settings need clip > 0, δ in (0, 1) and a noise multiplier ≥ 0")
		}
		if u := d.GetPrivacyUnit(); u != "identity" && u != "example" {
			return fmt.Errorf("coordinator: privacy unit %q (want identity or example)", u)
		}
	}
	if o.SecAgg != nil {
		if err := o.SecAgg.validate(o); err != nil {
			return err
		}
	}
	if o.DPHE != nil {
		if err := o.DPHE.validate(o); err != nil {
			return err
		}
	}
	if o.Available == 0 {
		o.Available = 10 * time.Second
	}
	if o.StreamIdle < 0 || o.ReceiveBudget < 0 {
		return fmt.Errorf("coordinator: the stream idle timeout (%s) and the receive budget (%d bytes) must not be negative", o.StreamIdle, o.ReceiveBudget)
	}
	if o.StreamIdle == 0 {
		o.StreamIdle = DefaultStreamIdle
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = nopObserver{}
	}
	return nil
}

// Coordinator runs a federation.
type Coordinator struct {
	o     Options
	st    *store
	strat strategy.Strategy
	log   *slog.Logger

	queue chan *pending
	// declines carries Decline's requests to the loop, which records
	// them between folds.
	declines chan *decline
	// rev is the revocation list the service consults (Service), also
	// consulted for the open round's selected clients.
	rev atomic.Pointer[pki.Revocations]
	// serials holds the serial numbers of the certificates each client
	// was seen with (by its name), so that a revoked client that no longer
	// calls is recognised.
	serialsMu sync.Mutex
	serials   map[string]map[string]*big.Int
	// joinedWith is each client's serial number as stored (the
	// certificate it last joined with).
	joinedWith map[string]string
	// receiving counts the updates being received (not yet queued).
	receiving atomic.Int64
	ledgers   ledgerCache
	// curves holds the Rényi curves of the DP settings clients ran, shared
	// by every client's ledger: clients of one federation mostly run the
	// same settings, so a charge rarely computes a curve.
	curves *dp.CurveCache
	// payloads recycles the buffers updates are received into.
	payloads bufferPool
	// budget bounds the bytes of those buffers held at once.
	budget *receiveBudget
	// streams holds the clients with an update stream open (one each).
	streamsMu sync.Mutex
	streams   map[string]bool
	// spare and encoded sum are the fold goroutine's scratch: the copy of
	// the running sum a batch is added to, and its bytes as stored.
	spare      []float64
	encodedSum []byte
	// freeSum is the values of the last closed round's sum, which the
	// next round's sum reuses (cleared) instead of a new 4.5 MB.
	freeSum []float64
	// unwiped is set while the write-ahead log may hold a running sum
	// other than the current one (see store.wipe); the loop retries.
	unwiped atomic.Bool
	// tidy is set while the write-ahead log holds no running sum but has
	// not been emptied since a round closed: the loop empties it at its
	// next tick, off the path of a round.
	tidy atomic.Bool

	// wake, poked by Join, Subscribe and Decline, makes the loop take its
	// next step at once rather than at its tick (tick, every 50 ms by
	// default, is left to notice deadlines and revocations).
	wake chan struct{}
	tick time.Duration
	// onSecureSum, set by tests, is shown each secure round's unmasked
	// sum (the aggregate, before decoding).
	onSecureSum func(round uint64, sum []uint32)
	// async is the asynchronous strategies' state (nil: rounds).
	async *asyncState

	mu sync.Mutex
	// changed is closed (and replaced) whenever a round opens or closes
	// or the run ends: every Subscribe stream waits on it.
	changed chan struct{}
	// subs counts each client's open Subscribe streams: a client with one
	// is available.
	subs      map[string]int
	model     wire.Weights // current model
	version   string
	stratSt   wire.Weights
	round     *openRound // nil between rounds
	completed int        // rounds closed (done or failed)
	lastPoll  map[string]time.Time
	done      bool
	rng       *mrand.Rand
	// encoded is the current model as sent to clients (encodedModel).
	encoded struct {
		version string
		header  *fedpb.WeightsHeader
		payload []byte
	}
}

type openRound struct {
	n        uint64
	cfg      *fedpb.RoundConfig
	deadline time.Time
	selected map[string]bool
	counted  map[string]bool
	// withdrawn holds the selected clients that declined the round or
	// were revoked, with the reason; the round waits for them no more.
	withdrawn map[string]string
	// Where the round's time went (RoundTiming), c.mu held.
	lastArrival          time.Time
	foldTime, commitTime time.Duration
	sum                  *strategy.Sum
	started              time.Time
	// sumStored is set once a running sum of the round has been written
	// to the state file (a batch that left the round open); only the
	// loop's goroutine reads or sets it.
	sumStored bool
	// sec, in a securely aggregated round, runs the aggregation; sum
	// then stays empty.
	sec secureRound
}

type pending struct {
	client   string
	round    uint64
	version  string
	update   wire.Weights
	examples uint64
	dp       *fedpb.DPParams
	bytes    int
	// charged, if set, is the charge worked out before queueing.
	charged *charged
	reply   chan result
	// release, if set, gives the update's buffer back once the fold has
	// answered (it reads update until then).
	release func()
	// arrived is when the update was received whole.
	arrived time.Time
}

type result struct {
	spent float64
	err   error
}

// New opens (or creates) the state file and restores the coordinator:
// the current model, the open round with its running sum and the clients
// already counted, and the ledgers.
func New(o Options) (*Coordinator, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	strat, err := strategy.New(o.Strategy)
	if err != nil {
		return nil, err
	}
	st, err := openStore(o.StatePath)
	if err != nil {
		return nil, err
	}
	var seed [16]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	curves, err := dp.NewCurveCache(nil, 0)
	if err != nil {
		st.close()
		return nil, err
	}
	c := &Coordinator{o: o, st: st, strat: strat, log: o.Logger, queue: make(chan *pending, 256), curves: curves,
		declines: make(chan *decline), wake: make(chan struct{}, 1), tick: 50 * time.Millisecond,
		changed: make(chan struct{}), subs: map[string]int{}, serials: map[string]map[string]*big.Int{}, joinedWith: map[string]string{},
		lastPoll: map[string]time.Time{}, streams: map[string]bool{},
		rng: mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))}
	if err := c.restore(); err != nil {
		st.close()
		return nil, err
	}
	if o.asyncExchanges() {
		if err := c.restoreAsync(); err != nil {
			st.close()
			return nil, err
		}
	}
	if err := c.restoreDDP(); err != nil {
		st.close()
		return nil, err
	}
	one := int64(4 * c.model.Len())
	switch {
	case o.ReceiveBudget == 0:
		c.budget = newReceiveBudget(max(DefaultReceiveBudget, one))
	case o.ReceiveBudget < one:
		st.close()
		return nil, fmt.Errorf("coordinator: the receive budget of %d bytes is below one update's payload (%d bytes)", o.ReceiveBudget, one)
	default:
		c.budget = newReceiveBudget(o.ReceiveBudget)
	}
	// A coordinator stopped mid-round may have left earlier sums in the log.
	c.unwiped.Store(true)
	c.wipe(context.Background())
	return c, nil
}

// Close closes the state file.
func (c *Coordinator) Close() error {
	c.closeAsync()
	return c.st.close()
}

func (c *Coordinator) restore() error {
	cur, err := getMeta(c.st.db, "model")
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if cur == nil {
		if c.o.Init == nil {
			return errors.New("coordinator: the state file is new and no initial model was given")
		}
		if err := c.o.Init.Validate(); err != nil {
			return fmt.Errorf("coordinator: initial model: %w", err)
		}
		if err := c.o.Init.CheckFinite(); err != nil {
			return fmt.Errorf("coordinator: initial model: %w", err)
		}
		h, payload := c.o.Init.Encode()
		v := wire.Version(h)
		err := c.st.tx(context.Background(), func(tx *sql.Tx) error {
			if err := putModel(tx, v, 0, h, payload, nil); err != nil {
				return err
			}
			if err := setMeta(tx, "strategy", []byte(c.stratName())); err != nil {
				return err
			}
			return setMeta(tx, "model", []byte(v))
		})
		if err != nil {
			return fmt.Errorf("coordinator: initialising the state file: %w", err)
		}
		cur = []byte(v)
	} else if s, _ := getMeta(c.st.db, "strategy"); string(s) != c.stratName() {
		return fmt.Errorf("coordinator: the state file was run with strategy %q, not %q", s, c.stratName())
	}
	c.version = string(cur)
	if c.model, c.stratSt, err = c.st.loadModel(c.version); err != nil {
		return err
	}
	var completed int
	if err := c.st.db.QueryRow(`SELECT COUNT(*) FROM rounds WHERE state != 'open'`).Scan(&completed); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.completed = completed
	if err := c.restoreSerials(); err != nil {
		return err
	}
	// The open round, if any, continues with its sum and counted set.
	var (
		n                uint64
		cfgB, sumB       []byte
		deadline         int64
		weight           float64
		updates          int
		version          string
		rowsErr          error
		selected, counts = map[string]bool{}, map[string]bool{}
		withdrawn        = map[string]string{}
	)
	err = c.st.db.QueryRow(`SELECT round, config, deadline_ms, sum, sum_weight, updates, model_version FROM rounds WHERE state = 'open'`).
		Scan(&n, &cfgB, &deadline, &sumB, &weight, &updates, &version)
	if errors.Is(err, sql.ErrNoRows) {
		c.done = c.completed >= c.o.Rounds
		return nil
	}
	if err != nil {
		return fmt.Errorf("coordinator: reading the open round: %w", err)
	}
	if version != c.version {
		return fmt.Errorf("coordinator: the open round %d is on model %s but the current model is %s", n, short(version), short(c.version))
	}
	cfg := &fedpb.RoundConfig{}
	if err := proto.Unmarshal(cfgB, cfg); err != nil {
		return fmt.Errorf("coordinator: round %d config: %w", n, err)
	}
	rows, err := c.st.db.Query(`SELECT client, counted, withdrawn FROM round_clients WHERE round = ?`, n)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	for rows.Next() {
		var id, why string
		var counted bool
		if err := rows.Scan(&id, &counted, &why); err != nil {
			rowsErr = err
			break
		}
		selected[id] = true
		if counted {
			counts[id] = true
		}
		if why != "" {
			withdrawn[id] = why
		}
	}
	rows.Close()
	if rowsErr != nil {
		return fmt.Errorf("coordinator: %w", rowsErr)
	}
	sum := strategy.NewSum(c.model)
	if sumB != nil {
		if sum.Values, err = decodeSum(sumB, c.model.Len()); err != nil {
			return err
		}
	}
	sum.Weight, sum.Count = weight, updates
	if updates != len(counts) {
		return fmt.Errorf("coordinator: round %d has %d updates but %d clients counted", n, updates, len(counts))
	}
	c.round = &openRound{n: n, cfg: cfg, deadline: time.UnixMilli(deadline), selected: selected, counted: counts, withdrawn: withdrawn, sum: sum, started: time.Now(),
		sumStored: sumB != nil}
	if sa := cfg.GetSecagg(); sa != nil {
		if c.o.SecAgg == nil {
			return fmt.Errorf("coordinator: the open round %d is securely aggregated (%s): restart with the same secure aggregation", n, sa.GetMode())
		}
		m, err := c.maskingFromConfig(n, sa, cfg.GetModelVersion(), time.UnixMilli(deadline))
		if err == nil {
			err = m.restore(context.Background(), c.st.db)
		}
		if err != nil {
			return err
		}
		c.round.sec = m
	}
	if dc := cfg.GetDphe(); dc != nil {
		d, err := c.restoreDPHE(context.Background(), n, dc, selected, time.UnixMilli(deadline))
		if err != nil {
			return err
		}
		c.round.sec = d
	}
	c.log.Info("continuing the open round", "round", n, "updates", updates, "selected", len(selected), "withdrawn", len(withdrawn))
	return nil
}

func short(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

// Run runs rounds until the configured number have closed or ctx ends.
// It returns nil when every round has closed.
func (c *Coordinator) Run(ctx context.Context) error {
	if c.async != nil {
		return c.runAsync(ctx)
	}
	tick := time.NewTicker(c.tick)
	defer tick.Stop()
	for {
		c.mu.Lock()
		done := c.done
		c.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-c.queue:
			c.foldArrivals(ctx, p)
		case d := <-c.declines:
			d.reply <- c.withdraw(ctx, d.round, d.client, d.reason)
		case <-c.wake:
		case <-tick.C:
			if c.tidy.Load() && !c.unwiped.Load() {
				if done, err := c.st.wipe(ctx); err == nil && done {
					c.tidy.Store(false)
				}
			}
		}
		if err := c.advance(ctx); err != nil {
			return err
		}
	}
}

// Group commit: every transaction that folds updates rewrites the open
// round's running sum (8 bytes per value: 4.5 MB for the embedding head,
// with its write-ahead log, checkpoint and zeroed pages tens of
// milliseconds), so the cost per update falls with the number of updates
// per transaction, and a round whose updates all arrive together closes
// in one transaction with no running sum written at all. A batch takes
// what is queued and, while other updates are still being received,
// waits for them, up to maxBatch updates or maxBatchWait after the
// first. Each update is checked, charged and added to the batch's copy of
// the sum as it arrives (its buffer then goes back at once), so waiting
// costs the updates already in the batch only the latency of their
// answer: none is acknowledged before the transaction holding it commits.
const (
	maxBatch     = 256
	maxBatchWait = time.Second
)

// gather takes first, then what arrives while updates are being
// received, handing each to add (in order of arrival) until add reports
// that the batch is complete (the round needs nothing more), maxBatch
// updates or maxBatchWait after the call.
func (c *Coordinator) gather(first *pending, add func(*pending) (complete bool)) {
	if add(first) {
		return
	}
	var timeout <-chan time.Time
	for n := 1; n < maxBatch; n++ {
		var q *pending
		select {
		case q = <-c.queue:
		default:
		}
		if q == nil {
			if c.receiving.Load() == 0 {
				return
			}
			if timeout == nil {
				t := time.NewTimer(maxBatchWait)
				defer t.Stop()
				timeout = t.C
			}
			select {
			case q = <-c.queue:
			case <-timeout:
				return
			}
		}
		if add(q) {
			return
		}
	}
}

// foldArrivals folds first and the updates arriving with it (gather) in
// one transaction.
func (c *Coordinator) foldArrivals(ctx context.Context, first *pending) {
	b := c.newBatch()
	c.gather(first, func(p *pending) bool { return c.admit(ctx, b, p) })
	c.commit(ctx, b)
}

// wipe empties the state file's write-ahead log if it may hold a running
// sum other than the current one (store.wipe); if a reader keeps it from
// doing so, the loop tries again at its next tick.
func (c *Coordinator) wipe(ctx context.Context) {
	if !c.unwiped.Load() {
		return
	}
	done, err := c.st.wipe(ctx)
	if err != nil {
		c.log.Warn("the state file's write-ahead log could not be emptied; retrying", "err", err)
		return
	}
	if done {
		c.unwiped.Store(false)
		c.tidy.Store(false)
	}
}

// advance closes the open round when it is complete or past its
// deadline, and starts the next one when enough clients are available.
func (c *Coordinator) advance(ctx context.Context) error {
	c.wipe(ctx)
	c.mu.Lock()
	r := c.round
	c.mu.Unlock()
	now := time.Now()
	if r != nil {
		if err := c.dropRevoked(ctx, r); err != nil {
			return err
		}
		if r.sec != nil {
			if done, err := r.sec.step(ctx, now); err != nil || !done {
				return err
			}
		} else if c.waitingFor(r) > 0 && now.Before(r.deadline) {
			return nil
		}
		// The next round starts in the same step, without waiting for a
		// tick.
		if err := c.closeRound(ctx, r); err != nil {
			return err
		}
	}
	c.mu.Lock()
	if c.completed >= c.o.Rounds {
		if !c.done {
			c.done = true
			c.notifyLocked()
		}
		c.mu.Unlock()
		return nil
	}
	var avail []string
	for id, t := range c.lastPoll {
		if now.Sub(t) <= c.o.Available || c.subs[id] > 0 {
			avail = append(avail, id)
		}
	}
	c.mu.Unlock()
	if len(avail) < c.o.MinAvailable {
		return nil
	}
	if d := c.o.Task.DP; d != nil {
		var err error
		if avail, err = c.withUnit(ctx, avail, d.GetPrivacyUnit()); err != nil {
			return err
		}
		if len(avail) < c.o.MinAvailable {
			return nil
		}
	}
	return c.startRound(ctx, avail)
}

// withUnit returns the clients of ids enrolled with privacy unit unit: a
// round per example is never run on a client whose budget protects
// identities, nor the other way round, whatever the client would do.
func (c *Coordinator) withUnit(ctx context.Context, ids []string, unit string) ([]string, error) {
	rows, err := c.st.db.QueryContext(ctx, `SELECT id FROM clients WHERE unit = ?`, unit)
	if err != nil {
		return nil, fmt.Errorf("coordinator: reading the clients' units: %w", err)
	}
	defer rows.Close()
	same := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("coordinator: reading the clients' units: %w", err)
		}
		same[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("coordinator: reading the clients' units: %w", err)
	}
	return slices.DeleteFunc(ids, func(id string) bool { return !same[id] }), nil
}

func (c *Coordinator) startRound(ctx context.Context, avail []string) error {
	sort.Strings(avail)
	k := max(c.o.MinUpdates, int(math.Ceil(c.o.Fraction*float64(len(avail)))))
	k = c.roundSize(min(k, len(avail)), len(avail))
	if d := c.ddpOptions(); d != nil {
		k = min(k, d.Plan.Clients) // the plan's wrap bound
	}
	c.mu.Lock()
	c.rng.Shuffle(len(avail), func(i, j int) { avail[i], avail[j] = avail[j], avail[i] })
	sel := slices.Clone(avail[:k])
	n := uint64(c.completed + 1)
	var last uint64
	if err := c.st.db.QueryRow(`SELECT COALESCE(MAX(round), 0) FROM rounds`).Scan(&last); err == nil && last >= n {
		n = last + 1
	}
	deadline := time.Now().Add(c.o.RoundTimeout)
	t := c.o.Task
	cfg := &fedpb.RoundConfig{
		ProtocolVersion: fedpb.ProtocolVersion, Round: n, ModelVersion: c.version, Strategy: c.roundStrategy(),
		LocalEpochs: uint32(t.LocalEpochs), LocalSteps: uint32(t.LocalSteps), LearningRate: t.LearningRate,
		DeadlineUnixMs: deadline.UnixMilli(), MaxUpdateNorm: c.o.MaxUpdateNorm, Batch: uint32(t.Batch),
		Seed: c.rng.Uint64(), Rounds: uint64(c.o.Rounds),
	}
	if t.DP != nil {
		cfg.Dp = proto.Clone(t.DP).(*fedpb.DPParams)
	}
	c.mu.Unlock()
	var sec *maskingRound
	if c.o.SecAgg != nil {
		var err error
		if sec, err = c.beginMasking(n, sel, cfg.ModelVersion, time.Now(), deadline); err != nil {
			return fmt.Errorf("coordinator: starting round %d: %w", n, err)
		}
		cfg.Secagg = sec.cfg
	}
	var dr *dpheRound
	if c.o.DPHE != nil {
		var err error
		if dr, err = c.beginDPHE(ctx, n, sel, deadline); err != nil {
			return fmt.Errorf("coordinator: starting round %d: %w", n, err)
		}
		cfg.Dphe = dr.cfg
	}
	cfgB, err := proto.Marshal(cfg)
	if err != nil {
		return err
	}
	err = c.st.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO rounds (round, state, model_version, config, deadline_ms) VALUES (?, 'open', ?, ?, ?)`,
			n, cfg.ModelVersion, cfgB, deadline.UnixMilli()); err != nil {
			return err
		}
		for _, id := range sel {
			if _, err := tx.Exec(`INSERT INTO round_clients (round, client) VALUES (?, ?)`, n, id); err != nil {
				return err
			}
		}
		if sec != nil {
			return sec.begin(tx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("coordinator: starting round %d: %w", n, err)
	}
	r := &openRound{n: n, cfg: cfg, deadline: deadline, selected: map[string]bool{}, counted: map[string]bool{}, withdrawn: map[string]string{},
		sum: c.newSum(), started: time.Now()}
	if sec != nil {
		r.sec = sec
	}
	if dr != nil {
		r.sec = dr
	}
	for _, id := range sel {
		r.selected[id] = true
	}
	c.mu.Lock()
	c.round = r
	c.notifyLocked()
	c.mu.Unlock()
	c.log.Info("round started", "round", n, "selected", len(sel), "available", len(avail), "model", short(cfg.ModelVersion))
	return nil
}

func (c *Coordinator) closeRound(ctx context.Context, r *openRound) error {
	closeStart := time.Now()
	c.mu.Lock()
	counted, withdrawn := len(r.counted), 0
	for id := range r.withdrawn {
		if !r.counted[id] {
			withdrawn++
		}
	}
	sum := r.sum
	c.mu.Unlock()
	var cl closing
	if r.sec != nil {
		cl, sum = c.closeSecure(r, withdrawn)
	} else {
		cl = c.aggregate(r, sum, counted, withdrawn)
	}
	err := c.st.tx(ctx, func(tx *sql.Tx) error {
		if r.sec != nil {
			if err := r.sec.erase(tx); err != nil {
				return err
			}
		}
		return c.closeTx(tx, r, sum, cl)
	})
	if err != nil {
		if cl.ddpState != nil {
			// The server stepped but the close was not stored: back to
			// the stored state of the current model.
			err = errors.Join(err, c.restoreDDP())
		}
		return fmt.Errorf("coordinator: closing round %d: %w", r.n, err)
	}
	// The round's sum is gone from the database (its pages zeroed); the
	// log still holds it until wiped.
	c.unwiped.Store(true)
	c.wipe(ctx)
	c.closed(r, cl, closeStart)
	return nil
}

// closing is what closing a round does: its outcome and next model.
type closing struct {
	state, reason   string
	next, nextState wire.Weights
	// ddpState is the server optimiser's state after a distributed
	// DP-SGD step (stored with next).
	ddpState []byte
	// header and payload are next encoded, version its id.
	header             *fedpb.WeightsHeader
	payload            []byte
	version            string
	agg                time.Duration
	counted, withdrawn int
}

// aggregate works out the close of r with the running sum sum, counted
// updates and withdrawn clients (nothing stored).
func (c *Coordinator) aggregate(r *openRound, sum *strategy.Sum, counted, withdrawn int) closing {
	start := time.Now()
	cl := closing{state: "done", counted: counted, withdrawn: withdrawn}
	if counted < c.o.MinUpdates {
		cl.state = "failed"
		cl.reason = fmt.Sprintf("%d of the %d updates needed arrived by the deadline", counted, c.o.MinUpdates)
		if withdrawn > 0 {
			cl.reason = fmt.Sprintf("%d of the %d updates needed arrived; %d of the %d clients selected withdrew (declined or revoked)",
				counted, c.o.MinUpdates, withdrawn, len(r.selected))
		}
	} else {
		var err error
		if d := c.ddpOptions(); d != nil && r.sec != nil {
			cl.next, cl.nextState, cl.ddpState, err = c.ddpStep(d, sum)
		} else if fused, ok := c.strat.(strategy.SumApplier); ok {
			cl.next, cl.nextState, err = fused.ApplySum(c.model, sum, c.stratSt)
		} else {
			var mean wire.Weights
			mean, err = sum.Mean()
			if err == nil {
				cl.next, cl.nextState, err = c.strat.Apply(c.model, mean, sum.Count, c.stratSt)
			}
		}
		if err == nil {
			err = cl.next.CheckFinite()
		}
		if err != nil {
			cl.state, cl.reason, cl.next = "failed", "aggregation: "+err.Error(), nil
		}
	}
	if cl.next != nil {
		// Encoded once: the bytes stored are the bytes every client
		// downloads (closed makes them the broadcast's).
		cl.header, cl.payload = cl.next.Encode()
		cl.version = wire.Version(cl.header)
	}
	cl.agg = time.Since(start)
	return cl
}

// closeTx stores the close of r in tx: the next model, and the round's
// outcome and count without its running sum.
func (c *Coordinator) closeTx(tx *sql.Tx, r *openRound, sum *strategy.Sum, cl closing) error {
	if cl.next != nil {
		if err := putModel(tx, cl.version, r.n, cl.header, cl.payload, cl.nextState); err != nil {
			return err
		}
		if err := setMeta(tx, "model", []byte(cl.version)); err != nil {
			return err
		}
		if cl.ddpState != nil {
			if err := putDDPState(tx, cl.version, cl.ddpState); err != nil {
				return err
			}
		}
	}
	_, err := tx.Exec(`UPDATE rounds SET state = ?, reason = ?, sum = NULL, sum_weight = ?, updates = ? WHERE round = ? AND state = 'open'`,
		cl.state, cl.reason, sum.Weight, sum.Count, r.n)
	return err
}

// closed makes a close stored (and wiped) current: the next model, the
// next round, the streams told, the metrics and the log.
func (c *Coordinator) closed(r *openRound, cl closing, closeStart time.Time) {
	c.mu.Lock()
	if cl.next != nil {
		c.model, c.stratSt, c.version = cl.next, cl.nextState, cl.version
		c.encoded.version, c.encoded.header, c.encoded.payload = cl.version, cl.header, cl.payload
	}
	c.round = nil
	c.freeSum = r.sum.Values
	c.completed++
	c.done = c.completed >= c.o.Rounds
	c.notifyLocked()
	c.mu.Unlock()
	closed := time.Now()
	c.o.Metrics.RoundClosed(cl.state, closed.Sub(r.started), cl.agg)
	if to, ok := c.o.Metrics.(TimingObserver); ok {
		c.mu.Lock()
		tm := RoundTiming{Round: r.n, Started: r.started, Closed: closed, LastArrival: r.lastArrival, Fold: r.foldTime, Commit: r.commitTime,
			Close: closed.Sub(closeStart)}
		c.mu.Unlock()
		to.RoundTimed(tm)
	}
	c.log.Info("round closed", "round", r.n, "state", cl.state, "updates", cl.counted, "withdrawn", cl.withdrawn, "reason", cl.reason)
}

// refusal is an update refused for a reason that names no value.
type refusal struct{ reason, msg string }

func (e *refusal) Error() string { return e.msg }

func refuse(reason, format string, a ...any) error {
	return &refusal{reason: reason, msg: fmt.Sprintf(format, a...)}
}

// check validates an update's binding, metadata and budget against the
// current state (without its payload). It is called before the payload is
// read, and again when the update is folded in.
func (c *Coordinator) check(client string, h *fedpb.UpdateHeader) error {
	if h.GetProtocolVersion() != fedpb.ProtocolVersion {
		return refuse("protocol", "protocol version %d, this coordinator speaks %d", h.GetProtocolVersion(), fedpb.ProtocolVersion)
	}
	if c.async != nil {
		_, err := c.checkAsync(client, h)
		return err
	}
	c.mu.Lock()
	r := c.round
	version := c.version
	var selected, counted bool
	var withdrawn string
	if r != nil {
		selected, counted, withdrawn = r.selected[client], r.counted[client], r.withdrawn[client]
	}
	c.mu.Unlock()
	switch {
	case r == nil || h.GetRound() != r.n:
		return refuse("stale", "round %d is not open", h.GetRound())
	case h.GetModelVersion() != version:
		return refuse("stale", "the update is for model %s, round %d trains model %s", short(h.GetModelVersion()), r.n, short(version))
	case !selected:
		return refuse("not_selected", "client %q was not selected for round %d", client, r.n)
	case counted:
		return refuse("replay", "client %q has already been counted in round %d", client, r.n)
	case withdrawn != "":
		return refuse("withdrawn", "client %q withdrew from round %d (%s)", client, r.n, withdrawn)
	}
	if want := r.cfg.GetDp(); want != nil {
		got := h.GetDp()
		if got == nil {
			return refuse("dp", "round %d requires DP-SGD and the update states none", r.n)
		}
		if got.GetClip() != want.GetClip() || got.GetDelta() != want.GetDelta() || got.GetPrivacyUnit() != want.GetPrivacyUnit() {
			return refuse("dp", "the update's clip, δ or unit differ from round %d's", r.n)
		}
		if want.GetNoiseMultiplier() > 0 && got.GetNoiseMultiplier() < want.GetNoiseMultiplier() {
			return refuse("dp", "the update's noise multiplier is below round %d's", r.n)
		}
	}
	return nil
}

// event is the privacy cost an update's metadata state.
func event(m *fedpb.DPParams, dim int) (dp.Event, error) {
	if m == nil {
		return dp.Event{}, errors.New("no DP metadata")
	}
	if m.GetSteps() < 1 || m.GetSteps() > 1<<30 {
		return dp.Event{}, fmt.Errorf("the update states %d DP-SGD steps", m.GetSteps())
	}
	cfg := dp.SGDConfig{ClipNorm: m.GetClip(), NoiseMultiplier: m.GetNoiseMultiplier(), SamplingRate: m.GetSamplingRate(), ExpectedBatchSize: 1, Dimension: dim}
	sigma, err := cfg.EffectiveNoiseMultiplier()
	if err != nil {
		return dp.Event{}, err
	}
	return dp.SubsampledDiscreteGaussianEvent(m.GetSamplingRate(), sigma, int(m.GetSteps()))
}

// charged is what accepting an update would do to its client's ledger.
type charged struct {
	base    []byte     // the stored ledger it was worked out from
	ledger  []byte     // the ledger after the charge
	l       *dp.Ledger // ledger, decoded
	spent   float64
	refusal error // if set, the update is refused for this
}

// charge works out the charge of an update with DP metadata m (on dim
// values) to the client's stored ledger lb. It changes nothing stored, so
// the costly part (the event's Rényi curve) can run in the update's own
// goroutine before the update is queued; fold uses the result only if lb
// is still what is stored.
func (c *Coordinator) charge(client string, lb []byte, m *fedpb.DPParams, dim int) (charged, error) {
	ev, err := event(m, dim)
	if err != nil {
		return charged{base: lb, refusal: refuse("dp", "the update's DP metadata: %v", err)}, nil
	}
	return c.chargeEvent(client, lb, ev)
}

// chargeEvent works out the charge of ev to the client's stored ledger lb
// (charge, with the event known).
func (c *Coordinator) chargeEvent(client string, lb []byte, ev dp.Event) (charged, error) {
	ch := charged{base: lb}
	l, err := c.ledgers.take(client, lb)
	if err != nil {
		return ch, err
	}
	l.UseCurveCache(c.curves)
	s, err := l.Charge(client, ev)
	if err != nil {
		c.ledgers.put(client, lb, l) // a refused charge leaves the ledger as it was
		if errors.Is(err, dp.ErrBudgetExceeded) {
			ch.refusal = refuse("budget", "accepting this update would take client %q past its privacy budget (it would have spent ε = %.4g)", client, s.Epsilon)
		} else {
			ch.refusal = refuse("dp", "charging the update: %v", err)
		}
		return ch, nil
	}
	ch.spent, ch.l = s.Epsilon, l
	ch.ledger, err = marshalLedger(l)
	return ch, err
}

// ledgerCache keeps each client's ledger decoded, by the bytes it is
// stored as: decoding a ledger replays (recomputes the Rényi curve of)
// every event it holds, which made a charge cost more with every round.
// An entry is taken out while in use, since a charge changes it, and put
// back only under the bytes it then has once those are committed.
type ledgerCache struct {
	mu sync.Mutex
	m  map[string]cachedLedger
}

type cachedLedger struct {
	stored []byte
	l      *dp.Ledger
}

// take returns the ledger stored as b: the cached one if it was cached
// under exactly b, else b decoded.
func (lc *ledgerCache) take(client string, b []byte) (*dp.Ledger, error) {
	lc.mu.Lock()
	e, ok := lc.m[client]
	delete(lc.m, client)
	lc.mu.Unlock()
	if ok && bytes.Equal(e.stored, b) {
		return e.l, nil
	}
	return clientLedger(b)
}

// put caches l as the ledger stored as b.
func (lc *ledgerCache) put(client string, b []byte, l *dp.Ledger) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.m == nil {
		lc.m = map[string]cachedLedger{}
	}
	lc.m[client] = cachedLedger{stored: b, l: l}
}

// fold charges and folds a batch of validated updates in one transaction
// and answers each.
func (c *Coordinator) fold(ctx context.Context, ps []*pending) {
	b := c.newBatch()
	for _, p := range ps {
		c.admit(ctx, b, p)
	}
	c.commit(ctx, b)
}

// batch is updates folded in memory, to be committed in one transaction.
type batch struct {
	r *openRound // the open round when the batch began (nil: none)
	// sum is the round's running sum with the batch's accepted updates
	// added: a copy, so a failed transaction leaves the sum as stored.
	sum      *strategy.Sum
	items    []*pending
	results  []result
	accepted []acceptance
	counted  map[string]bool
	// complete is set once the batch counts the round's last expected
	// update: the round closes in the batch's transaction.
	complete bool
	// inPlace is set when sum is the round's own sum, empty when the
	// batch began (see newBatch).
	inPlace bool
	// fold is the time spent checking, charging and adding.
	fold time.Duration
}

// acceptance is an update of a batch that passed every check: its index,
// its client's ledger as read and as charged (equal without DP), and the
// ε the client has spent with it.
type acceptance struct {
	i            int
	base, ledger []byte
	spent        float64
	ch           *charged
}

// newBatch starts a batch on the open round. The copy of the running sum
// reuses the memory of the sum the last batch replaced, rather than 8
// bytes per value allocated and cleared per batch. A batch on a round
// with nothing folded yet (the first, and with group commit usually the
// only one) adds to the round's sum itself, which is all zeros: a failed
// transaction then zeroes it again (commit), which leaves it exactly as
// stored, without a copy of 4.5 MB per round.
func (c *Coordinator) newBatch() *batch {
	c.mu.Lock()
	r := c.round
	c.mu.Unlock()
	b := &batch{r: r, counted: map[string]bool{}}
	if r != nil && r.sum.Count == 0 && r.sum.Weight == 0 && !r.sumStored {
		b.sum, b.inPlace = r.sum, true
	} else if r != nil {
		vals := c.spare
		if len(vals) != len(r.sum.Values) {
			vals = make([]float64, len(r.sum.Values))
		}
		c.spare = nil
		copy(vals, r.sum.Values)
		b.sum = &strategy.Sum{Layout: r.sum.Layout, Values: vals, Weight: r.sum.Weight, Count: r.sum.Count}
	}
	return b
}

// admit checks an update against the round and its client's ledger,
// works out the charge and adds the update to the batch's sum, or records
// why it is refused; either way the update's buffer goes back at once. It
// reports whether the batch now completes the round. Only the loop's
// goroutine changes ledgers, counts and withdrawals, and it commits the
// batch right after gathering it; the transaction still checks that every
// ledger and count it changes is as admit read it.
func (c *Coordinator) admit(ctx context.Context, b *batch, p *pending) bool {
	start := time.Now()
	i := len(b.items)
	b.items = append(b.items, p)
	b.results = append(b.results, result{})
	b.results[i].err = c.admitOne(ctx, b, i, p)
	// The update is read no more: its buffer goes back (before the answer,
	// so a client told has no bytes held for it).
	if p.release != nil {
		p.release()
	}
	p.update = nil
	b.fold += time.Since(start)
	if b.results[i].err == nil && b.r != nil {
		_, _, b.complete = c.completedBy(b.r, b.counted)
	}
	return b.complete
}

func (c *Coordinator) admitOne(ctx context.Context, b *batch, i int, p *pending) error {
	h := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: p.round, ModelVersion: p.version, Dp: p.dp}
	if err := c.check(p.client, h); err != nil {
		return err
	}
	if b.r == nil || b.r.n != p.round {
		return refuse("stale", "round %d is not open", p.round)
	}
	if b.counted[p.client] {
		return refuse("replay", "client %q has already been counted in round %d", p.client, p.round)
	}
	var lb []byte
	if err := c.st.db.QueryRowContext(ctx, `SELECT ledger FROM clients WHERE id = ?`, p.client).Scan(&lb); err != nil {
		return refuse("unknown_client", "client %q is not enrolled", p.client)
	}
	a := acceptance{i: i, base: lb, ledger: lb}
	if b.r.cfg.GetDp() != nil {
		// The charge worked out before the update was queued holds only
		// if the ledger it started from is still the stored one;
		// otherwise it is worked out again here.
		ch := p.charged
		if ch == nil || !bytes.Equal(ch.base, lb) {
			fresh, err := c.charge(p.client, lb, p.dp, c.model.Len())
			if err != nil {
				return fmt.Errorf("coordinator: charging the update: %w", err)
			}
			ch = &fresh
		}
		if ch.refusal != nil {
			return ch.refusal
		}
		a.spent, a.ledger, a.ch = ch.spent, ch.ledger, ch
	}
	w, err := c.strat.Weight(p.examples)
	if err != nil {
		return refuse("weight", "%v", err)
	}
	if err := b.sum.Add(p.update, w); err != nil {
		return refuse("shape", "%v", err)
	}
	b.counted[p.client] = true
	b.accepted = append(b.accepted, a)
	return nil
}

// commit stores a batch in one transaction (the clients' ledgers and
// counts, and the running sum, or the round's close if the batch
// completes it), empties the log of the previous sum and answers each
// update.
func (c *Coordinator) commit(ctx context.Context, b *batch) {
	r := b.r
	var committing time.Time // when the transaction's work was done and its commit began
	var closing *closing     // set if the batch completes the round and closes it
	var closeStart time.Time
	txStart := time.Now()
	stored := false
	if len(b.accepted) > 0 {
		err := c.st.tx(ctx, func(tx *sql.Tx) error {
			defer func() { committing = time.Now() }()
			for _, a := range b.accepted {
				p := b.items[a.i]
				if err := execOne(tx, `UPDATE clients SET ledger = ?, updates = updates + 1 WHERE id = ? AND ledger = ?`, a.ledger, p.client, a.base); err != nil {
					return fmt.Errorf("client %q's ledger: %w", p.client, err)
				}
				if err := execOne(tx, `UPDATE round_clients SET counted = 1 WHERE round = ? AND client = ? AND counted = 0 AND withdrawn = ''`, p.round, p.client); err != nil {
					return fmt.Errorf("client %q's count: %w", p.client, err)
				}
			}
			if b.complete {
				// The batch completes the round: it closes in the same
				// transaction, so the round's last update is committed with
				// its close (one commit, one wipe, no running sum written).
				closeStart = time.Now()
				n, w, _ := c.completedBy(r, b.counted)
				cl := c.aggregate(r, b.sum, n, w)
				closing = &cl
				return c.closeTx(tx, r, b.sum, cl)
			}
			c.encodedSum = appendSum(c.encodedSum[:0], b.sum.Values)
			return execOne(tx, `UPDATE rounds SET sum = ?, sum_weight = ?, updates = ? WHERE round = ? AND state = 'open'`,
				c.encodedSum, b.sum.Weight, b.sum.Count, r.n)
		})
		for _, a := range b.accepted {
			if err != nil {
				b.results[a.i].err = fmt.Errorf("coordinator: storing the update: %w", err)
			}
		}
		stored = err == nil
	}
	if stored {
		// The log holds the previous sum and the new one, or, for a close,
		// the last sum stored is gone from the database but still in the
		// log and the database file's pages until a checkpoint: emptied
		// before anyone is told, so that the files hold the current sum
		// only. A round that closes in its first batch never had a sum
		// written (nor freed one): the log then holds the next model,
		// ledgers and counts only, and is emptied at the loop's next tick
		// instead, while the next round runs.
		if !b.complete || r.sumStored {
			c.unwiped.Store(true)
		} else {
			c.tidy.Store(true)
		}
		if !b.complete {
			r.sumStored = true
		}
		c.wipe(ctx)
		committed := time.Now()
		c.mu.Lock()
		if !b.inPlace {
			c.spare = r.sum.Values
		}
		r.sum = b.sum
		for id := range b.counted {
			r.counted[id] = true
		}
		r.foldTime += b.fold + committing.Sub(txStart)
		r.commitTime += committed.Sub(committing)
		for _, a := range b.accepted {
			if t := b.items[a.i].arrived; t.After(r.lastArrival) {
				r.lastArrival = t
			}
		}
		c.mu.Unlock()
		if closing != nil {
			c.closed(r, *closing, closeStart)
		}
		for _, a := range b.accepted {
			p := b.items[a.i]
			if a.ch != nil && a.ch.l != nil {
				c.ledgers.put(p.client, a.ch.ledger, a.ch.l)
			}
			b.results[a.i].spent = a.spent
			c.o.Metrics.UpdateAccepted(p.client, p.bytes, a.spent)
			c.log.Info("update accepted", "round", p.round, "client", p.client)
		}
	} else if b.inPlace {
		c.mu.Lock()
		clear(b.sum.Values)
		b.sum.Weight, b.sum.Count = 0, 0
		c.mu.Unlock()
	} else if b.sum != nil {
		c.spare = b.sum.Values
	}
	for i, p := range b.items {
		if b.results[i].err != nil {
			reason := "internal"
			var rf *refusal
			if errors.As(b.results[i].err, &rf) {
				reason = rf.reason
			}
			c.o.Metrics.UpdateRefused(reason)
			c.log.Warn("update refused", "round", p.round, "client", p.client, "reason", reason)
		}
		p.reply <- b.results[i]
	}
}

// execOne runs a statement that must change exactly one row.
func execOne(tx *sql.Tx, query string, args ...any) error {
	res, err := tx.Exec(query, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("changed %d rows, want 1 (%v): the state changed while the update was folded", n, err)
	}
	return nil
}

// completedBy reports whether every client selected for r is counted
// (before or in the batch counted) or has withdrawn, with the number of
// updates counted and of clients withdrawn then.
func (c *Coordinator) completedBy(r *openRound, batch map[string]bool) (counted, withdrawn int, complete bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	complete = true
	for id := range r.selected {
		switch {
		case r.counted[id] || batch[id]:
			counted++
		case r.withdrawn[id] != "":
			withdrawn++
		default:
			complete = false
		}
	}
	return counted, withdrawn, complete
}

// enrol records a client's budget at its first join; later joins must
// declare the same budget.
func (c *Coordinator) enrol(ctx context.Context, client string, eps, delta float64, unit string) (spent float64, err error) {
	b := dp.Budget{Epsilon: eps, Delta: delta}
	if err := b.Validate(); err != nil {
		return 0, fmt.Errorf("the declared budget: %w", err)
	}
	if unit != "identity" && unit != "example" {
		return 0, fmt.Errorf("privacy unit %q (want identity or example)", unit)
	}
	if d := c.o.Task.DP; d != nil && d.GetPrivacyUnit() != unit {
		// Such a client is never selected (advance): say so at once.
		return 0, fmt.Errorf("this coordinator's rounds protect privacy unit %q and client %q protects %q: it would never be selected", d.GetPrivacyUnit(), client, unit)
	}
	err = c.st.tx(ctx, func(tx *sql.Tx) error {
		var e, d float64
		var u string
		var lb []byte
		err := tx.QueryRow(`SELECT budget_epsilon, budget_delta, unit, ledger FROM clients WHERE id = ?`, client).Scan(&e, &d, &u, &lb)
		if errors.Is(err, sql.ErrNoRows) {
			l, err := dp.NewLedger(dp.LedgerOptions{})
			if err != nil {
				return err
			}
			if err := l.SetBudget(client, b); err != nil {
				return err
			}
			lb, err := marshalLedger(l)
			if err != nil {
				return err
			}
			_, err = tx.Exec(`INSERT INTO clients (id, budget_epsilon, budget_delta, unit, ledger, enrolled_ms) VALUES (?, ?, ?, ?, ?, ?)`,
				client, eps, delta, unit, lb, time.Now().UnixMilli())
			return err
		}
		if err != nil {
			return err
		}
		if e != eps || d != delta || u != unit {
			return fmt.Errorf("client %q enrolled with budget ε = %g, δ = %g per %s and cannot change it", client, e, d, u)
		}
		l, err := clientLedger(lb)
		if err != nil {
			return err
		}
		s, err := l.Spent(client)
		spent = s.Epsilon
		return err
	})
	return spent, err
}

// notifyLocked wakes every Subscribe stream (c.mu held).
func (c *Coordinator) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// poke makes the loop take a step at once.
func (c *Coordinator) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Round returns the open round's number (0 if none) and the number of
// rounds closed.
func (c *Coordinator) Round() (open uint64, completed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.round != nil {
		open = c.round.n
	}
	return open, c.completed
}

// Model returns the current model and its version.
func (c *Coordinator) Model() (wire.Weights, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.model, c.version
}

// newSum returns an empty sum for a round, in the memory of the last
// closed round's sum (cleared) when there is one of the model's size.
func (c *Coordinator) newSum() *strategy.Sum {
	c.mu.Lock()
	vals := c.freeSum
	c.freeSum = nil
	c.mu.Unlock()
	if len(vals) != c.model.Len() {
		return strategy.NewSum(c.model)
	}
	clear(vals)
	layout := make(wire.Weights, len(c.model))
	for i, t := range c.model {
		layout[i] = wire.Tensor{Name: t.Name, Shape: slices.Clone(t.Shape)}
	}
	return &strategy.Sum{Layout: layout, Values: vals}
}
