package masking

import (
	"encoding/binary"
	"fmt"
	"slices"

	"golang.org/x/crypto/chacha20"
)

// Graph is the round's communication graph: who agrees masks and holds
// shares with whom. It is a k-regular graph (Harary's circulant H(k, n)) on
// the roster placed in an order drawn from the round's graph seed, as in
// SecAgg+ (Bell et al. 2020), where k ≈ log n suffices for security and
// correctness with high probability. When k ≥ n − 1 it is the complete
// graph (the original SecAgg). Every party computes it from Params alone,
// so the coordinator cannot give two clients inconsistent graphs without
// the clients noticing that their neighbour lists differ from Params.
type Graph struct {
	k   int
	adj map[uint32][]uint32 // sorted neighbour lists
}

// NewGraph computes the round's graph from its parameters.
func NewGraph(p *Params) (*Graph, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	n := len(p.Roster)
	k := p.EffectiveDegree()
	g := &Graph{k: k, adj: make(map[uint32][]uint32, n)}
	if k == n-1 {
		for _, id := range p.Roster {
			nb := make([]uint32, 0, n-1)
			for _, o := range p.Roster {
				if o != id {
					nb = append(nb, o)
				}
			}
			g.adj[id] = nb
		}
		return g, nil
	}
	order := permute(p.Roster, &p.GraphSeed)
	for pos, id := range order {
		nb := make([]uint32, 0, k)
		for d := 1; d <= k/2; d++ {
			nb = append(nb, order[(pos+d)%n], order[(pos-d+n)%n])
		}
		if k%2 == 1 { // n is even here (EffectiveDegree): the diametric chord
			nb = append(nb, order[(pos+n/2)%n])
		}
		slices.Sort(nb)
		g.adj[id] = nb
	}
	return g, nil
}

// Degree returns the graph's degree k.
func (g *Graph) Degree() int { return g.k }

// Neighbours returns id's neighbours, sorted (nil for an id not in the roster).
func (g *Graph) Neighbours(id uint32) []uint32 { return slices.Clone(g.adj[id]) }

// Adjacent reports whether a and b are neighbours.
func (g *Graph) Adjacent(a, b uint32) bool {
	_, ok := slices.BinarySearch(g.adj[a], b)
	return ok
}

// holders returns the clients that hold shares of id's secrets: id and its
// neighbours, sorted.
func (g *Graph) holders(id uint32) []uint32 {
	h := append(slices.Clone(g.adj[id]), id)
	slices.Sort(h)
	return h
}

// permute returns the roster in a uniformly random order drawn from seed
// (Fisher–Yates with ChaCha20 as the source, unbiased by rejection).
func permute(roster []uint32, seed *[32]byte) []uint32 {
	var nonce [chacha20.NonceSize]byte
	copy(nonce[:], "veil-graph")
	c, err := chacha20.NewUnauthenticatedCipher(seed[:], nonce[:])
	if err != nil {
		panic(fmt.Sprintf("masking: graph stream: %v", err)) // unreachable: fixed sizes
	}
	next := func() uint32 {
		var b [4]byte
		c.XORKeyStream(b[:], b[:])
		return binary.LittleEndian.Uint32(b[:])
	}
	out := slices.Clone(roster)
	for i := len(out) - 1; i > 0; i-- {
		bound := uint32(i + 1)
		limit := ^uint32(0) - ^uint32(0)%bound // multiples of bound below 2^32
		v := next()
		for v >= limit {
			v = next()
		}
		j := int(v % bound)
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// SeedIndependent reports whether the round protects every honest client
// against colluders clients of the roster colluding with the coordinator
// wherever they sit in the graph, so that the choice of GraphSeed (which
// the coordinator makes, and could grind until a target's neighbours are
// its own) cannot matter: either the graph is complete (the seed is
// unused), or colluders ≤ ToleratedColluders (no client has more
// colluding neighbours than the threshold tolerates, even with all of
// them) and colluders < k (the graph, Harary's H(k, n), is k-vertex-
// connected, so removing the colluders leaves the honest clients'
// subgraph connected and no honest client isolated).
func (p *Params) SeedIndependent(colluders int) bool {
	k := p.EffectiveDegree()
	if k >= len(p.Roster)-1 {
		return true
	}
	return colluders <= p.ToleratedColluders() && colluders < k
}
