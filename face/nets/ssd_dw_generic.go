//go:build !(goexperiment.simd && amd64)

package nets

func detDwPixel(o []float32, src, wk [][]float32, b []float32, relu6 bool) {
	detDwPixelGeneric(o, src, wk, b, relu6)
}
func detAdd(o, b []float32) { detAddGeneric(o, b) }
func detRelu6(o []float32)  { detRelu6Generic(o) }
