package eval

// Unlinkability of faceprints across libraries (Irene, Section IV.E).
//
// Two people each keep a face library. Each library stores its faces'
// faceprints in its own space: V·x for the face's descriptor x and the
// library's own map V (package metric: a secret random rotation drawn from
// the library's key, then LMNN learned from the library's names). Irene
// claims that because every library's V differs, two colluding users who
// pool their faceprint collections cannot match them: comparing them with
// the threshold a user tags with, the nearest-neighbour search gives the
// wrong tag 93.4% of the time.
//
// This file measures that claim and a stronger adversary:
//
//   - Direct comparison (LinkNearest): every face of library B is tagged
//     with the person of its nearest face in library A if their distance is
//     within A's own tagging threshold. "Linked" is the share of B's faces
//     of people A also has that receive the right person; Irene's mis-tag
//     rate is 1 − linked.
//   - The aligning adversary (AlignAttack): the colluders know m people
//     both libraries have (say, a public figure both users named). From the
//     centroids of those people's faceprints in each space they fit a
//     linear map from B's space to A's, by orthogonal Procrustes (a
//     rotation and a scale) or by least squares (any linear map, ridge-
//     regularised), map B's faceprints through it and compare as above, on
//     the shared people they did not know.
//
// The attack functions see faceprints and the adversary's knowledge only
// (which people are known), never a library's key or map: that is the
// boundary the experiment enforces by construction.

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/veil-privacy/veil/internal/vec"
)

// LinkLibrary is one library's faces as a colluding adversary holds them:
// faceprints in the library's own space, each face's person (ground truth,
// the same id in both libraries for the same person, used to score the
// attack and to pick the adversary's known people) and the distance
// threshold the library tags with.
type LinkLibrary struct {
	Faceprints [][]float64
	People     []int
	Threshold  float64
}

func (l LinkLibrary) validate(what string) error {
	if len(l.Faceprints) == 0 {
		return fmt.Errorf("eval: %s library has no faces", what)
	}
	if len(l.People) != len(l.Faceprints) {
		return fmt.Errorf("eval: %s library has %d faceprints but %d person labels", what, len(l.Faceprints), len(l.People))
	}
	d := len(l.Faceprints[0])
	if d == 0 {
		return fmt.Errorf("eval: %s library's faceprints are empty", what)
	}
	for i, f := range l.Faceprints {
		if len(f) != d {
			return fmt.Errorf("eval: %s library's faceprint %d has %d values, the first has %d", what, i, len(f), d)
		}
		for _, v := range f {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("eval: %s library's faceprint %d is not finite", what, i)
			}
		}
	}
	if !(l.Threshold >= 0) || math.IsInf(l.Threshold, 0) {
		return fmt.Errorf("eval: %s library's threshold %v is not a finite distance", what, l.Threshold)
	}
	return nil
}

// LinkCounts counts the outcomes of tagging probe faces by their nearest
// gallery face.
type LinkCounts struct {
	// Probes are the probe faces of people the gallery has.
	Probes int `json:"probes"`
	// Linked: the nearest gallery face is within the threshold and of the
	// same person (the adversary links the two faceprints correctly).
	Linked int `json:"linked"`
	// WrongTag: within the threshold but another person.
	WrongTag int `json:"wrong_tag"`
	// NearestCorrect: the nearest gallery face is of the same person,
	// whatever its distance (a forced choice, no threshold).
	NearestCorrect int `json:"nearest_correct"`
	// Strangers are probe faces of people the gallery does not have;
	// StrangersTagged of them were within the threshold of some face.
	Strangers       int `json:"strangers"`
	StrangersTagged int `json:"strangers_tagged"`
}

// Add returns the sum of two counts (pooling trials).
func (c LinkCounts) Add(o LinkCounts) LinkCounts {
	return LinkCounts{Probes: c.Probes + o.Probes, Linked: c.Linked + o.Linked, WrongTag: c.WrongTag + o.WrongTag,
		NearestCorrect: c.NearestCorrect + o.NearestCorrect, Strangers: c.Strangers + o.Strangers,
		StrangersTagged: c.StrangersTagged + o.StrangersTagged}
}

// LinkRates are LinkCounts as shares.
type LinkRates struct {
	Probes int `json:"probes"`
	// Linked is the share of probe faces tagged with the right person.
	Linked float64 `json:"linked"`
	// MisTag = 1 − Linked: the share not tagged right (a wrong tag or
	// none), Irene's "wrong tags with a probability of 93.4%".
	MisTag float64 `json:"mis_tag"`
	// WrongTag and NoTag split MisTag.
	WrongTag float64 `json:"wrong_tag"`
	NoTag    float64 `json:"no_tag"`
	// NearestCorrect is the forced-choice rate (no threshold).
	NearestCorrect float64 `json:"nearest_correct"`
	// StrangersTagged is the share of faces of people the gallery lacks
	// that received a tag (necessarily wrong).
	StrangersTagged float64 `json:"strangers_tagged"`
}

// Rates converts counts to shares (0 where the denominator is 0).
func (c LinkCounts) Rates() LinkRates {
	share := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	r := LinkRates{Probes: c.Probes, Linked: share(c.Linked, c.Probes), WrongTag: share(c.WrongTag, c.Probes),
		NearestCorrect: share(c.NearestCorrect, c.Probes), StrangersTagged: share(c.StrangersTagged, c.Strangers)}
	if c.Probes > 0 {
		r.MisTag = 1 - r.Linked
		r.NoTag = share(c.Probes-c.Linked-c.WrongTag, c.Probes)
	}
	return r
}

// LinkNearest tags each probe face with the person of its nearest gallery
// face when their Euclidean distance is at most threshold, and counts the
// outcomes. Probe faces whose person is in skip are left out (the people
// an aligning adversary already knew). Probe faces of people the gallery
// lacks are counted as strangers.
func LinkNearest(gallery LinkLibrary, probes [][]float64, probePeople []int, threshold float64, skip map[int]bool) (LinkCounts, error) {
	if err := gallery.validate("gallery"); err != nil {
		return LinkCounts{}, err
	}
	if len(probes) != len(probePeople) {
		return LinkCounts{}, fmt.Errorf("eval: %d probe faceprints but %d person labels", len(probes), len(probePeople))
	}
	if !(threshold >= 0) || math.IsInf(threshold, 0) {
		return LinkCounts{}, fmt.Errorf("eval: threshold %v is not a finite distance", threshold)
	}
	d := len(gallery.Faceprints[0])
	has := map[int]bool{}
	for _, p := range gallery.People {
		has[p] = true
	}
	t2 := threshold * threshold
	var c LinkCounts
	for i, x := range probes {
		if len(x) != d {
			return LinkCounts{}, fmt.Errorf("eval: probe faceprint %d has %d values, the gallery's have %d", i, len(x), d)
		}
		person := probePeople[i]
		if skip[person] {
			continue
		}
		best, bestD := -1, math.Inf(1)
		for j, g := range gallery.Faceprints {
			if s := vec.SqDist(x, g); s < bestD {
				best, bestD = j, s
			}
		}
		if math.IsNaN(bestD) {
			return LinkCounts{}, fmt.Errorf("eval: probe faceprint %d is not finite", i)
		}
		tagged := bestD <= t2
		if !has[person] {
			c.Strangers++
			if tagged {
				c.StrangersTagged++
			}
			continue
		}
		c.Probes++
		same := gallery.People[best] == person
		if same {
			c.NearestCorrect++
		}
		switch {
		case tagged && same:
			c.Linked++
		case tagged:
			c.WrongTag++
		}
	}
	return c, nil
}

// LinkWithin is the library's own tagging, leave-one-out: each face of a
// person in people (all people when nil) is tagged by its nearest other
// face of the library within the library's threshold. It is the ceiling
// the cross-library adversary is compared with.
func LinkWithin(lib LinkLibrary, people map[int]bool) (LinkCounts, error) {
	if err := lib.validate("the"); err != nil {
		return LinkCounts{}, err
	}
	t2 := lib.Threshold * lib.Threshold
	var c LinkCounts
	for i, x := range lib.Faceprints {
		person := lib.People[i]
		if people != nil && !people[person] {
			continue
		}
		best, bestD := -1, math.Inf(1)
		others := false
		for j, g := range lib.Faceprints {
			if j == i {
				continue
			}
			if lib.People[j] == person {
				others = true
			}
			if s := vec.SqDist(x, g); s < bestD {
				best, bestD = j, s
			}
		}
		if best < 0 || !others {
			continue // a person with one face cannot be tagged from the others
		}
		c.Probes++
		same := lib.People[best] == person
		if same {
			c.NearestCorrect++
		}
		switch {
		case bestD <= t2 && same:
			c.Linked++
		case bestD <= t2:
			c.WrongTag++
		}
	}
	return c, nil
}

// BalancedThreshold returns the distance threshold that best separates a
// library's same-person pairs from its different-person pairs with both
// classes weighted equally (the mean of the true-accept and true-reject
// rates, as on LFW's balanced pairs), over every pair of its faces. This
// is how a library calibrates the threshold it tags with on its own names;
// it needs at least one pair of each kind.
func BalancedThreshold(faceprints [][]float64, people []int) (float64, error) {
	if len(faceprints) != len(people) {
		return 0, fmt.Errorf("eval: %d faceprints but %d person labels", len(faceprints), len(people))
	}
	type pd struct {
		d    float64
		same bool
	}
	var pairs []pd
	nSame := 0
	for i := range faceprints {
		for j := i + 1; j < len(faceprints); j++ {
			if len(faceprints[i]) != len(faceprints[j]) {
				return 0, fmt.Errorf("eval: faceprints %d and %d differ in length", i, j)
			}
			s := people[i] == people[j]
			if s {
				nSame++
			}
			pairs = append(pairs, pd{math.Sqrt(vec.SqDist(faceprints[i], faceprints[j])), s})
		}
	}
	nDiff := len(pairs) - nSame
	if nSame == 0 || nDiff == 0 {
		return 0, errors.New("eval: calibrating a threshold needs both same-person and different-person pairs")
	}
	sort.Slice(pairs, func(a, b int) bool { return pairs[a].d < pairs[b].d })
	// Threshold between pairs[k-1] and pairs[k] accepts the first k.
	best, bestK := -1.0, 0
	accS, accD := 0, 0
	for k := 0; k <= len(pairs); k++ {
		if k > 0 {
			if pairs[k-1].same {
				accS++
			} else {
				accD++
			}
		}
		if k > 0 && k < len(pairs) && pairs[k].d == pairs[k-1].d {
			continue // a threshold cannot split tied distances
		}
		bal := (float64(accS)/float64(nSame) + float64(nDiff-accD)/float64(nDiff)) / 2
		if bal > best {
			best, bestK = bal, k
		}
	}
	switch {
	case bestK == 0:
		return pairs[0].d / 2, nil
	case bestK == len(pairs):
		return pairs[len(pairs)-1].d, nil
	}
	return (pairs[bestK-1].d + pairs[bestK].d) / 2, nil
}

// AlignMethod is how the aligning adversary fits a map between two
// libraries' spaces.
type AlignMethod string

const (
	// AlignProcrustes fits s·Q, Q orthogonal and s > 0, minimising
	// Σ‖s·Q·p − g‖² (orthogonal Procrustes with a scale): exact against
	// two secret rotations, an approximation against learned metrics.
	AlignProcrustes AlignMethod = "procrustes"
	// AlignLeastSquares fits any linear M minimising
	// Σ‖M·p − g‖² + λ‖M‖²_F with a small ridge λ (needed when fewer
	// known pairs than dimensions leave M underdetermined).
	AlignLeastSquares AlignMethod = "least-squares"
)

// ridgeFraction sets least squares' λ relative to the mean energy per
// dimension of the known points: small enough not to bias a determined
// fit, large enough to give the minimum-norm answer when underdetermined.
const ridgeFraction = 1e-3

// Alignment is a linear map from one library's faceprint space to
// another's, fitted by an adversary.
type Alignment struct {
	out, in int
	m       []float64 // out × in, row-major
}

// Apply returns M·x.
func (a *Alignment) Apply(x []float64) []float64 {
	y := make([]float64, a.out)
	for r := range a.out {
		y[r] = vec.Dot(a.m[r*a.in:(r+1)*a.in], x)
	}
	return y
}

// FitAlignment fits a map sending from[i] near to[i] for every known pair.
// Both sides must have the same dimension for Procrustes; least squares
// allows different dimensions.
func FitAlignment(method AlignMethod, from, to [][]float64) (*Alignment, error) {
	if len(from) == 0 || len(from) != len(to) {
		return nil, fmt.Errorf("eval: aligning needs matched known points, got %d and %d", len(from), len(to))
	}
	in, out := len(from[0]), len(to[0])
	if in == 0 || out == 0 {
		return nil, errors.New("eval: aligning empty faceprints")
	}
	for i := range from {
		if len(from[i]) != in || len(to[i]) != out {
			return nil, fmt.Errorf("eval: known point %d has the wrong length", i)
		}
	}
	// cross = Σ g pᵀ (out × in)
	cross := make([]float64, out*in)
	for i := range from {
		for r := range out {
			if g := to[i][r]; g != 0 {
				vec.Axpy(g, from[i], cross[r*in:(r+1)*in])
			}
		}
	}
	switch method {
	case AlignProcrustes:
		if in != out {
			return nil, fmt.Errorf("eval: Procrustes aligns spaces of one dimension, got %d and %d", in, out)
		}
		u, s, v := vec.SVDSquare(cross, in)
		// Q = U Vᵀ, s = tr(Σ) / Σ‖p‖².
		q := make([]float64, in*in)
		for r := range in {
			for c := range in {
				var t float64
				for k := range in {
					t += u[r*in+k] * v[c*in+k]
				}
				q[r*in+c] = t
			}
		}
		var trace, energy float64
		for _, x := range s {
			trace += x
		}
		for _, p := range from {
			energy += vec.Dot(p, p)
		}
		if energy == 0 {
			return nil, errors.New("eval: the known points are all zero")
		}
		scale := trace / energy
		for i := range q {
			q[i] *= scale
		}
		return &Alignment{out: in, in: in, m: q}, nil
	case AlignLeastSquares:
		// M = (Σ g pᵀ)(Σ p pᵀ + λI)⁻¹: solve (C + λI) Mᵀ = crossᵀ.
		c := make([]float64, in*in)
		for _, p := range from {
			for r := range in {
				if p[r] != 0 {
					vec.Axpy(p[r], p, c[r*in:(r+1)*in])
				}
			}
		}
		var tr float64
		for r := range in {
			tr += c[r*in+r]
		}
		if tr == 0 {
			return nil, errors.New("eval: the known points are all zero")
		}
		lam := ridgeFraction * tr / float64(in)
		for r := range in {
			c[r*in+r] += lam
		}
		l, err := cholesky(c, in)
		if err != nil {
			return nil, err
		}
		m := make([]float64, out*in)
		rhs := make([]float64, in)
		for r := range out {
			copy(rhs, cross[r*in:(r+1)*in])
			cholSolve(l, in, rhs)
			copy(m[r*in:], rhs)
		}
		return &Alignment{out: out, in: in, m: m}, nil
	}
	return nil, fmt.Errorf("eval: unknown alignment method %q (want %s or %s)", method, AlignProcrustes, AlignLeastSquares)
}

// Centroids returns, for each person in people, the mean of lib's
// faceprints of that person. It fails if lib has no face of one of them.
func Centroids(lib LinkLibrary, people []int) ([][]float64, error) {
	if err := lib.validate("the"); err != nil {
		return nil, err
	}
	d := len(lib.Faceprints[0])
	idx := make(map[int]int, len(people))
	out := make([][]float64, len(people))
	count := make([]int, len(people))
	for k, p := range people {
		idx[p] = k
		out[k] = make([]float64, d)
	}
	for i, p := range lib.People {
		if k, ok := idx[p]; ok {
			vec.Axpy(1, lib.Faceprints[i], out[k])
			count[k]++
		}
	}
	for k, n := range count {
		if n == 0 {
			return nil, fmt.Errorf("eval: the library has no face of known person %d", people[k])
		}
		for j := range out[k] {
			out[k][j] /= float64(n)
		}
	}
	return out, nil
}

// AlignAttack is the aligning adversary: knowing which people of the
// probe library are which people of the gallery for the people in known,
// it fits a map from the probe library's space to the gallery's on their
// centroids, maps every probe faceprint through it, and tags them by
// their nearest gallery face within the gallery's threshold. The known
// people's own faces are not scored, nor those of the people in exclude
// (nil for none). With no known people it is the direct comparison.
func AlignAttack(gallery, probe LinkLibrary, known []int, method AlignMethod, exclude map[int]bool) (LinkCounts, error) {
	if err := probe.validate("probe"); err != nil {
		return LinkCounts{}, err
	}
	skip := make(map[int]bool, len(known)+len(exclude))
	for _, p := range known {
		skip[p] = true
	}
	for p, ok := range exclude {
		if ok {
			skip[p] = true
		}
	}
	mapped := probe.Faceprints
	if len(known) > 0 {
		from, err := Centroids(probe, known)
		if err != nil {
			return LinkCounts{}, err
		}
		to, err := Centroids(gallery, known)
		if err != nil {
			return LinkCounts{}, err
		}
		a, err := FitAlignment(method, from, to)
		if err != nil {
			return LinkCounts{}, err
		}
		mapped = make([][]float64, len(probe.Faceprints))
		for i, x := range probe.Faceprints {
			mapped[i] = a.Apply(x)
		}
	}
	return LinkNearest(gallery, mapped, probe.People, gallery.Threshold, skip)
}

// cholesky returns the lower-triangular L with L·Lᵀ = a (n × n, symmetric
// positive definite, row-major).
func cholesky(a []float64, n int) ([]float64, error) {
	l := make([]float64, n*n)
	for i := range n {
		for j := 0; j <= i; j++ {
			s := a[i*n+j]
			for k := range j {
				s -= l[i*n+k] * l[j*n+k]
			}
			if i == j {
				if !(s > 0) {
					return nil, errors.New("eval: the known points' Gram matrix is not positive definite")
				}
				l[i*n+i] = math.Sqrt(s)
			} else {
				l[i*n+j] = s / l[j*n+j]
			}
		}
	}
	return l, nil
}

// cholSolve solves L·Lᵀ·x = b in place.
func cholSolve(l []float64, n int, b []float64) {
	for i := range n {
		s := b[i]
		for k := range i {
			s -= l[i*n+k] * b[k]
		}
		b[i] = s / l[i*n+i]
	}
	for i := n - 1; i >= 0; i-- {
		s := b[i]
		for k := i + 1; k < n; k++ {
			s -= l[k*n+i] * b[k]
		}
		b[i] = s / l[i*n+i]
	}
}
