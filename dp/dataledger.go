package dp

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// The privacy units a DataLedger accounts in.
const (
	// UnitIdentity protects one person: all of their examples.
	UnitIdentity = "identity"
	// UnitExample protects one example (one image).
	UnitExample = "example"
)

// DataSet names the data a DataLedger protects: the population of members
// (a name its owner chooses, such as "lfw") and the unit of privacy. Every
// command that releases anything computed from that data charges the same
// ledger, whichever files it reads or writes.
type DataSet struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
}

// Validate checks the name (1 to 64 letters, digits, '.', '_' or '-', not
// starting with a punctuation mark: it names a file) and the unit.
func (d DataSet) Validate() error {
	if d.Unit != UnitIdentity && d.Unit != UnitExample {
		return fmt.Errorf("dp: data set %q: privacy unit %q (want %s or %s)", d.Name, d.Unit, UnitIdentity, UnitExample)
	}
	if len(d.Name) == 0 || len(d.Name) > 64 {
		return fmt.Errorf("dp: a data set name has 1 to 64 characters, got %d", len(d.Name))
	}
	for i, r := range d.Name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			return fmt.Errorf("dp: data set name %q: use letters, digits, '.', '_' and '-' only, starting with a letter or digit", d.Name)
		}
	}
	return nil
}

// String is "name (per unit)".
func (d DataSet) String() string { return fmt.Sprintf("%s (per %s)", d.Name, d.Unit) }

// Charge is one release to be charged: the mechanisms it ran and the
// members whose data it used.
type Charge struct {
	// Label says what was released, e.g. "veil train: epoch 3". It is kept
	// in the ledger's history: never put private data in it.
	Label string
	// Members names the members the release used: people (UnitIdentity)
	// or examples (UnitExample), by any stable name (the ledger keeps only
	// keyed fingerprints). Nil means every member of the data set, present
	// and future: the safe charge when a command cannot name them.
	Members []string
	// Events are the mechanisms, composed for every member the release used.
	Events []Event
}

// HistoryKind names a kind of HistoryEntry.
type HistoryKind string

// The kinds of history entries.
const (
	// HistoryBudget: a budget was set for the first time or lowered.
	HistoryBudget HistoryKind = "budget"
	// HistoryReset: the owner reset the ledger (ResetOptions).
	HistoryReset HistoryKind = "reset"
	// HistoryCharge: a release was charged.
	HistoryCharge HistoryKind = "charge"
)

// HistoryEntry is one change of a DataLedger, kept forever (a reset does
// not erase the history).
type HistoryEntry struct {
	Time time.Time   `json:"time"`
	Kind HistoryKind `json:"kind"`
	// Note is a charge's label or a reset's reason.
	Note string `json:"note,omitempty"`
	// Budget is the budget after the change.
	Budget Budget `json:"budget"`
	// Members is how many members a charge touched (-1: every member).
	Members int `json:"members,omitempty"`
	// ChargeEpsilon is the ε of a charge's events alone, at the budget's δ.
	ChargeEpsilon float64 `json:"charge_epsilon,omitempty"`
	// Worst is the worst member's ε after the change (for a reset, before
	// it: what the reset forgave).
	Worst float64 `json:"worst_epsilon"`
}

// fingerprint is a keyed hash of a member's name.
type fingerprint [16]byte

// group is a set of members with the same charges.
type group struct {
	members []fingerprint // sorted; nil for the others group
	acct    *Accountant
}

// DataLedger is the privacy ledger of one data set: its budget, and per
// member every charge that used the member's data. A member's ε composes
// every charge that touched them; the ledger refuses a charge that would
// take any member past the budget (see the package documentation, "The
// data ledger"). Members with the same charges share one group, so a
// charge costs one composition per group, not per member. A DataLedger is
// a value read from and written to a LedgerDir (LedgerDir.Update); it is
// not safe for concurrent use.
type DataLedger struct {
	set     DataSet
	key     []byte
	budget  Budget // zero: not set yet
	groups  []*group
	others  *group // members not listed in a group: they have the charges on everyone
	where   map[fingerprint]int
	history []HistoryEntry
	curves  *CurveCache
}

// newDataLedger returns an empty ledger without a budget.
func newDataLedger(set DataSet, key []byte, curves *CurveCache) (*DataLedger, error) {
	a, err := NewAccountant(nil)
	if err != nil {
		return nil, err
	}
	return &DataLedger{set: set, key: key, others: &group{acct: a}, where: map[fingerprint]int{}, curves: curves}, nil
}

// DataSet is the data set the ledger protects.
func (l *DataLedger) DataSet() DataSet { return l.set }

// Budget returns the budget and whether one has been set.
func (l *DataLedger) Budget() (Budget, bool) { return l.budget, l.budget.Epsilon > 0 }

// History returns a copy of the history, oldest first.
func (l *DataLedger) History() []HistoryEntry { return slices.Clone(l.history) }

// fingerprint is HMAC-SHA256 under the ledger folder's key of the unit and
// the member's name, truncated to 128 bits.
func (l *DataLedger) fingerprint(name string) fingerprint {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte("veil ledger member\x00" + l.set.Unit + "\x00" + name))
	var f fingerprint
	copy(f[:], m.Sum(nil))
	return f
}

// fingerprints returns the sorted, distinct fingerprints of names.
func (l *DataLedger) fingerprints(names []string) []fingerprint {
	out := make([]fingerprint, 0, len(names))
	for _, n := range names {
		out = append(out, l.fingerprint(n))
	}
	slices.SortFunc(out, func(a, b fingerprint) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(out)
}

// epsilon is a group's ε at the budget's δ (0 with no charge).
func (l *DataLedger) epsilon(g *group) (float64, error) {
	if len(g.acct.events) == 0 {
		return 0, nil
	}
	e, _, err := g.acct.Epsilon(l.budget.Delta)
	return e, err
}

// MemberSpent is what members have spent.
type MemberSpent struct {
	// Epsilon is the largest ε of the members (the worst member's), at
	// Delta, the budget's δ.
	Epsilon float64 `json:"epsilon"`
	Delta   float64 `json:"delta"`
	// Members counts the members listed in the ledger; Groups the groups
	// of members with the same charges (the others, not listed, are one
	// more).
	Members int `json:"members"`
	Groups  int `json:"groups"`
}

// Spent returns the worst ε of the named members (nil: of every member,
// listed or not).
func (l *DataLedger) Spent(members []string) (MemberSpent, error) {
	if _, ok := l.Budget(); !ok {
		return MemberSpent{}, fmt.Errorf("dp: the ledger of data set %s has no budget", l.set)
	}
	s := MemberSpent{Delta: l.budget.Delta, Members: len(l.where), Groups: len(l.groups)}
	for _, g := range l.touched(members) {
		e, err := l.epsilon(g)
		if err != nil {
			return MemberSpent{}, err
		}
		s.Epsilon = math.Max(s.Epsilon, e)
	}
	return s, nil
}

// touched returns the groups holding the named members (nil: all groups
// and the others).
func (l *DataLedger) touched(members []string) []*group {
	if members == nil {
		return append(slices.Clone(l.groups), l.others)
	}
	seen := map[*group]bool{}
	var out []*group
	for _, f := range l.fingerprints(members) {
		g := l.others
		if i, ok := l.where[f]; ok {
			g = l.groups[i]
		}
		if !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out
}

// SetBudget sets the budget. The first budget may be anything valid; once
// anything is charged, ε may only be lowered (not below what the worst
// member has spent) and δ may not change: a raise or another δ needs an
// explicit Reset, which the history records. Setting the same budget
// again does nothing.
func (l *DataLedger) SetBudget(b Budget) error {
	if err := b.Validate(); err != nil {
		return inContext("ledger of data set "+l.set.String(), err)
	}
	old, had := l.Budget()
	if had && old == b {
		return nil
	}
	if had && l.charged() {
		s, err := l.Spent(nil)
		if err != nil {
			return err
		}
		switch {
		case b.Delta != old.Delta:
			return fmt.Errorf("dp: the ledger of data set %s is kept at δ = %g and has charges (worst member ε = %.6g): changing δ to %g needs an explicit reset (veil privacy ledger reset): %w",
				l.set, old.Delta, s.Epsilon, b.Delta, ErrBudgetLocked)
		case b.Epsilon > old.Epsilon:
			return fmt.Errorf("dp: the ledger of data set %s has budget ε = %g and has charges (worst member ε = %.6g): raising it to %g needs an explicit reset (veil privacy ledger reset): %w",
				l.set, old.Epsilon, s.Epsilon, b.Epsilon, ErrBudgetLocked)
		case b.Epsilon < s.Epsilon:
			return fmt.Errorf("dp: the ledger of data set %s: a member has already spent ε = %.6g at δ = %g, more than the new budget %g: %w",
				l.set, s.Epsilon, old.Delta, b.Epsilon, ErrBudgetExceeded)
		}
	}
	l.budget = b
	worst := 0.0
	if had {
		s, err := l.Spent(nil)
		if err != nil {
			return err
		}
		worst = s.Epsilon
	}
	l.history = append(l.history, HistoryEntry{Time: now(), Kind: HistoryBudget, Budget: b, Worst: worst})
	return nil
}

// ErrBudgetLocked is returned (wrapped) by DataLedger.SetBudget for a
// raise of ε or a change of δ after charges: only a reset may do that.
var ErrBudgetLocked = errors.New("the budget of a ledger with charges can only be lowered")

// now is the time recorded in the history.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// charged reports whether any charge is recorded.
func (l *DataLedger) charged() bool {
	if len(l.others.acct.events) > 0 {
		return true
	}
	for _, g := range l.groups {
		if len(g.acct.events) > 0 {
			return true
		}
	}
	return false
}

// add composes events into g's accountant.
func (l *DataLedger) add(g *group, events []Event) error {
	if l.curves == nil || !l.curves.serves(g.acct.orders) {
		return g.acct.Add(events...)
	}
	c, err := l.curves.curve(events...)
	if err != nil {
		return err
	}
	g.acct.record(c, events)
	return nil
}

// Charge composes c's events for every member c names, if no member's ε
// goes past the budget, and returns the worst ε of those members after
// it. Otherwise it returns an error wrapping ErrBudgetExceeded (the ε the
// charge would have brought them to in the MemberSpent) and leaves the
// ledger unchanged.
func (l *DataLedger) Charge(c Charge) (MemberSpent, error) {
	if _, ok := l.Budget(); !ok {
		return MemberSpent{}, fmt.Errorf("dp: the ledger of data set %s has no budget: set one before charging", l.set)
	}
	if len(c.Events) == 0 {
		return MemberSpent{}, errors.New("dp: a charge with no events")
	}
	if c.Members != nil && len(c.Members) == 0 {
		return MemberSpent{}, errors.New("dp: a charge naming no member (nil means every member)")
	}
	for _, e := range c.Events {
		if err := e.Validate(); err != nil {
			return MemberSpent{}, inContext("charge", err)
		}
	}
	trial := l.clone()
	if err := trial.apply(c); err != nil {
		return MemberSpent{}, err
	}
	after, err := trial.Spent(c.Members)
	if err != nil {
		return MemberSpent{}, err
	}
	if !(after.Epsilon <= l.budget.Epsilon) {
		return after, fmt.Errorf("dp: data set %s: the charge %q would bring a member to ε = %.6g at δ = %g, over the budget ε = %g: %w",
			l.set, c.Label, after.Epsilon, l.budget.Delta, l.budget.Epsilon, ErrBudgetExceeded)
	}
	alone, err := NewAccountant(nil)
	if err != nil {
		return MemberSpent{}, err
	}
	if err := alone.Add(c.Events...); err != nil {
		return MemberSpent{}, err
	}
	ce, _, err := alone.Epsilon(l.budget.Delta)
	if err != nil {
		return MemberSpent{}, err
	}
	n := -1
	if c.Members != nil {
		n = len(trial.fingerprints(c.Members))
	}
	trial.history = append(trial.history, HistoryEntry{Time: now(), Kind: HistoryCharge, Note: c.Label, Budget: l.budget,
		Members: n, ChargeEpsilon: ce, Worst: after.Epsilon})
	*l = *trial
	return after, nil
}

// CanCharge reports whether c could be charged without going past the
// budget, and the worst ε of its members it would bring, without
// charging it.
func (l *DataLedger) CanCharge(c Charge) (bool, MemberSpent, error) {
	s, err := l.clone().Charge(c)
	if errors.Is(err, ErrBudgetExceeded) {
		return false, s, nil
	}
	return err == nil, s, err
}

// apply composes c into the groups: groups whose members are all named get
// the events; groups partly named split; named members not listed yet
// leave the others (with the charges on everyone) for a new group.
func (l *DataLedger) apply(c Charge) error {
	if c.Members == nil {
		for _, g := range append(slices.Clone(l.groups), l.others) {
			if err := l.add(g, c.Events); err != nil {
				return inContext("charge", err)
			}
		}
		return nil
	}
	named := map[*group][]fingerprint{}
	var order []*group
	for _, f := range l.fingerprints(c.Members) {
		g := l.others
		if i, ok := l.where[f]; ok {
			g = l.groups[i]
		}
		if _, ok := named[g]; !ok {
			order = append(order, g)
		}
		named[g] = append(named[g], f)
	}
	for _, g := range order {
		fs := named[g]
		if g != l.others && len(fs) == len(g.members) {
			if err := l.add(g, c.Events); err != nil {
				return inContext("charge", err)
			}
			continue
		}
		// Split: the named members leave g for a new group with g's
		// charges and this one.
		ng := &group{members: fs, acct: g.acct.Clone()}
		if err := l.add(ng, c.Events); err != nil {
			return inContext("charge", err)
		}
		if g != l.others {
			g.members = slices.DeleteFunc(g.members, func(f fingerprint) bool {
				_, in := slices.BinarySearchFunc(fs, f, func(a, b fingerprint) int { return bytes.Compare(a[:], b[:]) })
				return in
			})
		}
		l.groups = append(l.groups, ng)
		for _, f := range fs {
			l.where[f] = len(l.groups) - 1
		}
	}
	return nil
}

// clone returns an independent copy.
func (l *DataLedger) clone() *DataLedger {
	c := &DataLedger{set: l.set, key: l.key, budget: l.budget, others: &group{acct: l.others.acct.Clone()},
		where: make(map[fingerprint]int, len(l.where)), history: slices.Clone(l.history), curves: l.curves}
	for _, g := range l.groups {
		c.groups = append(c.groups, &group{members: slices.Clone(g.members), acct: g.acct.Clone()})
	}
	for f, i := range l.where {
		c.where[f] = i
	}
	return c
}

// ResetOptions is an owner's explicit reset of a ledger.
type ResetOptions struct {
	// Reason is recorded in the history; required.
	Reason string
	// Budget, if set, replaces the budget (any ε, any δ).
	Budget *Budget
	// KeepCharges keeps every charge (only the budget changes: a raise
	// that keeps the record); otherwise the charges are forgotten and
	// every member starts again at ε = 0.
	KeepCharges bool
}

// Reset is the owner's explicit override: it replaces the budget and, unless
// o.KeepCharges, forgets the charges. The history keeps an entry with the
// time, the reason and the worst ε before the reset; earlier entries stay.
// With KeepCharges the new budget must still cover the worst member.
func (l *DataLedger) Reset(o ResetOptions) error {
	if o.Reason == "" {
		return errors.New("dp: a reset needs a reason (it is recorded in the ledger's history)")
	}
	b, had := l.Budget()
	if o.Budget != nil {
		if err := o.Budget.Validate(); err != nil {
			return inContext("reset", err)
		}
		b = *o.Budget
	}
	if b.Epsilon == 0 {
		return fmt.Errorf("dp: the ledger of data set %s has no budget: give one to the reset", l.set)
	}
	worst := 0.0
	if had {
		s, err := l.Spent(nil)
		if err != nil {
			return err
		}
		worst = s.Epsilon
	}
	trial := l.clone()
	trial.budget = b
	if o.KeepCharges {
		s, err := trial.Spent(nil)
		if err != nil {
			return err
		}
		if s.Epsilon > b.Epsilon {
			return fmt.Errorf("dp: reset keeping the charges: a member has spent ε = %.6g at δ = %g, more than the new budget %g: %w",
				s.Epsilon, b.Delta, b.Epsilon, ErrBudgetExceeded)
		}
	} else {
		a, err := NewAccountant(nil)
		if err != nil {
			return err
		}
		trial.groups, trial.others, trial.where = nil, &group{acct: a}, map[fingerprint]int{}
	}
	trial.history = append(trial.history, HistoryEntry{Time: now(), Kind: HistoryReset, Note: o.Reason, Budget: b, Worst: worst})
	*l = *trial
	return nil
}

// GroupSpent is one group of members with the same charges.
type GroupSpent struct {
	// Members counts the group's members (-1: the members no charge has
	// named, who have only the charges on everyone).
	Members int     `json:"members"`
	Epsilon float64 `json:"epsilon"`
	// Events counts the mechanisms composed for the group.
	Events int `json:"events"`
}

// Groups returns every group with its ε at the budget's δ, the worst
// first.
func (l *DataLedger) Groups() ([]GroupSpent, error) {
	var out []GroupSpent
	for _, g := range append(slices.Clone(l.groups), l.others) {
		e, err := l.epsilon(g)
		if err != nil {
			return nil, err
		}
		n := len(g.members)
		if g == l.others {
			n = -1
		}
		if n == 0 {
			continue
		}
		out = append(out, GroupSpent{Members: n, Epsilon: e, Events: len(g.acct.events)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Epsilon > out[j].Epsilon })
	return out, nil
}
