package metric

import (
	"math"
	"math/rand/v2"

	"github.com/veil-privacy/veil/internal/vec"
)

// synthFaces makes faceprint-like data: classes people with perClass faces
// each in dim dimensions. Class centres are Gaussian; each face adds
// anisotropic noise — a few strong nuisance directions shared by everyone
// (pose, lighting: sd 2·nuisance) plus isotropic noise (as strong as the centres' spread) — and
// is normalised to unit length like ψ̂ (Irene Eq. 3).
func synthFaces(rng *rand.Rand, classes, perClass, dim int, nuisance float64) Data {
	const strong = 8
	dirs := make([][]float64, min(strong, dim))
	for i := range dirs {
		dirs[i] = make([]float64, dim)
		for j := range dirs[i] {
			dirs[i][j] = rng.NormFloat64() / math.Sqrt(float64(dim))
		}
	}
	var d Data
	for c := range classes {
		centre := make([]float64, dim)
		for j := range centre {
			centre[j] = rng.NormFloat64() / math.Sqrt(float64(dim))
		}
		for range perClass {
			x := make([]float64, dim)
			for j := range x {
				x[j] = centre[j] + 1.0*rng.NormFloat64()/math.Sqrt(float64(dim))
			}
			for _, dir := range dirs {
				vec.Axpy(2*nuisance*rng.NormFloat64(), dir, x)
			}
			n := math.Sqrt(vec.Dot(x, x))
			for j := range x {
				x[j] /= n
			}
			d.X = append(d.X, x)
			d.Labels = append(d.Labels, c)
		}
	}
	return d
}

// split returns every face whose index within its class is below train in
// the first set, the rest in the second.
func split(d Data, perClass, train int) (Data, Data) {
	var a, b Data
	for i := range d.X {
		if i%perClass < train {
			a.X, a.Labels = append(a.X, d.X[i]), append(a.Labels, d.Labels[i])
		} else {
			b.X, b.Labels = append(b.X, d.X[i]), append(b.Labels, d.Labels[i])
		}
	}
	return a, b
}
