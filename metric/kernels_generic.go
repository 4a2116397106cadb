//go:build !(goexperiment.simd && amd64)

package metric

func dot(a, b []float64) float64 { return dotScalar(a, b) }

func sqDist(a, b []float64) float64 { return sqDistScalar(a, b) }

func axpy(alpha float64, x, y []float64) { axpyScalar(alpha, x, y) }

// gemmTile adds A[i..i+4][k0:k1]·B[k0:k1][j..j+8] to C's 4 × 8 tile.
func gemmTile(c, a, b []float64, i, j, k0, k1, k, p int) {
	for r := i; r < i+4; r++ {
		for jj := j; jj < j+8; jj++ {
			gemmScalar(c, a, b, r, jj, k0, k1, k, p)
		}
	}
}

// gemm32Tile adds A[i..i+4][k0:k1]·B[k0:k1][j..j+16] to C's 4 × 16 tile.
func gemm32Tile(c, a, b []float32, i, j, k0, k1, k, p int) {
	for r := i; r < i+4; r++ {
		for jj := j; jj < j+16; jj++ {
			gemm32Scalar(c, a, b, r, jj, k0, k1, k, p)
		}
	}
}
