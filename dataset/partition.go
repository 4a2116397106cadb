package dataset

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
)

// PartitionOptions say how identities are split among federated clients.
type PartitionOptions struct {
	// Clients is the number of parts (≥ 1).
	Clients int
	// Alpha 0 splits evenly (sizes differ by at most one). Alpha > 0 skews
	// the split: the clients' shares of identities are drawn from a
	// symmetric Dirichlet(Alpha) distribution, so a small Alpha (0.1–1)
	// gives a few large clients and many small ones, and a large Alpha
	// tends to the even split.
	Alpha float64
	// MinPerClient is the least number of identities a client receives
	// (default 1): a client without data cannot train.
	MinPerClient int
	// Seed seeds the shuffle of identities and the Dirichlet draw. The
	// split is simulation set-up, not a privacy mechanism: it is
	// reproducible on purpose and reveals nothing beyond which identities
	// each simulated client holds.
	Seed uint64
}

// PartitionIdentities splits the identities 0…n−1 among o.Clients clients:
// every identity goes to exactly one client (disjoint identities per
// client, as when each user holds the photos of their own contacts). The
// identities are shuffled with o.Seed, then dealt out by size: evenly, or
// in Dirichlet-distributed shares (Alpha > 0) with at least MinPerClient
// each. Each client's identities are returned in increasing order.
func PartitionIdentities(n int, o PartitionOptions) ([][]int, error) {
	if o.Clients < 1 {
		return nil, fmt.Errorf("dataset: the number of clients must be at least 1, got %d", o.Clients)
	}
	if o.MinPerClient == 0 {
		o.MinPerClient = 1
	}
	if o.MinPerClient < 0 {
		return nil, fmt.Errorf("dataset: the least number of identities per client must be positive, got %d", o.MinPerClient)
	}
	if !(o.Alpha >= 0) || math.IsInf(o.Alpha, 0) {
		return nil, fmt.Errorf("dataset: the Dirichlet concentration must be a finite number ≥ 0 (0: an even split), got %g", o.Alpha)
	}
	if n < o.Clients*o.MinPerClient {
		return nil, fmt.Errorf("dataset: %d identities cannot give %d clients at least %d each", n, o.Clients, o.MinPerClient)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x9a27))
	perm := rng.Perm(n)
	var sizes []int
	if o.Alpha == 0 {
		sizes = evenSizes(n, o.Clients)
	} else {
		sizes = dirichletSizes(n, o.Clients, o.MinPerClient, o.Alpha, rng)
	}
	parts := make([][]int, o.Clients)
	at := 0
	for k, s := range sizes {
		parts[k] = slices.Clone(perm[at : at+s])
		slices.Sort(parts[k])
		at += s
	}
	return parts, nil
}

// evenSizes gives n items to k parts, the first n mod k one more.
func evenSizes(n, k int) []int {
	s := make([]int, k)
	for i := range s {
		s[i] = n / k
		if i < n%k {
			s[i]++
		}
	}
	return s
}

// dirichletSizes gives each of k parts min items, then the rest in
// proportion to shares drawn from Dirichlet(alpha) (largest remainders, so
// the sizes sum to n exactly).
func dirichletSizes(n, k, least int, alpha float64, rng *rand.Rand) []int {
	p := Dirichlet(rng, alpha, k)
	rest := n - k*least
	sizes := make([]int, k)
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, k)
	given := 0
	for i, pi := range p {
		x := pi * float64(rest)
		sizes[i] = least + int(math.Floor(x))
		given += int(math.Floor(x))
		rems[i] = rem{i, x - math.Floor(x)}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for j := 0; given < rest; j++ {
		sizes[rems[j%k].i]++
		given++
	}
	return sizes
}

// Dirichlet draws k shares from the symmetric Dirichlet(alpha)
// distribution (normalised Gamma(alpha, 1) draws). alpha must be > 0.
func Dirichlet(rng *rand.Rand, alpha float64, k int) []float64 {
	p := make([]float64, k)
	sum := 0.0
	for i := range p {
		p[i] = gamma(rng, alpha)
		sum += p[i]
	}
	if !(sum > 0) {
		// Every draw underflowed (alpha tiny): all mass on one part.
		clear(p)
		p[rng.IntN(k)] = 1
		return p
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// gamma draws from Gamma(a, 1) by Marsaglia and Tsang's method (2000),
// with the boost Gamma(a) = Gamma(a+1)·U^(1/a) for a < 1.
func gamma(rng *rand.Rand, a float64) float64 {
	if a < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gamma(rng, a+1) * math.Pow(u, 1/a)
	}
	d := a - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// ExamplesOf returns, for each part of identities, the indices of the
// examples whose identity (identity[i], in [0, n)) is in that part, in
// increasing order. Every identity must belong to at most one part.
func ExamplesOf(identity []int, parts [][]int) ([][]int, error) {
	owner := map[int]int{}
	for k, part := range parts {
		for _, id := range part {
			if prev, dup := owner[id]; dup {
				return nil, fmt.Errorf("dataset: identity %d is in parts %d and %d", id, prev, k)
			}
			owner[id] = k
		}
	}
	out := make([][]int, len(parts))
	for i, id := range identity {
		if k, ok := owner[id]; ok {
			out[k] = append(out[k], i)
		}
	}
	for k, ex := range out {
		if len(ex) == 0 && len(parts[k]) > 0 {
			return nil, fmt.Errorf("dataset: part %d has identities but no examples", k)
		}
	}
	if len(identity) == 0 {
		return nil, errors.New("dataset: no examples")
	}
	return out, nil
}
