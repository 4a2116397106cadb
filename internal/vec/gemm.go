package vec

// Gemm sets C = A·B for row-major A (m × k), B (k × p), C (m × p), blocked
// for the caches: 64-row panels of A, 256-long slices of k, 4 × 8 register
// tiles of C (gemmTile). Row panels are split among workers; each entry of C
// is summed in the same order whatever the split.
func Gemm(c, a, b []float64, m, k, p, workers int) {
	panels := (m + gemmRows - 1) / gemmRows
	ParallelFor(panels, workers, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			i0 := t * gemmRows
			gemmPanel(c, a, b, i0, min(i0+gemmRows, m), k, p)
		}
	})
}

const (
	gemmRows = 64  // rows of A per panel
	gemmK    = 256 // k per slice
)

// gemmPanel computes rows [i0, i1) of C = A·B.
func gemmPanel(c, a, b []float64, i0, i1, k, p int) {
	clear(c[i0*p : i1*p])
	for k0 := 0; k0 < k; k0 += gemmK {
		k1 := min(k0+gemmK, k)
		j := 0
		for ; j+8 <= p; j += 8 {
			i := i0
			for ; i+4 <= i1; i += 4 {
				gemmTile(c, a, b, i, j, k0, k1, k, p)
			}
			for ; i < i1; i++ {
				for jj := j; jj < j+8; jj++ {
					gemmScalar(c, a, b, i, jj, k0, k1, k, p)
				}
			}
		}
		for ; j < p; j++ {
			for i := i0; i < i1; i++ {
				gemmScalar(c, a, b, i, j, k0, k1, k, p)
			}
		}
	}
}

// Gemm32 sets C = A·B in single precision (row-major A m × k, B k × p, C
// m × p) on one goroutine, blocked like Gemm with 4 × 16 register tiles.
func Gemm32(c, a, b []float32, m, k, p int) {
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
