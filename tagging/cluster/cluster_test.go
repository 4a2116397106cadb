package cluster

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/veil-privacy/veil/internal/vec"
)

// blobs returns n points around each centre (spread sd in each of dim
// coordinates) and their group.
func blobs(rng *rand.Rand, centres [][]float32, n int, sd float64) ([][]float32, []int) {
	var pts [][]float32
	var group []int
	for g, c := range centres {
		for k := 0; k < n; k++ {
			p := make([]float32, len(c))
			for i := range p {
				p[i] = c[i] + float32(rng.NormFloat64()*sd)
			}
			pts = append(pts, p)
			group = append(group, g)
		}
	}
	return pts, group
}

// centres returns k points of dim coordinates, pairwise at least 1 apart
// (one-hot vectors scaled to 1: distance √2·… ≥ 1).
func centres(k, dim int) [][]float32 {
	out := make([][]float32, k)
	for i := range out {
		out[i] = make([]float32, dim)
		out[i][i] = 1
	}
	return out
}

// samePartition reports whether two labellings group items alike.
func samePartition(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	ab, ba := map[int]int{}, map[int]int{}
	for i := range a {
		if x, ok := ab[a[i]]; ok && x != b[i] {
			return false
		}
		if x, ok := ba[b[i]]; ok && x != a[i] {
			return false
		}
		ab[a[i]], ba[b[i]] = b[i], a[i]
	}
	return true
}

func TestClusterRecoversSeparatedGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pts, group := blobs(rng, centres(4, 16), 12, 0.03)
	// An outlier far from everything must be a cluster of its own.
	far := make([]float32, 16)
	far[15] = -3
	pts = append(pts, far)
	group = append(group, 4)
	for _, a := range Algorithms {
		t.Run(string(a), func(t *testing.T) {
			o := Options{Algorithm: a, Distance: 0.5, MinPoints: 3, Iterations: 50, Seed: 7}
			got, err := Faces(pts, o)
			if err != nil {
				t.Fatal(err)
			}
			if !samePartition(got, group) {
				t.Fatalf("clusters %v, want the partition %v", got, group)
			}
			if got[0] != 0 || slices.Max(got) != 4 {
				t.Fatalf("labels not dense from 0: %v", got)
			}
		})
	}
}

func TestClusterThresholdSeparates(t *testing.T) {
	// Two pairs of points: within each pair 0.2 apart, pairs 0.6 apart.
	pts := [][]float32{{0, 0}, {0.2, 0}, {0.8, 0}, {1.0, 0}}
	for _, a := range Algorithms {
		for _, c := range []struct {
			dist float64
			want []int
		}{{0.1, []int{0, 1, 2, 3}}, {0.3, []int{0, 0, 1, 1}}, {1.1, []int{0, 0, 0, 0}}} {
			o := Options{Algorithm: a, Distance: c.dist, MinPoints: 1, Iterations: 20}
			got, err := Faces(pts, o)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s at %.1f: %v, want %v", a, c.dist, got, c.want)
			}
		}
	}
}

func TestDBSCANNoiseAndCore(t *testing.T) {
	// A chain a-b-c (0.3 apart) and d alone. With MinPoints 3 only b is
	// core, and it reaches a and c; d is noise (a singleton).
	pts := [][]float32{{0}, {0.3}, {0.6}, {5}}
	got, err := Faces(pts, Options{Algorithm: DBSCAN, Distance: 0.35, MinPoints: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 0, 0, 1}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// With MinPoints 4 nothing is core: all singletons.
	got, _ = Faces(pts, Options{Algorithm: DBSCAN, Distance: 0.35, MinPoints: 4})
	if want := []int{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// naiveLinkage is the textbook O(n³) agglomerative clustering: merge the
// closest pair of clusters while the linkage distance is within dist.
func naiveLinkage(pts [][]float32, linkage Algorithm, dist float64) []int {
	var cl [][]int
	for i := range pts {
		cl = append(cl, []int{i})
	}
	link := func(a, b []int) float64 {
		var s, m float64
		for _, i := range a {
			for _, j := range b {
				d := math.Sqrt(float64(vec.SqDist32(pts[i], pts[j])))
				s += d
				m = max(m, d)
			}
		}
		if linkage == AverageLinkage {
			return s / float64(len(a)*len(b))
		}
		return m
	}
	for len(cl) > 1 {
		bi, bj, bd := -1, -1, math.Inf(1)
		for i := range cl {
			for j := i + 1; j < len(cl); j++ {
				if d := link(cl[i], cl[j]); d < bd {
					bi, bj, bd = i, j, d
				}
			}
		}
		if bd > dist {
			break
		}
		cl[bi] = append(cl[bi], cl[bj]...)
		cl = append(cl[:bj], cl[bj+1:]...)
	}
	label := make([]int, len(pts))
	for k, c := range cl {
		for _, i := range c {
			label[i] = k
		}
	}
	return label
}

func TestDendrogramMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 20; trial++ {
		n := 5 + rng.IntN(40)
		pts := make([][]float32, n)
		for i := range pts {
			pts[i] = []float32{float32(rng.Float64()), float32(rng.Float64()), float32(rng.Float64())}
		}
		for _, a := range []Algorithm{AverageLinkage, CompleteLinkage} {
			d, err := NewDendrogram(pts, a)
			if err != nil {
				t.Fatal(err)
			}
			for _, cut := range []float64{0.1, 0.25, 0.4, 0.7} {
				got, want := d.Cut(cut), naiveLinkage(pts, a, cut)
				if !samePartition(got, want) {
					t.Fatalf("trial %d %s cut %.2f: %v, naive %v", trial, a, cut, got, want)
				}
			}
		}
	}
}

func TestChineseWhispersReproducible(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pts, _ := blobs(rng, centres(3, 8), 20, 0.2)
	o := Options{Algorithm: ChineseWhispers, Distance: 0.6, Iterations: 100, Seed: 11}
	a, err := Faces(pts, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Faces(pts, o)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different clusters")
	}
}

func TestJoinClusters(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	pts, group := blobs(rng, centres(3, 8), 10, 0.03)
	for _, a := range Algorithms {
		t.Run(string(a), func(t *testing.T) {
			o := Options{Algorithm: a, Distance: 0.5, MinPoints: 2, Iterations: 50}
			// Existing: the first 8 faces of groups 0 and 1, labelled 5 and 2
			// (labels need not be dense); group 2 is new.
			var existing, added [][]float32
			var labels, addedGroup []int
			for i, p := range pts {
				switch {
				case group[i] < 2 && i%10 < 8:
					existing = append(existing, p)
					labels = append(labels, []int{5, 2}[group[i]])
				default:
					added = append(added, p)
					addedGroup = append(addedGroup, group[i])
				}
			}
			got, err := Join(existing, labels, added, o)
			if err != nil {
				t.Fatal(err)
			}
			var newLabel = -1
			for k, g := range addedGroup {
				switch g {
				case 0, 1:
					if want := []int{5, 2}[g]; got[k] != want {
						t.Fatalf("face of group %d joined %d, want %d", g, got[k], want)
					}
				case 2:
					if got[k] < 6 {
						t.Fatalf("new group got existing or reused label %d", got[k])
					}
					if newLabel == -1 {
						newLabel = got[k]
					} else if got[k] != newLabel {
						t.Fatalf("new group split: %v", got)
					}
				}
			}
		})
	}
}

func TestClusterBadInput(t *testing.T) {
	ok := Options{Algorithm: AverageLinkage, Distance: 0.5}
	cases := []struct {
		name string
		pts  [][]float32
		o    Options
	}{
		{"unknown algorithm", [][]float32{{1}}, Options{Algorithm: "kmeans", Distance: 0.5}},
		{"zero distance", [][]float32{{1}}, Options{Algorithm: DBSCAN, MinPoints: 1}},
		{"NaN distance", [][]float32{{1}}, Options{Algorithm: DBSCAN, MinPoints: 1, Distance: math.NaN()}},
		{"no iterations", [][]float32{{1}}, Options{Algorithm: ChineseWhispers, Distance: 0.5}},
		{"ragged", [][]float32{{1, 2}, {1}}, ok},
		{"not finite", [][]float32{{float32(math.Inf(1))}}, ok},
	}
	for _, c := range cases {
		if _, err := Faces(c.pts, c.o); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	if _, err := Join([][]float32{{1}}, []int{0, 1}, nil, ok); err == nil {
		t.Error("labels of the wrong length accepted")
	}
}
