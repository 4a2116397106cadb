package masking

import (
	"math/rand/v2"
	"testing"
)

// TestEveryDropoutPattern plays every assignment of the five dropout
// stages to n = 5 clients (t = 3, complete graph): 5^5 = 3125 rounds. The
// masks must cancel exactly whenever the round can be unmasked, and the
// round must fail otherwise.
func TestEveryDropoutPattern(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 8, 1)
	g, err := NewGraph(&f.p)
	if err != nil {
		t.Fatal(err)
	}
	r := testRand(2)
	var ok, refused int
	for code := range 3125 {
		stages := map[uint32]stage{}
		c := code
		for _, id := range f.p.Roster {
			stages[id] = stage(c % 5)
			c /= 5
		}
		o := f.run(t, stages, r)
		if err := f.check(g, o); err != nil {
			t.Fatalf("pattern %v: %v", stages, err)
		}
		if o.err == nil {
			ok++
		} else {
			refused++
		}
	}
	// Count independently: the round unmasks iff ≥ 3 clients reach
	// "complete" (with a complete graph every secret then has ≥ 3
	// responding holders), and all clients at "complete" pass all steps.
	var wantOK int
	for code := range 3125 {
		c, n := code, 0
		for range 5 {
			if c%5 == int(complete) {
				n++
			}
			c /= 5
		}
		if n >= 3 {
			wantOK++
		}
	}
	if ok != wantOK {
		t.Fatalf("%d rounds unmasked, want %d", ok, wantOK)
	}
	t.Logf("%d rounds unmasked, %d refused", ok, refused)
}

// TestRandomDropoutsSparseGraph plays n = 20 rounds on a k = 8 graph
// (t = 5) with random dropouts at every stage.
func TestRandomDropoutsSparseGraph(t *testing.T) {
	f := newFixture(t, 20, 8, 5, 16, 3)
	g, err := NewGraph(&f.p)
	if err != nil {
		t.Fatal(err)
	}
	prng := rand.New(rand.NewPCG(4, 5))
	r := testRand(6)
	var ok int
	for trial := range 60 {
		stages := map[uint32]stage{}
		for _, id := range f.p.Roster {
			// Mostly complete; each earlier stage with probability 1/20 ·
			// (trial % 4 + 1), so some rounds lose many clients.
			if prng.IntN(20) < trial%4+1 {
				stages[id] = stage(prng.IntN(int(complete)))
			} else {
				stages[id] = complete
			}
		}
		o := f.run(t, stages, r)
		if err := f.check(g, o); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if o.err == nil {
			ok++
		}
	}
	if ok < 30 {
		t.Fatalf("only %d of 60 rounds unmasked: the test exercises too little", ok)
	}
	t.Logf("%d of 60 rounds unmasked", ok)
}

func TestGraphIsRegular(t *testing.T) {
	for _, tc := range []struct{ n, k, want int }{
		{5, 4, 4}, {8, 7, 7}, {10, 4, 4}, {11, 3, 4}, {12, 5, 5}, {20, 8, 8}, {100, 14, 14}, {7, 100, 6},
	} {
		f := newFixture(t, tc.n, tc.k, (tc.want+1)/2+1, 1, uint64(tc.n))
		g, err := NewGraph(&f.p)
		if err != nil {
			t.Fatal(err)
		}
		if g.Degree() != tc.want {
			t.Fatalf("n=%d k=%d: degree %d, want %d", tc.n, tc.k, g.Degree(), tc.want)
		}
		for _, a := range f.p.Roster {
			nb := g.Neighbours(a)
			if len(nb) != tc.want {
				t.Fatalf("n=%d k=%d: client %d has %d neighbours", tc.n, tc.k, a, len(nb))
			}
			for i, b := range nb {
				if b == a || !g.Adjacent(b, a) || (i > 0 && nb[i-1] >= b) {
					t.Fatalf("n=%d k=%d: bad edge %d–%d", tc.n, tc.k, a, b)
				}
			}
		}
		// Another seed gives another graph (unless complete).
		f.p.GraphSeed[0] ^= 1
		g2, _ := NewGraph(&f.p)
		same := true
		for _, a := range f.p.Roster {
			if !equalU32(g.Neighbours(a), g2.Neighbours(a)) {
				same = false
			}
		}
		if same != (tc.want == tc.n-1) {
			t.Fatalf("n=%d k=%d: changing the seed changed the graph: %v", tc.n, tc.k, !same)
		}
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
