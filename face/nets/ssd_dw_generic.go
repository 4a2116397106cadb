//go:build !(goexperiment.simd && amd64)

package nets

func dwAccum(o, a, w []float32) { dwAccumGeneric(o, a, w) }
func addSlice(o, b []float32)   { addSliceGeneric(o, b) }
func relu6Slice(o []float32)    { relu6SliceGeneric(o) }
