//go:build !(goexperiment.simd && amd64)

package tagging

func sqDist(a, b []float32) float32 { return sqDistScalar(a, b) }
