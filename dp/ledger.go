package dp

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
)

// ErrBudgetExceeded is returned (wrapped) by Ledger.Charge when a charge
// would take a principal past its budget.
var ErrBudgetExceeded = errors.New("privacy budget exceeded")

// Budget is a total (ε, δ) a principal may spend.
type Budget struct {
	Epsilon float64 `json:"epsilon"`
	Delta   float64 `json:"delta"`
}

// Validate checks ε > 0 and δ ∈ (0, 1).
func (b Budget) Validate() error {
	if err := checkEpsilon(b.Epsilon); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	if err := checkDelta(b.Delta); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	return nil
}

// Spent is what a principal has spent, at the budget's δ.
type Spent struct {
	// Epsilon is the tightest valid ε: the RDP bound, or the PLD bound when
	// the ledger uses PLD and every event is Gaussian-family, whichever is
	// smaller.
	Epsilon float64 `json:"epsilon"`
	// RDPEpsilon and RDPOrder are the accountant's bound and its order
	// (order 0: basic composition of pure-DP events was tighter).
	RDPEpsilon float64 `json:"rdp_epsilon"`
	RDPOrder   float64 `json:"rdp_order,omitempty"`
	// PLDEpsilon is the PLD bound, or 0 when not computed.
	PLDEpsilon float64 `json:"pld_epsilon,omitempty"`
	Delta      float64 `json:"delta"`
}

// LedgerOptions configures a Ledger.
type LedgerOptions struct {
	// Orders are the Rényi orders; nil means DefaultOrders().
	Orders []float64
	// UsePLD also evaluates the PLD accountant when every event of a
	// principal is Gaussian-family, and charges the smaller ε. It costs an
	// FFT composition per charge.
	UsePLD bool
	// PLD configures the PLD accountant when UsePLD is set; zero values
	// mean defaults.
	PLD PLDOptions
}

// Ledger keeps, per principal (client), a privacy budget and the mechanisms
// charged against it. Charge refuses, and changes nothing, when a charge
// would exceed the budget. A Ledger is safe for concurrent use.
type Ledger struct {
	mu     sync.Mutex
	opts   LedgerOptions
	orders []float64
	acct   map[string]*principal
	curves *CurveCache // nil: curves computed per charge
}

type principal struct {
	budget Budget
	acct   *Accountant
}

// NewLedger returns an empty ledger.
func NewLedger(opts LedgerOptions) (*Ledger, error) {
	a, err := NewAccountant(opts.Orders)
	if err != nil {
		return nil, inContext("ledger", err)
	}
	if opts.UsePLD {
		if _, err := opts.PLD.withDefaults(); err != nil {
			return nil, inContext("ledger", err)
		}
	}
	opts.Orders = a.Orders()
	return &Ledger{opts: opts, orders: a.Orders(), acct: map[string]*principal{}}, nil
}

// SetBudget gives a principal a budget. Until anything is charged to the
// principal the budget may be anything valid; afterwards ε may only be
// lowered, not below what the principal has spent, and δ may not change
// (ErrBudgetLocked): a raise would let an owner spend again what was
// spent, and another δ would make the spending read differently.
func (l *Ledger) SetBudget(id string, b Budget) error {
	if id == "" {
		return errors.New("dp: ledger: principal id must not be empty")
	}
	if err := b.Validate(); err != nil {
		return inContext(fmt.Sprintf("ledger: principal %q", id), err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.acct[id]
	if !ok {
		a, err := NewAccountant(l.orders)
		if err != nil {
			return err
		}
		l.acct[id] = &principal{budget: b, acct: a}
		return nil
	}
	if len(p.acct.events) > 0 {
		if b.Delta != p.budget.Delta {
			return fmt.Errorf("dp: ledger: principal %q has charges at δ = %g; its δ cannot change to %g: %w", id, p.budget.Delta, b.Delta, ErrBudgetLocked)
		}
		if b.Epsilon > p.budget.Epsilon {
			return fmt.Errorf("dp: ledger: principal %q has charges under the budget ε = %g; raising it to %g is refused: %w", id, p.budget.Epsilon, b.Epsilon, ErrBudgetLocked)
		}
	}
	s, err := l.spent(p.acct, b.Delta)
	if err != nil {
		return err
	}
	if s.Epsilon > b.Epsilon {
		return fmt.Errorf("dp: ledger: principal %q has already spent epsilon=%.6g at delta=%g, more than the new budget %.6g: %w",
			id, s.Epsilon, b.Delta, b.Epsilon, ErrBudgetExceeded)
	}
	p.budget = b
	return nil
}

// Budget returns a principal's budget.
func (l *Ledger) Budget(id string) (Budget, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.acct[id]
	if !ok {
		return Budget{}, fmt.Errorf("dp: ledger: unknown principal %q", id)
	}
	return p.budget, nil
}

// Principals returns the principal ids, sorted.
func (l *Ledger) Principals() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.acct))
	for id := range l.acct {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (l *Ledger) spent(a *Accountant, delta float64) (Spent, error) {
	s := Spent{Delta: delta}
	if len(a.events) == 0 {
		return s, nil
	}
	e, o, err := a.Epsilon(delta)
	if err != nil {
		return s, err
	}
	s.RDPEpsilon, s.RDPOrder, s.Epsilon = e, o, e
	if l.opts.UsePLD && allPLDCapable(a.events) {
		// The PLD bound is an optional refinement: if it cannot be computed
		// (e.g. the FFT would exceed its size limit) the RDP bound stands.
		if pe, err := PLDEpsilon(a.events, delta, l.opts.PLD); err == nil {
			s.PLDEpsilon = pe
			s.Epsilon = math.Min(s.Epsilon, pe)
		}
	}
	return s, nil
}

func allPLDCapable(events []Event) bool {
	for _, e := range events {
		if !e.pldCapable() {
			return false
		}
	}
	return true
}

// Spent returns what a principal has spent at its budget's δ.
func (l *Ledger) Spent(id string) (Spent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.acct[id]
	if !ok {
		return Spent{}, fmt.Errorf("dp: ledger: unknown principal %q", id)
	}
	return l.spent(p.acct, p.budget.Delta)
}

// Charge composes events into a principal's account if the result stays
// within its budget. Otherwise it returns an error wrapping
// ErrBudgetExceeded and leaves the ledger unchanged; invalid events are
// refused the same way.
func (l *Ledger) Charge(id string, events ...Event) (Spent, error) {
	if len(events) == 0 {
		return Spent{}, errors.New("dp: ledger: charge with no events")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.acct[id]
	if !ok {
		return Spent{}, fmt.Errorf("dp: ledger: unknown principal %q (set a budget first)", id)
	}
	trial := p.acct.Clone()
	if err := l.add(trial, events); err != nil {
		return Spent{}, inContext(fmt.Sprintf("ledger: principal %q", id), err)
	}
	s, err := l.spent(trial, p.budget.Delta)
	if err != nil {
		return Spent{}, inContext(fmt.Sprintf("ledger: principal %q", id), err)
	}
	if !(s.Epsilon <= p.budget.Epsilon) {
		return s, fmt.Errorf("dp: ledger: principal %q: charge would spend epsilon=%.6g at delta=%g, budget is %.6g: %w",
			id, s.Epsilon, p.budget.Delta, p.budget.Epsilon, ErrBudgetExceeded)
	}
	p.acct = trial
	return s, nil
}

// UseCurveCache makes the ledger take the curves of the events it is
// charged from c (shared between ledgers) when c is over the ledger's
// orders; nil stops it. The charges are the same either way (see
// CurveCache); only their cost differs.
func (l *Ledger) UseCurveCache(c *CurveCache) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.serves(l.orders) {
		l.curves = c
	} else {
		l.curves = nil
	}
}

// add composes events into a (a principal's trial accountant), through
// the curve cache when there is one.
func (l *Ledger) add(a *Accountant, events []Event) error {
	if l.curves == nil {
		return a.Add(events...)
	}
	c, err := l.curves.curve(events...)
	if err != nil {
		return err
	}
	a.record(c, events)
	return nil
}

// CanCharge reports whether a principal could still be charged events
// without exceeding its budget, without charging them.
func (l *Ledger) CanCharge(id string, events ...Event) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.acct[id]
	if !ok {
		return false, fmt.Errorf("dp: ledger: unknown principal %q", id)
	}
	trial := p.acct.Clone()
	if err := l.add(trial, events); err != nil {
		return false, err
	}
	s, err := l.spent(trial, p.budget.Delta)
	if err != nil {
		return false, err
	}
	return s.Epsilon <= p.budget.Epsilon, nil
}

// LedgerFormatVersion is the version written by Ledger.MarshalJSON.
const LedgerFormatVersion = 1

type ledgerJSON struct {
	Version    int                      `json:"version"`
	Orders     []float64                `json:"orders"`
	UsePLD     bool                     `json:"use_pld,omitempty"`
	PLD        *PLDOptions              `json:"pld,omitempty"`
	Principals map[string]principalJSON `json:"principals"`
}

type principalJSON struct {
	Budget Budget    `json:"budget"`
	Events []Event   `json:"events"`
	RDP    []rdpJSON `json:"rdp"`
}

// rdpJSON is one composed Rényi DP value in the ledger file. JSON has no
// infinity, and a composed curve is +Inf at every order above the last one
// an RDP-curve event lists (e.g. the PATE bound), so +Inf is written as the
// string "+Inf". Every other value is a plain JSON number.
type rdpJSON float64

func (r rdpJSON) MarshalJSON() ([]byte, error) {
	v := float64(r)
	if math.IsInf(v, 1) {
		return []byte(`"+Inf"`), nil
	}
	if math.IsNaN(v) || math.IsInf(v, -1) {
		return nil, fmt.Errorf("dp: ledger: composed Rényi DP value %g cannot be saved", v)
	}
	return json.Marshal(v)
}

func (r *rdpJSON) UnmarshalJSON(b []byte) error {
	if string(b) == `"+Inf"` {
		*r = rdpJSON(math.Inf(1))
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("a composed Rényi DP value must be a number or \"+Inf\", got %.40s", b)
	}
	*r = rdpJSON(v)
	return nil
}

// MarshalJSON writes the ledger in a stable, versioned format: orders,
// options, and per principal its budget, events and composed RDP curve.
func (l *Ledger) MarshalJSON() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := ledgerJSON{Version: LedgerFormatVersion, Orders: l.orders, UsePLD: l.opts.UsePLD, Principals: map[string]principalJSON{}}
	if l.opts.UsePLD {
		p := l.opts.PLD
		out.PLD = &p
	}
	for id, p := range l.acct {
		ev := p.acct.events
		if ev == nil {
			ev = []Event{}
		}
		rdp := make([]rdpJSON, len(p.acct.rdp))
		for i, r := range p.acct.rdp {
			rdp[i] = rdpJSON(r)
		}
		out.Principals[id] = principalJSON{Budget: p.budget, Events: ev, RDP: rdp}
	}
	return json.Marshal(out)
}

// UnmarshalLedger reads a ledger written by MarshalJSON. It recomputes every
// principal's RDP curve from its events and refuses the file if a stored
// curve disagrees, a budget is invalid or already exceeded, or the version
// is unknown.
func UnmarshalLedger(data []byte) (*Ledger, error) {
	var in ledgerJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, inContext("reading ledger", err)
	}
	if in.Version != LedgerFormatVersion {
		return nil, fmt.Errorf("dp: reading ledger: unsupported format version %d (this program reads version %d)", in.Version, LedgerFormatVersion)
	}
	if len(in.Orders) == 0 {
		return nil, errors.New("dp: reading ledger: the file lists no Rényi orders")
	}
	opts := LedgerOptions{Orders: in.Orders, UsePLD: in.UsePLD}
	if in.PLD != nil {
		opts.PLD = *in.PLD
	}
	l, err := NewLedger(opts)
	if err != nil {
		return nil, inContext("reading ledger", err)
	}
	for id, pj := range in.Principals {
		if id == "" {
			return nil, errors.New("dp: reading ledger: empty principal id")
		}
		if err := pj.Budget.Validate(); err != nil {
			return nil, inContext(fmt.Sprintf("reading ledger: principal %q", id), err)
		}
		a, err := NewAccountant(l.orders)
		if err != nil {
			return nil, err
		}
		if len(pj.Events) > 0 {
			if err := a.Add(pj.Events...); err != nil {
				return nil, inContext(fmt.Sprintf("reading ledger: principal %q", id), err)
			}
		}
		if len(pj.RDP) != len(a.rdp) {
			return nil, fmt.Errorf("dp: reading ledger: principal %q: stored RDP curve has %d values, want %d", id, len(pj.RDP), len(a.rdp))
		}
		for i, r := range a.rdp {
			st := float64(pj.RDP[i])
			if !(math.Abs(r-st) <= 1e-9*math.Max(1, math.Abs(r))) && !(math.IsInf(r, 1) && math.IsInf(st, 1)) {
				return nil, fmt.Errorf("dp: reading ledger: principal %q: stored Rényi DP at order %g is %g but its events give %g (the file was altered or is corrupt)", id, l.orders[i], st, r)
			}
		}
		l.acct[id] = &principal{budget: pj.Budget, acct: a}
		s, err := l.spent(a, pj.Budget.Delta)
		if err != nil {
			return nil, inContext(fmt.Sprintf("reading ledger: principal %q", id), err)
		}
		if s.Epsilon > pj.Budget.Epsilon*(1+1e-12) {
			return nil, fmt.Errorf("dp: reading ledger: principal %q has spent epsilon=%.6g, more than its budget %.6g: %w", id, s.Epsilon, pj.Budget.Epsilon, ErrBudgetExceeded)
		}
	}
	return l, nil
}
