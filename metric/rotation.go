package metric

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/veil-privacy/veil/internal/vec"
)

// rotationLabel separates the rotation's stream from any other use of the
// same key material.
const rotationLabel = "veil/metric/random-rotation/v1"

// RandomRotation returns a d × d orthogonal map drawn from the Haar
// (uniform) distribution on O(d), determined by the secret seed: the same
// seed and d give the same rotation, and without the seed it is a uniformly
// random rotation.
//
// The stream is ChaCha8 keyed by HMAC-SHA256(seed, "veil/metric/random-
// rotation/v1") so the key material can be shared with other uses without
// reusing a stream. Gaussian entries come from Box–Muller on fixed pairs of
// 53-bit uniforms (no rejection loop, so the number of draws does not depend
// on the secret), and the orthonormal basis from Gram–Schmidt run twice on
// the columns: that is the QR factorisation whose R has a positive diagonal,
// the sign convention under which Q is Haar-distributed (Mezzadri 2007).
//
// A rotation preserves every distance, so starting LMNN from it learns the
// same W = VᵀV as starting from the identity; what it changes is V itself,
// V = R·P, so the coordinates of a library's transformed faceprints are
// keyed by its secret. It hides coordinates, not geometry: anyone who sees
// transformed vectors still sees their distances, and anyone with enough
// matching pairs (x, Vx) can solve for V.
func RandomRotation(seed [32]byte, d int) (*Metric, error) {
	if d < 1 || d > MaxDim {
		return nil, fmt.Errorf("metric: rotation size %d outside 1…%d", d, MaxDim)
	}
	mac := hmac.New(sha256.New, seed[:])
	mac.Write([]byte(rotationLabel))
	var key [32]byte
	sum := mac.Sum(nil)
	copy(key[:], sum)
	clear(sum)
	src := rand.NewChaCha8(key)
	clear(key[:])

	// Columns of a Gaussian matrix, stored as rows of g for contiguity.
	g := make([]float64, d*d)
	for i := 0; i < len(g); i += 2 {
		u1 := (float64(src.Uint64()>>11) + 1) / (1 << 53) // (0, 1]
		u2 := float64(src.Uint64()>>11) / (1 << 53)       // [0, 1)
		r := math.Sqrt(-2 * math.Log(u1))
		s, c := math.Sincos(2 * math.Pi * u2)
		g[i] = r * c
		if i+1 < len(g) {
			g[i+1] = r * s
		}
	}
	for j := range d {
		col := g[j*d : (j+1)*d]
		for pass := 0; pass < 2; pass++ {
			for k := range j {
				prev := g[k*d : (k+1)*d]
				vec.Axpy(-vec.Dot(prev, col), prev, col)
			}
		}
		n := math.Sqrt(vec.Dot(col, col))
		if n == 0 || math.IsNaN(n) {
			return nil, errors.New("metric: degenerate random matrix (retry with another seed)")
		}
		for i := range col {
			col[i] /= n
		}
	}
	// g's rows are Q's columns: V = Qᵀ, itself Haar-distributed.
	return &Metric{out: d, in: d, v: g}, nil
}

// Truncate returns the map made of V's first rows rows (a projection to
// rows dimensions when V is a rotation).
func (m *Metric) Truncate(rows int) (*Metric, error) {
	if rows < 1 || rows > m.out {
		return nil, fmt.Errorf("metric: cannot keep %d rows of a %d-row map", rows, m.out)
	}
	return &Metric{out: rows, in: m.in, v: append([]float64(nil), m.v[:rows*m.in]...)}, nil
}

// Scale returns the map s·V (its Mahalanobis matrix is s²·W).
func (m *Metric) Scale(s float64) (*Metric, error) {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return nil, errors.New("metric: scale factor is not finite")
	}
	v := make([]float64, len(m.v))
	for i, x := range m.v {
		v[i] = s * x
	}
	return &Metric{out: m.out, in: m.in, v: v}, nil
}
