package dataset

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Vectors is a labelled set of fixed-size feature vectors, such as the
// precomputed 128-d face descriptors the embedding head trains on. It
// serves batches like Set (augmentation does not apply to vectors).
type Vectors struct {
	// Dim is the length of every vector.
	Dim int
	// X holds the vectors back to back.
	X []float32
	// Labels are dense class indices; Names[label] is the identity.
	Labels []int32
	Names  []string
	// Paths are the source files, for pairs lookup.
	Paths []string
}

// identityLabels numbers the distinct identities of images in sorted order.
func identityLabels(images []Image) (map[string]int32, []string) {
	names := map[string]int32{}
	var sorted []string
	for _, im := range images {
		if _, ok := names[im.Identity]; !ok {
			names[im.Identity] = 0
			sorted = append(sorted, im.Identity)
		}
	}
	sort.Strings(sorted)
	for i, n := range sorted {
		names[n] = int32(i)
	}
	return names, sorted
}

// NewVectors labels vecs[i], the vector of images[i], by identity (sorted
// names, as Load). All vectors must have the same positive length and
// finite values.
func NewVectors(images []Image, vecs [][]float32) (*Vectors, error) {
	if len(images) == 0 {
		return nil, errors.New("dataset: no vectors (empty identity split?)")
	}
	if len(vecs) != len(images) {
		return nil, fmt.Errorf("dataset: %d vectors for %d images", len(vecs), len(images))
	}
	dim := len(vecs[0])
	if dim == 0 {
		return nil, errors.New("dataset: empty vector")
	}
	names, sorted := identityLabels(images)
	v := &Vectors{Dim: dim, Names: sorted, X: make([]float32, 0, len(vecs)*dim)}
	for i, x := range vecs {
		if len(x) != dim {
			return nil, fmt.Errorf("dataset: vector of image %d has length %d, want %d", i, len(x), dim)
		}
		for _, f := range x {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return nil, fmt.Errorf("dataset: vector of image %d has a non-finite value", i)
			}
		}
		v.X = append(v.X, x...)
		v.Labels = append(v.Labels, names[images[i].Identity])
		v.Paths = append(v.Paths, images[i].Path)
	}
	return v, nil
}

// Len is the number of vectors.
func (v *Vectors) Len() int { return len(v.Labels) }

// Classes is the number of identities.
func (v *Vectors) Classes() int { return len(v.Names) }

// Batch returns the vectors idx back to back and their labels; rng is
// ignored (vectors are not augmented).
func (v *Vectors) Batch(idx []int, _ *rand.Rand) ([]float32, []int32, error) {
	x := make([]float32, 0, len(idx)*v.Dim)
	l := make([]int32, len(idx))
	for k, i := range idx {
		if i < 0 || i >= v.Len() {
			return nil, nil, fmt.Errorf("dataset: vector index %d outside [0, %d)", i, v.Len())
		}
		x = append(x, v.X[i*v.Dim:(i+1)*v.Dim]...)
		l[k] = v.Labels[i]
	}
	return x, l, nil
}
