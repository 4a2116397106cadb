//go:build goexperiment.simd && amd64

package nets

import "simd/archsimd"

// tinyConv0Row is tinyConv0RowGeneric with each pixel's 16 channels in two
// AVX2 registers (when the CPU has AVX2 and FMA). Four pixels are computed
// together: eight independent accumulators hide the multiply-add latency,
// and each filter tap is loaded once for the four.
func tinyConv0Row(out, in []float32, w int, filter []float32) {
	if !detHasAVX2 {
		tinyConv0RowGeneric(out, in, w, filter)
		return
	}
	ow := len(out) / tinyConv0Out
	ox := 0
	for ; ox+4 <= ow; ox += 4 {
		var a0, a1, b0, b1, c0, c1, d0, d1 archsimd.Float32x8
		for ky := range 3 {
			// Taps of filter row ky for pixels ox..ox+3: in[base+3p+j].
			src := in[ky*w*3+ox*3 : ky*w*3+ox*3+18]
			f := filter[ky*9*tinyConv0Out : (ky+1)*9*tinyConv0Out]
			for j := range 9 {
				lo := archsimd.LoadFloat32x8Slice(f[j*tinyConv0Out:])
				hi := archsimd.LoadFloat32x8Slice(f[j*tinyConv0Out+8:])
				v := archsimd.BroadcastFloat32x8(src[j])
				a0, a1 = v.MulAdd(lo, a0), v.MulAdd(hi, a1)
				v = archsimd.BroadcastFloat32x8(src[j+3])
				b0, b1 = v.MulAdd(lo, b0), v.MulAdd(hi, b1)
				v = archsimd.BroadcastFloat32x8(src[j+6])
				c0, c1 = v.MulAdd(lo, c0), v.MulAdd(hi, c1)
				v = archsimd.BroadcastFloat32x8(src[j+9])
				d0, d1 = v.MulAdd(lo, d0), v.MulAdd(hi, d1)
			}
		}
		o := out[ox*tinyConv0Out : (ox+4)*tinyConv0Out]
		a0.StoreSlice(o)
		a1.StoreSlice(o[8:])
		b0.StoreSlice(o[16:])
		b1.StoreSlice(o[24:])
		c0.StoreSlice(o[32:])
		c1.StoreSlice(o[40:])
		d0.StoreSlice(o[48:])
		d1.StoreSlice(o[56:])
	}
	archsimd.ClearAVXUpperBits() // see ssd_dw_simd.go
	if ox < ow {
		tinyConv0RowGeneric(out[ox*tinyConv0Out:], in[ox*3:], w, filter)
	}
}
