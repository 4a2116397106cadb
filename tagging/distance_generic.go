//go:build !(goexperiment.simd && amd64)

package tagging

func sqDist(a, b []float32) float32 { return sqDistScalar(a, b) }

func sqDistRows128(q *[128]float32, rows []float32, out []float32) {
	sqDistRowsScalar(q[:], rows, out)
}
