//go:build !(goexperiment.simd && amd64)

package nets

func tinyConv0Row(out, in []float32, w int, filter []float32) {
	tinyConv0RowGeneric(out, in, w, filter)
}
