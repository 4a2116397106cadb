//go:build !(goexperiment.simd && amd64)

package vec

// useSIMD is false: this build has no AVX2 kernels (GOEXPERIMENT=simd on
// amd64 builds them).
const useSIMD = false

// Dot returns Σ a[i]·b[i] (len(b) ≥ len(a)).
func Dot(a, b []float64) float64 { return dotScalar(a, b) }

// SqDist returns ‖a − b‖² (len(b) ≥ len(a)).
func SqDist(a, b []float64) float64 { return sqDistScalar(a, b) }

// Axpy adds alpha·x to y (len(y) ≥ len(x)).
func Axpy(alpha float64, x, y []float64) { axpyScalar(alpha, x, y) }

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

// SqDist32 returns ‖a − b‖² in float32 for len(a) ≤ len(b).
func SqDist32(a, b []float32) float32 { return sqDist32Scalar(a, b) }

// SqDistRows128 writes ‖q − row‖² for consecutive 128-value rows into out
// (len(rows) ≥ 128·len(out)).
func SqDistRows128(q *[128]float32, rows []float32, out []float32) {
	sqDistRows32Scalar(q[:], rows, out)
}

// Dot32 returns Σ a[i]·b[i] in float32 (len(b) ≥ len(a)).
func Dot32(a, b []float32) float32 { return dot32Scalar(a, b) }

// Dot32x4 returns the inner products of a with b0…b3 (each at least
// len(a) long).
func Dot32x4(a, b0, b1, b2, b3 []float32) (float32, float32, float32, float32) {
	return dot32Scalar(a, b0), dot32Scalar(a, b1), dot32Scalar(a, b2), dot32Scalar(a, b3)
}

// AxpyWiden adds alpha·float64(x[i]) to y[i] (len(y) ≥ len(x)).
func AxpyWiden(alpha float64, x []float32, y []float64) { axpyWidenScalar(alpha, x, y) }

// SqNormWiden returns Σ float64(x[i])², the squared L2 norm in float64.
func SqNormWiden(x []float32) float64 { return sqNormWidenScalar(x) }
