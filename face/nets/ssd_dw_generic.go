//go:build !(goexperiment.simd && amd64)

package nets

func detDwPixel(o []float32, src, wk [][]float32, b []float32, relu6 bool) {
	detDwPixelGeneric(o, src, wk, b, relu6)
}
func detAdd(o, b []float32) { detAddGeneric(o, b) }
func detRelu6(o []float32)  { detRelu6Generic(o) }

// detDwRow has no portable fast path: ssdDepthwise3x3 computes every pixel
// with detDwPixel.
func detDwRow(out, in []float32, w, c, s, x0 int, wt, b []float32, relu6 bool) bool { return false }
