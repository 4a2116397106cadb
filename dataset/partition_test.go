package dataset

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestPartitionIdentities(t *testing.T) {
	cases := []struct {
		name       string
		n          int
		o          PartitionOptions
		minSize    int
		maxSpread  int // largest − smallest part, −1: not checked
		wantSkewed bool
	}{
		{"even 8 of 4038", 4038, PartitionOptions{Clients: 8, Seed: 1}, 504, 1, false},
		{"even 3 of 7", 7, PartitionOptions{Clients: 3, Seed: 2}, 2, 1, false},
		{"one client", 5, PartitionOptions{Clients: 1}, 5, 0, false},
		{"dirichlet 0.3", 4038, PartitionOptions{Clients: 8, Alpha: 0.3, Seed: 3}, 1, -1, true},
		{"dirichlet min 20", 4038, PartitionOptions{Clients: 8, Alpha: 0.1, MinPerClient: 20, Seed: 4}, 20, -1, true},
		{"dirichlet tight", 16, PartitionOptions{Clients: 8, Alpha: 0.5, MinPerClient: 2, Seed: 5}, 2, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parts, err := PartitionIdentities(c.n, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if len(parts) != c.o.Clients {
				t.Fatalf("%d parts, want %d", len(parts), c.o.Clients)
			}
			seen := make([]int, c.n)
			lo, hi := c.n, 0
			for _, p := range parts {
				if !slices.IsSorted(p) {
					t.Errorf("part not sorted: %v", p)
				}
				lo, hi = min(lo, len(p)), max(hi, len(p))
				for _, id := range p {
					seen[id]++
				}
			}
			for id, k := range seen {
				if k != 1 {
					t.Fatalf("identity %d is in %d parts, want exactly 1", id, k)
				}
			}
			if lo < c.minSize {
				t.Errorf("smallest part %d, want at least %d", lo, c.minSize)
			}
			if c.maxSpread >= 0 && hi-lo > c.maxSpread {
				t.Errorf("sizes %d…%d, spread above %d", lo, hi, c.maxSpread)
			}
			if c.wantSkewed && hi < 2*c.n/c.o.Clients {
				t.Errorf("Dirichlet(%g) split is not skewed: largest part %d of %d", c.o.Alpha, hi, c.n)
			}
			again, _ := PartitionIdentities(c.n, c.o)
			for k := range parts {
				if !slices.Equal(parts[k], again[k]) {
					t.Fatal("the same seed gave another split")
				}
			}
		})
	}
}

func TestPartitionSeedsDiffer(t *testing.T) {
	a, _ := PartitionIdentities(100, PartitionOptions{Clients: 4, Seed: 1})
	b, _ := PartitionIdentities(100, PartitionOptions{Clients: 4, Seed: 2})
	if slices.Equal(a[0], b[0]) {
		t.Fatal("two seeds gave the same first part")
	}
}

func TestPartitionRefused(t *testing.T) {
	cases := []struct {
		n    int
		o    PartitionOptions
		want string
	}{
		{10, PartitionOptions{Clients: 0}, "at least 1"},
		{3, PartitionOptions{Clients: 4}, "cannot give 4 clients"},
		{10, PartitionOptions{Clients: 4, MinPerClient: 3}, "cannot give 4 clients at least 3"},
		{10, PartitionOptions{Clients: 2, Alpha: -1}, "Dirichlet"},
		{10, PartitionOptions{Clients: 2, Alpha: math.NaN()}, "Dirichlet"},
		{10, PartitionOptions{Clients: 2, Alpha: math.Inf(1)}, "Dirichlet"},
		{10, PartitionOptions{Clients: 2, MinPerClient: -1}, "positive"},
	}
	for _, c := range cases {
		if _, err := PartitionIdentities(c.n, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d identities, %+v: err = %v, want %q", c.n, c.o, err, c.want)
		}
	}
}

// TestDirichletMoments checks the shares' mean 1/k and variance
// (1/k)(1−1/k)/(kα+1) of the symmetric Dirichlet distribution.
func TestDirichletMoments(t *testing.T) {
	for _, alpha := range []float64{0.2, 1, 5} {
		const k, draws = 4, 20000
		rng := rand.New(rand.NewPCG(7, uint64(alpha*10)))
		var sum, sq float64
		for range draws {
			p := Dirichlet(rng, alpha, k)
			tot := 0.0
			for _, x := range p {
				if x < 0 || x > 1 {
					t.Fatalf("share %g outside [0, 1]", x)
				}
				tot += x
			}
			if math.Abs(tot-1) > 1e-9 {
				t.Fatalf("shares sum to %g", tot)
			}
			sum += p[0]
			sq += p[0] * p[0]
		}
		mean := sum / draws
		v := sq/draws - mean*mean
		wantV := (1.0 / k) * (1 - 1.0/k) / (k*alpha + 1)
		if math.Abs(mean-0.25) > 0.01 || math.Abs(v-wantV)/wantV > 0.08 {
			t.Errorf("α = %g: mean %.4f variance %.5f, want 0.25 and %.5f", alpha, mean, v, wantV)
		}
	}
}

func TestExamplesOf(t *testing.T) {
	identity := []int{0, 1, 0, 2, 2, 3}
	got, err := ExamplesOf(identity, [][]int{{0, 3}, {2}, {1}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{0, 2, 5}, {3, 4}, {1}}
	for k := range want {
		if !slices.Equal(got[k], want[k]) {
			t.Errorf("part %d: %v, want %v", k, got[k], want[k])
		}
	}
	if _, err := ExamplesOf(identity, [][]int{{0}, {0}}); err == nil {
		t.Error("an identity in two parts was accepted")
	}
	if _, err := ExamplesOf(identity, [][]int{{7}}); err == nil {
		t.Error("a part with identities but no examples was accepted")
	}
}
