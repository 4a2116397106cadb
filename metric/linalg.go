package metric

import (
	"math"
	"sort"
	"sync"
)

// dotScalar returns Σ a[i]·b[i] with four accumulators (len(b) ≥ len(a)).
func dotScalar(a, b []float64) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpyScalar adds alpha·x to y.
func axpyScalar(alpha float64, x, y []float64) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// gram returns VᵀV (in × in) for V out × in row-major.
func gram(v []float64, out, in int) []float64 {
	w := make([]float64, in*in)
	for r := range out {
		row := v[r*in : (r+1)*in]
		for a, va := range row {
			if va == 0 {
				continue
			}
			axpy(va, row, w[a*in:(a+1)*in])
		}
	}
	return w
}

// matMul returns A·B for A (n × m) and B (m × p), row-major.
func matMul(a, b []float64, n, m, p int) []float64 {
	c := make([]float64, n*p)
	for i := range n {
		ci := c[i*p : (i+1)*p]
		for k := range m {
			if aik := a[i*m+k]; aik != 0 {
				axpy(aik, b[k*p:(k+1)*p], ci)
			}
		}
	}
	return c
}

// parallelFor runs f over [0, n) split into contiguous ranges, one per
// worker. Callers only use it where each index's result is independent of
// the split, so results do not depend on the number of workers.
func parallelFor(n, workers int, f func(lo, hi int)) {
	if workers <= 1 || n < 2*workers {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// symEig returns the eigenvalues (descending) and the matching unit
// eigenvectors (as rows) of the symmetric n × n matrix a, by cyclic Jacobi
// rotations. a is not modified.
func symEig(a []float64, n int) (vals []float64, vecs []float64) {
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
