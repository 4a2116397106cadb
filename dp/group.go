package dp

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Events returns a copy of the events charged to a principal, in the
// order they were charged.
func (l *Ledger) Events(id string) ([]Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.acct[id]
	if !ok {
		return nil, fmt.Errorf("dp: ledger: unknown principal %q", id)
	}
	return p.acct.Events(), nil
}

// PartiesEpsilon is the privacy of a unit (a person, or an example) whose
// data is held by K of the parties whose mechanisms PartiesEpsilons
// composed.
type PartiesEpsilon struct {
	// K is the number of parties holding the unit's data.
	K int `json:"k"`
	// Epsilon bounds the unit's privacy loss at the δ given, whichever K
	// parties hold its data: the K parties' mechanisms composed by Rényi
	// DP (their curves add at every order), then converted to (ε, δ).
	Epsilon float64 `json:"epsilon"`
	// Exact says that Epsilon is the composition of some K parties' events
	// (the worst K); otherwise it is an upper bound on every set of K
	// parties' composition, taken from the K largest curves at each order
	// (which may come from different parties at different orders).
	Exact bool `json:"exact"`
}

// PartiesEpsilons returns, for each k in ks (1 ≤ k ≤ len(parties)), the
// ε at delta that bounds the privacy loss of a unit whose data is held by
// k of the parties, parties[i] being the mechanisms that ran on party i's
// data (e.g. a federation client's ledger). The mechanisms of different
// parties compose like any others: a unit in k parties' data is exposed
// to all k parties' releases, so their Rényi DP curves add (never k times
// the largest ε, which overstates, nor the largest ε alone, which holds
// only for k = 1). Which k parties hold the unit is not known, so ε is
// the worst case over every choice of k parties: for k = 1 and k =
// len(parties) the worst choice itself (Exact), otherwise the bound from
// the k largest curves at each order, which is exact when every party ran
// the same mechanisms. Orders nil means DefaultOrders(). A party with no
// events contributes nothing.
func PartiesEpsilons(parties [][]Event, ks []int, delta float64, orders []float64) ([]PartiesEpsilon, error) {
	if err := checkDelta(delta); err != nil {
		return nil, err
	}
	n := len(parties)
	if n == 0 {
		return nil, errors.New("dp: composing parties: no parties")
	}
	for _, k := range ks {
		if k < 1 || k > n {
			return nil, fmt.Errorf("dp: composing parties: k = %d outside [1, %d]", k, n)
		}
	}
	// One cache for every party: clients of one federation mostly run the
	// same mechanism, whose curve is then computed once (bit for bit what
	// Accountant.Add computes).
	cache, err := NewCurveCache(orders, 0)
	if err != nil {
		return nil, inContext("composing parties", err)
	}
	ords := cache.orders
	curves := make([][]float64, n)
	pure := make([]float64, n)
	eps := make([]float64, n)
	total := make([]float64, len(ords))
	totalPure, events := 0.0, 0
	for i, evs := range parties {
		a, err := NewAccountant(ords)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			c, err := cache.curve(evs...)
			if err != nil {
				return nil, inContext(fmt.Sprintf("composing parties: party %d", i), err)
			}
			a.record(c, evs)
			if eps[i], _, err = a.Epsilon(delta); err != nil {
				return nil, inContext(fmt.Sprintf("composing parties: party %d", i), err)
			}
		}
		curves[i], pure[i] = a.rdp, a.pure
		for j, r := range a.rdp {
			total[j] += r
		}
		totalPure += a.pure
		events += len(evs)
	}
	// Every party: the sum of their curves, as one accountant holding all
	// their events would compose them.
	allEps := 0.0
	if events > 0 {
		e, _, err := RDPToDP(ords, total, delta)
		if err != nil {
			return nil, inContext("composing parties", err)
		}
		allEps = math.Min(e, totalPure)
	}
	out := make([]PartiesEpsilon, 0, len(ks))
	col := make([]float64, n)
	for _, k := range ks {
		r := PartiesEpsilon{K: k, Exact: true}
		switch {
		case k == n:
			r.Epsilon = allEps
		case k == 1:
			r.Epsilon = slices.Max(eps)
		default:
			top := make([]float64, len(ords))
			for j := range ords {
				for i := range curves {
					col[i] = curves[i][j]
				}
				top[j] = sumLargest(col, k)
			}
			e, _, err := RDPToDP(ords, top, delta)
			if err != nil {
				return nil, inContext("composing parties", err)
			}
			r.Epsilon = math.Min(e, sumLargest(slices.Clone(pure), k))
			// The bound is a composition of k parties' events when one
			// set of k parties has the k largest curves at every order.
			r.Exact = sameTop(curves, k)
		}
		out = append(out, r)
	}
	return out, nil
}

// sumLargest sums the k largest values of v, reordering v.
func sumLargest(v []float64, k int) float64 {
	slices.SortFunc(v, func(a, b float64) int { return -compareFloat(a, b) })
	s := 0.0
	for _, x := range v[:k] {
		s += x
	}
	return s
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sameTop reports whether one set of k parties holds the k largest curve
// values at every order (ties count as either).
func sameTop(curves [][]float64, k int) bool {
	if len(curves) == 0 {
		return true
	}
	// The k largest at the first order (ties broken by index), then a check
	// that no other party exceeds the smallest of them at any order.
	idx := make([]int, len(curves))
	for i := range idx {
		idx[i] = i
	}
	orders := len(curves[0])
	if orders == 0 {
		return true
	}
	for j := 0; j < orders; j++ {
		set := slices.Clone(idx)
		slices.SortStableFunc(set, func(a, b int) int { return -compareFloat(curves[a][j], curves[b][j]) })
		in := map[int]bool{}
		for _, i := range set[:k] {
			in[i] = true
		}
		ok := true
		for o := 0; o < orders && ok; o++ {
			low := math.Inf(1)
			for i := range in {
				low = math.Min(low, curves[i][o])
			}
			for i := range curves {
				if !in[i] && curves[i][o] > low {
					ok = false
					break
				}
			}
		}
		if ok {
			return true
		}
	}
	return false
}
