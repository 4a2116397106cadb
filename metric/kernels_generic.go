//go:build !(goexperiment.simd && amd64)

package metric

func dot(a, b []float64) float64 { return dotScalar(a, b) }

func dot4(a, b0, b1, b2, b3 []float64) (float64, float64, float64, float64) {
	return dotScalar(a, b0), dotScalar(a, b1), dotScalar(a, b2), dotScalar(a, b3)
}

func sqDist(a, b []float64) float64 { return sqDistScalar(a, b) }

func axpy(alpha float64, x, y []float64) { axpyScalar(alpha, x, y) }
