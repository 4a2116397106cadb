//go:build !(goexperiment.simd && amd64)

package wire

func sumSquares(v []float32) float64 { return sumSquaresScalar(v) }
