package vec

import (
	"math"
	"sort"
)

// SymEig returns the eigenvalues (descending) and the matching unit
// eigenvectors (as rows) of the symmetric n × n matrix a, by cyclic Jacobi
// rotations. a is not modified.
func SymEig(a []float64, n int) (vals []float64, vecs []float64) {
	m := append([]float64(nil), a...)
	v := make([]float64, n*n)
	for i := range n {
		v[i*n+i] = 1
	}
	for sweep := 0; sweep < 100; sweep++ {
		var off, total float64
		for i := range n {
			for j := range n {
				x := m[i*n+j] * m[i*n+j]
				total += x
				if i != j {
					off += x
				}
			}
		}
		if off <= 1e-30*total || off == 0 {
			break
		}
		for p := 0; p < n; p++ {
			for q := p + 1; q < n; q++ {
				apq := m[p*n+q]
				if apq == 0 {
					continue
				}
				app, aqq := m[p*n+p], m[q*n+q]
				theta := (aqq - app) / (2 * apq)
				t := math.Copysign(1, theta) / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				c := 1 / math.Sqrt(t*t+1)
				s := t * c
				for k := range n {
					mkp, mkq := m[k*n+p], m[k*n+q]
					m[k*n+p] = c*mkp - s*mkq
					m[k*n+q] = s*mkp + c*mkq
				}
				for k := range n {
					mpk, mqk := m[p*n+k], m[q*n+k]
					m[p*n+k] = c*mpk - s*mqk
					m[q*n+k] = s*mpk + c*mqk
				}
				for k := range n {
					vkp, vkq := v[k*n+p], v[k*n+q]
					v[k*n+p] = c*vkp - s*vkq
					v[k*n+q] = s*vkp + c*vkq
				}
			}
		}
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(x, y int) bool { return m[idx[x]*n+idx[x]] > m[idx[y]*n+idx[y]] })
	vals = make([]float64, n)
	vecs = make([]float64, n*n)
	for r, i := range idx {
		vals[r] = m[i*n+i]
		for k := range n {
			vecs[r*n+k] = v[k*n+i]
		}
	}
	return vals, vecs
}
