package nets

// tinyConv0Out is conv0's output channels.
const tinyConv0Out = 16

// tinyConv0Pool is the tiny detector's first layer and the pooling after
// it: (x − mean)/255, the 3×3 VALID convolution, then 2×2 max-pool with
// stride 2 (TensorFlow SAME padding), bias and leaky ReLU (as
// tinyPoolBiasLeaky), on an h×w×3 input of 0..255 values. It returns the
// flat [ph·pw][16] pooled output (a buffer of ar) and its height and
// width.
//
// It runs as a Go kernel rather than a GoMLX graph: the graph built the
// 27-column patch matrix from nine strided slices and a concatenation and
// multiplied it by the 27×16 filter, and on a 416-pixel input those copies
// cost more than a third of the whole network's time (pprof of
// BenchmarkTiny/raw416). Here each output pixel's 16 channels stay in two
// AVX2 registers across the 27 taps (the three taps of one filter row, 3
// pixels × 3 channels, are 9 consecutive input values), and each pair of
// convolution rows is pooled as soon as it is computed, so the 11 MB
// convolution output of a 416-pixel input is never held.
func tinyConv0Pool(par *kernPar, ar *detArena, in []float32, h, w int, filter, bias []float32) (pooled []float32, ph, pw int) {
	ch, cw := h-2, w-2 // conv0 output
	ph, _, _ = outSize(ch, 2, 2, Same)
	pw, _, _ = outSize(cw, 2, 2, Same)
	// The input normalised as the graph did, (x − mean)/255, so that the
	// products see the same operands.
	norm := ar.get(len(in))
	par.For(h, w*3, func(lo, hi int) {
		for i := lo * w * 3; i < hi*w*3; i += 3 {
			for c := range 3 {
				norm[i+c] = (in[i+c] - tinyMeanRGB[c]) / 255
			}
		}
	})
	pooled = ar.get(ph * pw * tinyConv0Out)
	par.For(ph, 2*cw*27*tinyConv0Out, func(lo, hi int) {
		rows := make([]float32, 2*cw*tinyConv0Out)
		r0, r1 := rows[:cw*tinyConv0Out], rows[cw*tinyConv0Out:]
		for py := lo; py < hi; py++ {
			y0 := 2 * py
			y1 := min(y0+1, ch-1)
			tinyConv0Row(r0, norm[y0*w*3:], w, filter)
			if y1 != y0 {
				tinyConv0Row(r1, norm[y1*w*3:], w, filter)
			} else {
				copy(r1, r0)
			}
			tinyPoolRows(pooled[py*pw*tinyConv0Out:(py+1)*pw*tinyConv0Out], r0, r1, cw, bias)
		}
	})
	return pooled, ph, pw
}

// tinyPoolRows writes one row of tinyPoolBiasLeaky's output with stride 2
// from the two input rows r0 and r1 (w pixels of 16 channels).
func tinyPoolRows(out, r0, r1 []float32, w int, b []float32) {
	const c = tinyConv0Out
	b = b[:c]
	for ox := range len(out) / c {
		x0 := 2 * ox
		x1 := min(x0+1, w-1)
		o := out[ox*c : (ox+1)*c]
		p00, p01 := r0[x0*c:(x0+1)*c], r0[x1*c:(x1+1)*c]
		p10, p11 := r1[x0*c:(x0+1)*c], r1[x1*c:(x1+1)*c]
		for k := range o {
			v := max(p00[k], p01[k], p10[k], p11[k]) + b[k]
			o[k] = max(v, v*0.1)
		}
	}
}

// tinyConv0RowGeneric writes one output row: for each of the row's
// len(out)/16 pixels, Σ over the 3×3×3 window starting at that pixel in
// rows (of w pixels, 3 channels) beginning at in, times the HWIO filter.
func tinyConv0RowGeneric(out, in []float32, w int, filter []float32) {
	ow := len(out) / tinyConv0Out
	var acc [tinyConv0Out]float32
	for ox := range ow {
		acc = [tinyConv0Out]float32{}
		for ky := range 3 {
			src := in[ky*w*3+ox*3 : ky*w*3+ox*3+9]
			f := filter[ky*9*tinyConv0Out : (ky+1)*9*tinyConv0Out]
			for t, x := range src {
				ft := f[t*tinyConv0Out : (t+1)*tinyConv0Out]
				for c := range acc {
					acc[c] += x * ft[c]
				}
			}
		}
		copy(out[ox*tinyConv0Out:(ox+1)*tinyConv0Out], acc[:])
	}
}
