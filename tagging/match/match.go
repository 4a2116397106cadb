// Package match finds the people faces most likely are, from a gallery of
// named faces: nearest-neighbour scans (Gallery), the suggestion rule
// (Suggest: nearest person within a distance and ahead of the next by a
// margin), the review queue and the search of a query photo. It is pure
// computation on descriptors and ids: no storage, no keys, no SQLite; the
// tagging library feeds it and stores the user's answers.
package match

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/veil-privacy/veil/internal/vec"
)

// Gallery is a flat index of faces for nearest-neighbour scans: the
// descriptors one after another in one []float32, so that a query is one
// pass over contiguous memory with the SIMD distance kernel (100,000
// faces in a few milliseconds on one core; see BenchmarkNearest).
type Gallery struct {
	dim    int
	vecs   []float32
	faces  []int64
	photos []int64
	people []int64 // 0: nobody named
}

// NewGallery returns an empty gallery of descriptors of dim values.
func NewGallery(dim int) (*Gallery, error) {
	if dim < 1 {
		return nil, fmt.Errorf("descriptor length %d must be positive", dim)
	}
	return &Gallery{dim: dim}, nil
}

// Add appends a face of a photo; person is 0 for a face nobody named.
func (g *Gallery) Add(face, photo, person int64, desc []float32) error {
	if len(desc) != g.dim {
		return fmt.Errorf("face %d: descriptor has %d values, the gallery %d", face, len(desc), g.dim)
	}
	for _, v := range desc {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("face %d: descriptor is not finite", face)
		}
	}
	g.vecs = append(g.vecs, desc...)
	g.faces = append(g.faces, face)
	g.photos = append(g.photos, photo)
	g.people = append(g.people, person)
	return nil
}

// Len is the number of faces.
func (g *Gallery) Len() int { return len(g.faces) }

// Dim is the descriptor length.
func (g *Gallery) Dim() int { return g.dim }

// Map returns a gallery of the same faces with each descriptor replaced
// by f's image of it, of length dim (a learned metric's space). f's error,
// or Add's for a value it returns, is returned as it is.
func (g *Gallery) Map(dim int, f func(desc []float32) ([]float32, error)) (*Gallery, error) {
	m, err := NewGallery(dim)
	if err != nil {
		return nil, err
	}
	for r := range g.faces {
		y, err := f(g.vecs[r*g.dim : (r+1)*g.dim])
		if err != nil {
			return nil, err
		}
		if err := m.Add(g.faces[r], g.photos[r], g.people[r], y); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// PersonDistance is a person and the distance of the person's nearest
// named face; Person 0 means none.
type PersonDistance struct {
	Person   int64
	Distance float64
}

// Nearest returns the two people whose nearest named faces are closest to
// q, skipping unnamed faces and the people exclude reports (nil: none).
// A q of another length than Dim matches nobody.
func (g *Gallery) Nearest(q []float32, exclude func(person int64) bool) (best, second PersonDistance) {
	if len(q) != g.dim {
		return PersonDistance{Distance: math.Inf(1)}, PersonDistance{Distance: math.Inf(1)}
	}
	var p1, p2 int64
	d1, d2 := float32(math.Inf(1)), float32(math.Inf(1))
	var buf [nearestBlock]float32
	for start := 0; start < len(g.people); start += nearestBlock {
		end := min(start+nearestBlock, len(g.people))
		dist := buf[:end-start]
		g.distances(q, start, dist)
		for k, d := range dist {
			p := g.people[start+k]
			if d >= d2 || p == 0 {
				continue
			}
			if p == p1 {
				d1 = min(d1, d)
				continue
			}
			if exclude != nil && exclude(p) {
				continue
			}
			if d < d1 {
				p2, d2 = p1, d1
				p1, d1 = p, d
			} else {
				p2, d2 = p, d
			}
		}
	}
	best = PersonDistance{p1, math.Sqrt(float64(d1))}
	second = PersonDistance{p2, math.Sqrt(float64(d2))}
	return best, second
}

// nearestBlock is how many squared distances a scan computes before
// reading them (a block stays in the first-level cache).
const nearestBlock = 256

// distances writes the squared distances of q to rows start… into out.
func (g *Gallery) distances(q []float32, start int, out []float32) {
	rows := g.vecs[start*g.dim : (start+len(out))*g.dim]
	if g.dim == 128 {
		vec.SqDistRows128((*[128]float32)(q), rows, out)
		return
	}
	for r := range out {
		out[r] = vec.SqDist32(q, rows[r*g.dim:(r+1)*g.dim])
	}
}

// FaceMatch is a face of the gallery and its distance to a query.
type FaceMatch struct {
	Face     int64   `json:"face"`
	Photo    int64   `json:"photo"`
	Person   int64   `json:"person,omitempty"`
	Distance float64 `json:"distance"`
}

// Within returns the gallery's faces within dist of q, nearest first, at
// most limit of them (limit ≤ 0: all).
func (g *Gallery) Within(q []float32, dist float64, limit int) []FaceMatch {
	lim := float32(dist * dist)
	var out []FaceMatch
	for r := range g.faces {
		if d := vec.SqDist32(q, g.vecs[r*g.dim:(r+1)*g.dim]); d <= lim {
			out = append(out, FaceMatch{g.faces[r], g.photos[r], g.people[r], math.Sqrt(float64(d))})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Distance != out[j].Distance {
			return out[i].Distance < out[j].Distance
		}
		return out[i].Face < out[j].Face
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// SuggestOptions configure Suggest. tagging.DefaultSuggestOptions holds
// the values measured on the face pipeline's descriptors.
type SuggestOptions struct {
	// Distance: suggest a person only if one of the person's named faces
	// is at most this far.
	Distance float64
	// Margin: abstain unless the next person's nearest named face is
	// farther by more than this.
	Margin float64
}

// Validate checks the options.
func (o SuggestOptions) Validate() error {
	if !(o.Distance > 0) || math.IsInf(o.Distance, 0) {
		return fmt.Errorf("suggestion distance %v must be positive and finite", o.Distance)
	}
	if !(o.Margin >= 0) || math.IsInf(o.Margin, 0) {
		return fmt.Errorf("suggestion margin %v must be zero or positive and finite", o.Margin)
	}
	return nil
}

// Accepts reports whether Suggest's rule proposes best, given the two
// nearest people (Gallery.Nearest): best is a person within o.Distance and
// no second person is within o.Margin of it. It is the rule alone, without
// Suggest's per-photo and rejection rules, so benchmarks score exactly the
// rule the library applies.
func (o SuggestOptions) Accepts(best, second PersonDistance) bool {
	if best.Person == 0 || best.Distance > o.Distance {
		return false
	}
	return !(second.Person != 0 && second.Distance-best.Distance <= o.Margin)
}

// Unnamed is a face waiting for a suggestion.
type Unnamed struct {
	Face, Photo int64
	Descriptor  []float32
}

// Suggestion proposes a person for an unnamed face.
type Suggestion struct {
	Face     int64   `json:"face"`
	Person   int64   `json:"person"`
	Distance float64 `json:"distance"`
}

// Rejection is a (face, person) pair the user said is wrong.
type Rejection struct{ Face, Person int64 }

// Suggest proposes, for each unnamed face, the person whose nearest named
// face in the gallery is closest, when that is within o.Distance and the
// next person is more than o.Margin farther. It never proposes a person
// the user rejected for that face, nor a person already named in the
// face's photo, and never the same person for two faces of one photo
// (the closer face keeps the suggestion and the other abstains: both
// cannot be right, and guessing a second choice would be less precise).
// Suggestions come in the order of the unnamed faces.
func Suggest(named *Gallery, unnamed []Unnamed, rejected []Rejection, o SuggestOptions) ([]Suggestion, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if named == nil {
		return nil, errors.New("no gallery of named faces")
	}
	inPhoto := map[int64]map[int64]bool{} // photo → people named in it
	for r, p := range named.people {
		if p == 0 {
			continue
		}
		m := inPhoto[named.photos[r]]
		if m == nil {
			m = map[int64]bool{}
			inPhoto[named.photos[r]] = m
		}
		m[p] = true
	}
	rej := map[int64]map[int64]bool{}
	for _, r := range rejected {
		if rej[r.Face] == nil {
			rej[r.Face] = map[int64]bool{}
		}
		rej[r.Face][r.Person] = true
	}
	var out []Suggestion
	for _, u := range unnamed {
		if len(u.Descriptor) != named.dim {
			return nil, fmt.Errorf("face %d: descriptor has %d values, the gallery %d", u.Face, len(u.Descriptor), named.dim)
		}
		photoPeople, faceRej := inPhoto[u.Photo], rej[u.Face]
		var exclude func(int64) bool
		if photoPeople != nil || faceRej != nil {
			exclude = func(p int64) bool { return photoPeople[p] || faceRej[p] }
		}
		best, second := named.Nearest(u.Descriptor, exclude)
		if !o.Accepts(best, second) {
			continue
		}
		out = append(out, Suggestion{Face: u.Face, Person: best.Person, Distance: best.Distance})
	}
	// One person per photo: the closest face keeps it.
	photoOf := make(map[int64]int64, len(unnamed))
	for _, u := range unnamed {
		photoOf[u.Face] = u.Photo
	}
	type key struct{ photo, person int64 }
	keep := map[key]int{}
	for i, s := range out {
		k := key{photoOf[s.Face], s.Person}
		if j, ok := keep[k]; !ok || s.Distance < out[j].Distance || (s.Distance == out[j].Distance && s.Face < out[j].Face) {
			keep[k] = i
		}
	}
	kept := out[:0]
	for i, s := range out {
		if keep[key{photoOf[s.Face], s.Person}] == i {
			kept = append(kept, s)
		}
	}
	return kept, nil
}

// ReviewGroup is one question of the review queue: "are these faces
// Person?". Faces are nearest first.
type ReviewGroup struct {
	Person int64 `json:"person"`
	// Cluster is the faces' cluster, or -1 for a face without one.
	Cluster  int     `json:"cluster"`
	Faces    []int64 `json:"faces"`
	Distance float64 `json:"distance"` // the farthest face's suggestion distance
}

// ReviewQueue groups suggestions so that one answer settles many: the
// suggestions of one person within one cluster (clusterOf; a face absent
// from it is a group of its own) form one question. Larger groups come
// first, then the surer (smaller farthest distance).
func ReviewQueue(sugs []Suggestion, clusterOf map[int64]int) []ReviewGroup {
	type key struct {
		cluster int
		person  int64
		face    int64 // only for faces without a cluster
	}
	idx := map[key]int{}
	var groups []ReviewGroup
	var dists [][]float64
	for _, s := range sugs {
		k := key{cluster: -1, person: s.Person, face: s.Face}
		if c, ok := clusterOf[s.Face]; ok {
			k = key{cluster: c, person: s.Person}
		}
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			groups = append(groups, ReviewGroup{Person: s.Person, Cluster: k.cluster})
			dists = append(dists, nil)
		}
		groups[i].Faces = append(groups[i].Faces, s.Face)
		dists[i] = append(dists[i], s.Distance)
	}
	for i := range groups {
		g := &groups[i]
		d := dists[i]
		sort.Sort(byDist{g.Faces, d})
		g.Distance = d[len(d)-1]
	}
	sort.SliceStable(groups, func(i, j int) bool {
		a, b := groups[i], groups[j]
		if len(a.Faces) != len(b.Faces) {
			return len(a.Faces) > len(b.Faces)
		}
		if a.Distance != b.Distance {
			return a.Distance < b.Distance
		}
		return a.Faces[0] < b.Faces[0]
	})
	return groups
}

type byDist struct {
	faces []int64
	dist  []float64
}

func (b byDist) Len() int { return len(b.faces) }
func (b byDist) Less(i, j int) bool {
	if b.dist[i] != b.dist[j] {
		return b.dist[i] < b.dist[j]
	}
	return b.faces[i] < b.faces[j]
}
func (b byDist) Swap(i, j int) {
	b.faces[i], b.faces[j] = b.faces[j], b.faces[i]
	b.dist[i], b.dist[j] = b.dist[j], b.dist[i]
}

// SearchResult is what the library knows about one face of a query photo.
type SearchResult struct {
	// Person is the suggested person (0: none), by Suggest's rule.
	Person   int64   `json:"person,omitempty"`
	Distance float64 `json:"distance,omitempty"`
	// Matches are the library's faces within the search distance, nearest first.
	Matches []FaceMatch `json:"matches"`
}

// Search looks the faces of a query photo up in a gallery of the whole
// library (named and unnamed faces): the person each face most likely is
// (Suggest's rule, one person per query photo) and the library faces
// within dist, at most limit per query face (≤ 0: all).
func Search(library *Gallery, query [][]float32, o SuggestOptions, dist float64, limit int) ([]SearchResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	un := make([]Unnamed, len(query))
	for i, q := range query {
		if len(q) != library.dim {
			return nil, fmt.Errorf("query face %d: descriptor has %d values, the library %d", i, len(q), library.dim)
		}
		// Negative ids cannot collide with the library's.
		un[i] = Unnamed{Face: -int64(i) - 1, Photo: -1, Descriptor: q}
	}
	sugs, err := Suggest(library, un, nil, o)
	if err != nil {
		return nil, err
	}
	out := make([]SearchResult, len(query))
	for _, s := range sugs {
		i := -s.Face - 1
		out[i].Person, out[i].Distance = s.Person, s.Distance
	}
	for i, q := range query {
		out[i].Matches = library.Within(q, dist, limit)
	}
	return out, nil
}
