//go:build !(goexperiment.simd && amd64)

package nets

func dwPixel(o []float32, src, wk [][]float32, b []float32, relu6 bool) {
	dwPixelGeneric(o, src, wk, b, relu6)
}
func addSlice(o, b []float32) { addSliceGeneric(o, b) }
func relu6Slice(o []float32)  { relu6SliceGeneric(o) }
