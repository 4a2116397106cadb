package metric

// gemm32 sets C = A·B in single precision (row-major A m × k, B k × p, C
// m × p) on one goroutine, blocked like gemm with 4 × 16 register tiles. The
// impostor search uses it only to rank candidates, where float32's rounding
// (relative 1e-7 of ‖z‖²) matters only between near ties.
func gemm32(c, a, b []float32, m, k, p int) {
	clear(c[:m*p])
	for k0 := 0; k0 < k; k0 += gemmK {
		k1 := min(k0+gemmK, k)
		j := 0
		for ; j+16 <= p; j += 16 {
			i := 0
			for ; i+4 <= m; i += 4 {
				gemm32Tile(c, a, b, i, j, k0, k1, k, p)
			}
			for ; i < m; i++ {
				for jj := j; jj < j+16; jj++ {
					gemm32Scalar(c, a, b, i, jj, k0, k1, k, p)
				}
			}
		}
		for ; j < p; j++ {
			for i := range m {
				gemm32Scalar(c, a, b, i, j, k0, k1, k, p)
			}
		}
	}
}

func gemm32Scalar(c, a, b []float32, i, j, k0, k1, k, p int) {
	s := c[i*p+j]
	for kk := k0; kk < k1; kk++ {
		s += a[i*k+kk] * b[kk*p+j]
	}
	c[i*p+j] = s
}
