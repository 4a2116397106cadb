package masking

import "testing"

// connectedWithout reports whether g stays connected once the clients in
// removed are taken out.
func connectedWithout(g *Graph, roster []uint32, removed map[uint32]bool) bool {
	var start uint32
	left := 0
	for _, id := range roster {
		if !removed[id] {
			start, left = id, left+1
		}
	}
	if left == 0 {
		return true
	}
	seen := map[uint32]bool{start: true}
	queue := []uint32{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range g.Neighbours(v) {
			if !removed[w] && !seen[w] {
				seen[w] = true
				queue = append(queue, w)
			}
		}
	}
	return len(seen) == left
}

// TestGraphIsKConnected checks, for every roster of 4 to 11 clients,
// every sparse degree and several seeds, that removing any set of fewer
// than k clients leaves the graph connected (Harary's H(k, n) is
// k-vertex-connected, whatever order the seed puts the roster in), and
// that some set of k clients (a client's neighbours) isolates a client:
// the bound SeedIndependent relies on is exact.
func TestGraphIsKConnected(t *testing.T) {
	for n := 4; n <= 11; n++ {
		roster := make([]uint32, n)
		for i := range roster {
			roster[i] = uint32(10 * (i + 1))
		}
		for k := 2; k < n-1; k++ {
			for seed := range 3 {
				p := Params{Roster: roster, Degree: k, Threshold: k/2 + 2, Length: 1}
				p.GraphSeed[0] = byte(seed)
				if p.Threshold > p.EffectiveDegree()+1 {
					p.Threshold = p.EffectiveDegree() + 1
				}
				g, err := NewGraph(&p)
				if err != nil {
					t.Fatal(err)
				}
				ke := g.Degree()
				if ke >= n-1 {
					continue // raised to the complete graph
				}
				// Every subset of the roster of size < ke, by bitmask.
				for mask := range 1 << n {
					removed := map[uint32]bool{}
					for i, id := range roster {
						if mask>>i&1 == 1 {
							removed[id] = true
						}
					}
					if len(removed) < ke && !connectedWithout(g, roster, removed) {
						t.Fatalf("n = %d, k = %d, seed %d: removing %d < k clients disconnects the graph", n, ke, seed, len(removed))
					}
				}
				nb := map[uint32]bool{}
				for _, id := range g.Neighbours(roster[0]) {
					nb[id] = true
				}
				if len(nb) != ke || connectedWithout(g, roster, nb) {
					t.Fatalf("n = %d, k = %d: a client's %d neighbours do not isolate it", n, ke, len(nb))
				}
			}
		}
	}
}

// TestSeedIndependent: the complete graph is independent of its seed;
// a sparse one only while the colluders are at most ToleratedColluders
// and fewer than k.
func TestSeedIndependent(t *testing.T) {
	roster := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		k, t, colluders int
		want            bool
	}{
		{9, 6, 9, true},  // complete: the seed is unused
		{4, 4, 2, true},  // tolerated 2, k 4
		{4, 4, 3, false}, // more than tolerated
		{4, 5, 3, true},  // tolerated min(4, 4) = 4, 3 < k
		{4, 5, 4, false}, // tolerated 4 but k colluders can surround a client
		{2, 3, 1, true},
		{2, 3, 2, false},
	} {
		p := Params{Roster: roster, Degree: tc.k, Threshold: tc.t, Length: 1}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := p.SeedIndependent(tc.colluders); got != tc.want {
			t.Errorf("k = %d, t = %d, %d colluders (tolerated %d): SeedIndependent = %v, want %v", tc.k, tc.t, tc.colluders, p.ToleratedColluders(), got, tc.want)
		}
	}
}
