// Package cluster groups face descriptors: Chinese whispers, DBSCAN and
// average or complete linkage, from scratch (Faces), incrementally (Join)
// or over a precomputed neighbour graph or dendrogram for tuning. It is
// pure computation on descriptors: no storage, no keys, no SQLite; the
// tagging library stores what it returns.
package cluster

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/veil-privacy/veil/internal/vec"
)

// Algorithm names a way of grouping unnamed faces.
type Algorithm string

// The clustering algorithms. All take one distance (tagging's
// thresholds.go measures one per algorithm) and
// put every face in exactly one cluster; a face close to no other is a
// cluster of its own.
const (
	// ChineseWhispers is dlib's graph clustering (Biemann 2006): faces
	// closer than the distance are joined by an edge, every face starts in
	// its own cluster and, visited in random order, takes the label most
	// common among its neighbours (itself included), until nothing changes
	// or the iterations run out.
	ChineseWhispers Algorithm = "chinese-whispers"
	// DBSCAN (Ester et al. 1996), as Immich groups faces: a face with at
	// least MinPoints faces (itself included) within the distance is a
	// core face; clusters are the core faces connected through such
	// neighbourhoods plus the faces they reach; other faces are noise,
	// reported here as clusters of their own.
	DBSCAN Algorithm = "dbscan"
	// AverageLinkage is agglomerative clustering that merges the two
	// clusters of smallest mean pairwise distance while it is at most the
	// distance (UPGMA), computed exactly with the nearest-neighbour chain.
	// It keeps the n(n−1)/2 distances in memory: MaxAgglomerative faces.
	AverageLinkage Algorithm = "average"
	// CompleteLinkage merges on the largest pairwise distance instead: no
	// two faces of a cluster are farther apart than the distance.
	CompleteLinkage Algorithm = "complete"
)

// Algorithms lists the algorithms in the order they are measured.
var Algorithms = []Algorithm{ChineseWhispers, DBSCAN, AverageLinkage, CompleteLinkage}

// MaxAgglomerative is the most faces the agglomerative algorithms accept:
// their distance matrix of n(n−1)/2 float32 values is 800 MB at 20,000.
const MaxAgglomerative = 20000

// Options configure Cluster. Build them with NewOptions,
// which fills the measured defaults, or validate them with Validate.
type Options struct {
	Algorithm Algorithm
	// Distance is the Euclidean descriptor distance at or below which two
	// faces (or, for the linkages, two clusters) are joined.
	Distance float64
	// MinPoints is DBSCAN's neighbourhood size (the face included) that
	// makes a face a core face; ignored by the other algorithms.
	MinPoints int
	// Iterations bounds Chinese whispers' passes over all faces.
	Iterations int
	// Seed orders Chinese whispers' visits (clustering is reproducible).
	Seed uint64
}

// Validate checks the options.
func (o Options) Validate() error {
	switch o.Algorithm {
	case ChineseWhispers, DBSCAN, AverageLinkage, CompleteLinkage:
	default:
		return fmt.Errorf("unknown clustering algorithm %q (want one of %v)", o.Algorithm, Algorithms)
	}
	if !(o.Distance > 0) || math.IsInf(o.Distance, 0) {
		return fmt.Errorf("clustering distance %v must be positive and finite", o.Distance)
	}
	if o.Algorithm == DBSCAN && o.MinPoints < 1 {
		return fmt.Errorf("DBSCAN needs at least 1 point per neighbourhood, not %d", o.MinPoints)
	}
	if o.Algorithm == ChineseWhispers && o.Iterations < 1 {
		return fmt.Errorf("at least one iteration of Chinese whispers is needed, not %d", o.Iterations)
	}
	return nil
}

// checkDescriptors fails unless every descriptor has the same non-zero
// length and finite values.
func checkDescriptors(descs [][]float32) (int, error) {
	if len(descs) == 0 {
		return 0, nil
	}
	dim := len(descs[0])
	if dim == 0 {
		return 0, errors.New("empty face descriptor")
	}
	for i, d := range descs {
		if len(d) != dim {
			return 0, fmt.Errorf("face descriptor %d has %d values, the others %d", i, len(d), dim)
		}
		for _, v := range d {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return 0, fmt.Errorf("face descriptor %d is not finite", i)
			}
		}
	}
	return dim, nil
}

// Faces groups the descriptors and returns one label per descriptor:
// dense integers from 0, numbered in order of each cluster's first face.
func Faces(descs [][]float32, o Options) ([]int, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if _, err := checkDescriptors(descs); err != nil {
		return nil, err
	}
	switch o.Algorithm {
	case ChineseWhispers:
		return chineseWhispers(neighbours(descs, o.Distance), o.Iterations, o.Seed), nil
	case DBSCAN:
		return dbscan(neighbours(descs, o.Distance), o.MinPoints), nil
	default:
		d, err := NewDendrogram(descs, o.Algorithm)
		if err != nil {
			return nil, err
		}
		return d.Cut(o.Distance), nil
	}
}

// Neighbours lists, for every face, the other faces within a distance.
type Neighbours [][]int32

// neighbours is the ε-neighbourhood graph, by a full pairwise scan.
func neighbours(descs [][]float32, dist float64) Neighbours {
	nb := make(Neighbours, len(descs))
	lim := float32(dist * dist)
	for i := range descs {
		for j := i + 1; j < len(descs); j++ {
			if vec.SqDist32(descs[i], descs[j]) <= lim {
				nb[i] = append(nb[i], int32(j))
				nb[j] = append(nb[j], int32(i))
			}
		}
	}
	return nb
}

// NeighbourGraph is the pairwise distances below a largest threshold,
// computed once so that many thresholds can be tried (tuning).
type NeighbourGraph struct {
	n     int
	edges [][]edge
}

type edge struct {
	to   int32
	dist float32
}

// NewNeighbourGraph keeps every pair of faces within maxDist.
func NewNeighbourGraph(descs [][]float32, maxDist float64) (*NeighbourGraph, error) {
	if _, err := checkDescriptors(descs); err != nil {
		return nil, err
	}
	g := &NeighbourGraph{n: len(descs), edges: make([][]edge, len(descs))}
	lim := float32(maxDist * maxDist)
	for i := range descs {
		for j := i + 1; j < len(descs); j++ {
			if d := vec.SqDist32(descs[i], descs[j]); d <= lim {
				s := float32(math.Sqrt(float64(d)))
				g.edges[i] = append(g.edges[i], edge{int32(j), s})
				g.edges[j] = append(g.edges[j], edge{int32(i), s})
			}
		}
	}
	return g, nil
}

// Cluster runs Chinese whispers or DBSCAN on the graph's pairs within
// o.Distance (which must not exceed the graph's largest distance).
func (g *NeighbourGraph) Cluster(o Options) ([]int, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	nb := make(Neighbours, g.n)
	for i, es := range g.edges {
		for _, e := range es {
			if float64(e.dist) <= o.Distance {
				nb[i] = append(nb[i], e.to)
			}
		}
	}
	switch o.Algorithm {
	case ChineseWhispers:
		return chineseWhispers(nb, o.Iterations, o.Seed), nil
	case DBSCAN:
		return dbscan(nb, o.MinPoints), nil
	}
	return nil, fmt.Errorf("a neighbour graph clusters with Chinese whispers or DBSCAN, not %s", o.Algorithm)
}

// chineseWhispers follows dlib's chinese_whispers: unweighted edges plus a
// self-edge, nodes visited in a random order each pass, ties broken by the
// smaller label so that a run is reproducible from its seed.
func chineseWhispers(nb Neighbours, iterations int, seed uint64) []int {
	n := len(nb)
	label := make([]int, n)
	for i := range label {
		label[i] = i
	}
	rng := rand.New(rand.NewPCG(seed, 0x7a6e))
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	count := map[int]int{}
	for it := 0; it < iterations; it++ {
		rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
		changed := false
		for _, i := range order {
			if len(nb[i]) == 0 {
				continue
			}
			clear(count)
			count[label[i]]++
			for _, j := range nb[i] {
				count[label[j]]++
			}
			best, bestN := label[i], count[label[i]]
			for l, c := range count {
				if c > bestN || (c == bestN && l < best) {
					best, bestN = l, c
				}
			}
			if best != label[i] {
				label[i] = best
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	return dense(label)
}

// dbscan labels the ε-neighbourhood graph; noise faces get labels of
// their own.
func dbscan(nb Neighbours, minPoints int) []int {
	n := len(nb)
	label := make([]int, n)
	for i := range label {
		label[i] = -1
	}
	core := func(i int) bool { return len(nb[i])+1 >= minPoints }
	next := 0
	var queue []int
	for i := 0; i < n; i++ {
		if label[i] >= 0 || !core(i) {
			continue
		}
		label[i] = next
		queue = append(queue[:0], i)
		for len(queue) > 0 {
			p := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			if !core(p) {
				continue
			}
			for _, q := range nb[p] {
				if label[q] < 0 {
					label[q] = next
					queue = append(queue, int(q))
				}
			}
		}
		next++
	}
	for i := range label {
		if label[i] < 0 {
			label[i] = next
			next++
		}
	}
	return dense(label)
}

// dense renumbers labels 0, 1, … in order of first appearance.
func dense(label []int) []int {
	m := map[int]int{}
	out := make([]int, len(label))
	for i, l := range label {
		d, ok := m[l]
		if !ok {
			d = len(m)
			m[l] = d
		}
		out[i] = d
	}
	return out
}

// Dendrogram is the full merge tree of an agglomerative clustering, so
// that it can be cut at any distance without recomputing it.
type Dendrogram struct {
	n      int
	merges []merge // in the order found; heights are those of the linkage
}

type merge struct {
	a, b   int32 // a face of each merged cluster
	height float32
}

// NewDendrogram builds the average- or complete-linkage tree of the
// descriptors with the nearest-neighbour chain algorithm (Murtagh 1983):
// O(n²) time and n(n−1)/2 float32 distances. Both linkages are
// reducible, so the chain's merges are exactly those of the greedy
// closest-pair algorithm and cutting at a height is well defined.
func NewDendrogram(descs [][]float32, linkage Algorithm) (*Dendrogram, error) {
	if linkage != AverageLinkage && linkage != CompleteLinkage {
		return nil, fmt.Errorf("agglomerative clustering takes average or complete linkage, not %s", linkage)
	}
	if _, err := checkDescriptors(descs); err != nil {
		return nil, err
	}
	n := len(descs)
	if n > MaxAgglomerative {
		return nil, fmt.Errorf("%d faces are too many for %s-linkage clustering (at most %d): use %s", n, linkage, MaxAgglomerative, ChineseWhispers)
	}
	d := &Dendrogram{n: n}
	if n < 2 {
		return d, nil
	}
	// Condensed upper triangle: pair (i<j) at i*n − i(i+1)/2 + j − i − 1.
	row := func(i int) int { return i*n - i*(i+1)/2 - i - 1 }
	dist := make([]float32, n*(n-1)/2)
	for i := 0; i < n; i++ {
		r := row(i)
		for j := i + 1; j < n; j++ {
			dist[r+j] = float32(math.Sqrt(float64(vec.SqDist32(descs[i], descs[j]))))
		}
	}
	at := func(i, j int) int {
		if i > j {
			i, j = j, i
		}
		return row(i) + j
	}
	size := make([]int, n)
	active := make([]bool, n)
	for i := range size {
		size[i], active[i] = 1, true
	}
	chain := make([]int, 0, n)
	for remaining := n; remaining > 1; {
		if len(chain) == 0 {
			for i := 0; i < n; i++ {
				if active[i] {
					chain = append(chain, i)
					break
				}
			}
		}
		for {
			a := chain[len(chain)-1]
			prev := -1
			if len(chain) > 1 {
				prev = chain[len(chain)-2]
			}
			// Nearest active cluster to a; the chain's predecessor wins
			// ties so the chain always ends in a reciprocal pair.
			best, bestD := -1, float32(math.Inf(1))
			if prev >= 0 {
				best, bestD = prev, dist[at(a, prev)]
			}
			for j := 0; j < n; j++ {
				if j == a || !active[j] {
					continue
				}
				if dj := dist[at(a, j)]; dj < bestD {
					best, bestD = j, dj
				}
			}
			if best == prev {
				chain = chain[:len(chain)-2]
				// Merge b into a (a keeps the index).
				b := prev
				if a > b {
					a, b = b, a
				}
				d.merges = append(d.merges, merge{int32(a), int32(b), bestD})
				for k := 0; k < n; k++ {
					if !active[k] || k == a || k == b {
						continue
					}
					da, db := dist[at(a, k)], dist[at(b, k)]
					if linkage == AverageLinkage {
						dist[at(a, k)] = (float32(size[a])*da + float32(size[b])*db) / float32(size[a]+size[b])
					} else {
						dist[at(a, k)] = max(da, db)
					}
				}
				size[a] += size[b]
				active[b] = false
				remaining--
				break
			}
			chain = append(chain, best)
		}
	}
	return d, nil
}

// Cut returns the clusters of the merges at or below a height, labelled
// like Cluster's.
func (d *Dendrogram) Cut(height float64) []int {
	parent := make([]int, d.n)
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	for _, m := range d.merges {
		if float64(m.height) <= height {
			a, b := find(int(m.a)), find(int(m.b))
			if a != b {
				parent[b] = a
			}
		}
	}
	label := make([]int, d.n)
	for i := range label {
		label[i] = find(i)
	}
	return dense(label)
}

// Join adds new faces to an existing clustering incrementally, as
// a library does when photos are added: existing labels never change. Each
// new face joins the existing cluster it is closest to by the algorithm's
// own rule, if that is within o.Distance: mean distance to the cluster's
// faces (average linkage), largest distance (complete linkage), most
// neighbours within the distance (Chinese whispers) or the nearest core
// face's cluster (DBSCAN: any face of an existing cluster with at least
// MinPoints−1 of the new face's neighbours). The faces that join nothing
// are clustered among themselves and numbered after the largest existing
// label. It returns the labels of the new faces.
func Join(existing [][]float32, labels []int, added [][]float32, o Options) ([]int, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(existing) != len(labels) {
		return nil, fmt.Errorf("%d existing faces but %d labels", len(existing), len(labels))
	}
	all := append(append([][]float32{}, existing...), added...)
	if _, err := checkDescriptors(all); err != nil {
		return nil, err
	}
	next := 0
	members := map[int][]int{}
	for i, l := range labels {
		if l < 0 {
			return nil, fmt.Errorf("existing face %d has negative cluster label %d", i, l)
		}
		members[l] = append(members[l], i)
		next = max(next, l+1)
	}
	ids := make([]int, 0, len(members))
	for l := range members {
		ids = append(ids, l)
	}
	sort.Ints(ids)
	out := make([]int, len(added))
	var rest []int
	lim := float32(o.Distance * o.Distance)
	for ai, q := range added {
		best, bestScore := -1, math.Inf(1)
		switch o.Algorithm {
		case AverageLinkage, CompleteLinkage:
			for _, l := range ids {
				var agg float64
				for _, i := range members[l] {
					dd := math.Sqrt(float64(vec.SqDist32(q, existing[i])))
					if o.Algorithm == AverageLinkage {
						agg += dd
					} else {
						agg = max(agg, dd)
					}
				}
				if o.Algorithm == AverageLinkage {
					agg /= float64(len(members[l]))
				}
				if agg <= o.Distance && agg < bestScore {
					best, bestScore = l, agg
				}
			}
		case ChineseWhispers:
			count := map[int]int{}
			nearest := map[int]float32{}
			for i, e := range existing {
				if dd := vec.SqDist32(q, e); dd <= lim {
					l := labels[i]
					count[l]++
					if v, ok := nearest[l]; !ok || dd < v {
						nearest[l] = dd
					}
				}
			}
			// Most neighbours wins; ties go to the nearer cluster.
			for l, c := range count {
				s := -float64(c) + float64(nearest[l])/float64(lim+1)
				if s < bestScore {
					best, bestScore = l, s
				}
			}
		case DBSCAN:
			var within []int
			for i, e := range existing {
				if vec.SqDist32(q, e) <= lim {
					within = append(within, i)
				}
			}
			if len(within)+1 >= o.MinPoints {
				for _, i := range within {
					if dd := float64(vec.SqDist32(q, existing[i])); dd < bestScore {
						best, bestScore = labels[i], dd
					}
				}
			}
		}
		if best >= 0 {
			out[ai] = best
		} else {
			rest = append(rest, ai)
		}
	}
	if len(rest) > 0 {
		sub := make([][]float32, len(rest))
		for k, ai := range rest {
			sub[k] = added[ai]
		}
		l, err := Faces(sub, o)
		if err != nil {
			return nil, err
		}
		for k, ai := range rest {
			out[ai] = next + l[k]
		}
	}
	return out, nil
}
