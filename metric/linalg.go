package metric

import "github.com/veil-privacy/veil/internal/vec"

// gram returns VᵀV (in × in) for V out × in row-major.
func gram(v []float64, out, in int) []float64 {
	w := make([]float64, in*in)
	for r := range out {
		row := v[r*in : (r+1)*in]
		for a, va := range row {
			if va == 0 {
				continue
			}
			vec.Axpy(va, row, w[a*in:(a+1)*in])
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
				vec.Axpy(aik, b[k*p:(k+1)*p], ci)
			}
		}
	}
	return c
}

// transpose returns Aᵀ (n × m) for A (m × n), into dst when it has room.
func transpose(dst, a []float64, m, n int) []float64 {
	if cap(dst) < m*n {
		dst = make([]float64, m*n)
	}
	dst = dst[:m*n]
	for i := range m {
		row := a[i*n : (i+1)*n]
		for j, v := range row {
			dst[j*m+i] = v
		}
	}
	return dst
}
