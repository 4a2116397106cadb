package vec

import "math"

// SVDSquare returns U, the singular values and V of the n × n matrix a
// (row-major; a = U·diag(s)·Vᵀ, U and V orthogonal, row-major) by one-sided
// Jacobi rotations. Columns of U for zero singular values complete an
// orthonormal basis (any completion: the data say nothing about them).
// a is not modified. (eval's Procrustes alignment uses it.)
func SVDSquare(a []float64, n int) (u, s, v []float64) {
	// Work on columns: col[j] is column j of a.
	col := make([][]float64, n)
	vc := make([][]float64, n)
	for j := range n {
		col[j] = make([]float64, n)
		vc[j] = make([]float64, n)
		vc[j][j] = 1
		for i := range n {
			col[j][i] = a[i*n+j]
		}
	}
	for sweep := 0; sweep < 60; sweep++ {
		rotated := false
		for p := 0; p < n; p++ {
			for q := p + 1; q < n; q++ {
				alpha, beta, gamma := Dot(col[p], col[p]), Dot(col[q], col[q]), Dot(col[p], col[q])
				if gamma == 0 || math.Abs(gamma) <= 1e-15*math.Sqrt(alpha*beta) {
					continue
				}
				rotated = true
				zeta := (beta - alpha) / (2 * gamma)
				t := math.Copysign(1, zeta) / (math.Abs(zeta) + math.Sqrt(1+zeta*zeta))
				c := 1 / math.Sqrt(1+t*t)
				sn := c * t
				for _, m := range [2][][]float64{col, vc} {
					xp, xq := m[p], m[q]
					for k := range xp {
						a, b := xp[k], xq[k]
						xp[k] = c*a - sn*b
						xq[k] = sn*a + c*b
					}
				}
			}
		}
		if !rotated {
			break
		}
	}
	s = make([]float64, n)
	var smax float64
	for j := range n {
		s[j] = math.Sqrt(Dot(col[j], col[j]))
		smax = math.Max(smax, s[j])
	}
	// Orthonormal U: normalise columns with a non-negligible singular
	// value, then complete the basis by Gram–Schmidt on unit vectors.
	uc := make([][]float64, 0, n)
	zero := []int{}
	for j := range n {
		if s[j] > 1e-12*smax && s[j] > 0 {
			x := append([]float64(nil), col[j]...)
			for k := range x {
				x[k] /= s[j]
			}
			uc = append(uc, x)
		} else {
			s[j] = 0
			zero = append(zero, j)
			uc = append(uc, nil)
		}
	}
	for _, j := range zero {
		for e := 0; e < n; e++ {
			x := make([]float64, n)
			x[e] = 1
			for pass := 0; pass < 2; pass++ {
				for _, w := range uc {
					if w != nil {
						Axpy(-Dot(w, x), w, x)
					}
				}
			}
			if nx := math.Sqrt(Dot(x, x)); nx > 1e-6 {
				for k := range x {
					x[k] /= nx
				}
				uc[j] = x
				break
			}
		}
	}
	u = make([]float64, n*n)
	v = make([]float64, n*n)
	for j := range n {
		for i := range n {
			u[i*n+j] = uc[j][i]
			v[i*n+j] = vc[j][i]
		}
	}
	return u, s, v
}
