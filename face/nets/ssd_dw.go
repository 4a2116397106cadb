package nets

// The detectors' depthwise convolutions run as plain Go kernels: on
// GoMLX's pure-Go backend a depthwise
// convolution has no fast path (per-channel weights go through the generic
// broadcast iterator, or must be tiled by copying), and it took most of the
// pass; a direct loop over channels is an order of magnitude faster.

// ssdDepthwise3x3 is a 3×3 depthwise convolution with TensorFlow SAME
// padding and stride s of in ([h][w][c], row-major), with per-channel bias
// b, followed by relu6 when relu6 is set. wt is [3][3][c]. It writes the
// output into out, which must hold oh·ow·c values, and returns its size.
func ssdDepthwise3x3(par *kernPar, out, in []float32, h, w, c, s int, wt, b []float32, relu6 bool) (oh, ow int) {
	oh, pt, _ := outSize(h, 3, s, Same)
	ow, pl, _ := outSize(w, 3, s, Same)
	out = out[:oh*ow*c]
	// Output columns [ox0, ox1) read no padding: ox·s − pl ≥ 0 and
	// ox·s − pl + 2 ≤ w − 1.
	ox0, ox1 := (pl+s-1)/s, 0
	if w-3+pl >= 0 {
		ox1 = min(ow, (w-3+pl)/s+1)
	}
	ox1 = max(ox0, ox1)
	par.For(oh, ow*c*9, func(lo, hi int) {
		var src, wk [9][]float32
		pixel := func(oy, ox int) {
			n := 0
			for ky := 0; ky < 3; ky++ {
				iy := oy*s + ky - pt
				if iy < 0 || iy >= h {
					continue
				}
				for kx := 0; kx < 3; kx++ {
					ix := ox*s + kx - pl
					if ix < 0 || ix >= w {
						continue
					}
					k := ky*3 + kx
					src[n] = in[(iy*w+ix)*c : (iy*w+ix+1)*c]
					wk[n] = wt[k*c : (k+1)*c]
					n++
				}
			}
			detDwPixel(out[(oy*ow+ox)*c:(oy*ow+ox+1)*c], src[:n], wk[:n], b, relu6)
		}
		for oy := lo; oy < hi; oy++ {
			iy := oy*s - pt
			if iy < 0 || iy+2 >= h || ox0 >= ox1 || !detDwRow(out[(oy*ow+ox0)*c:(oy*ow+ox1)*c], in[iy*w*c:(iy+3)*w*c], w, c, s, ox0*s-pl, wt, b, relu6) {
				for ox := 0; ox < ow; ox++ {
					pixel(oy, ox)
				}
				continue
			}
			for ox := 0; ox < ox0; ox++ {
				pixel(oy, ox)
			}
			for ox := ox1; ox < ow; ox++ {
				pixel(oy, ox)
			}
		}
	})
	return oh, ow
}

// detBiasRelu6 adds the per-channel bias b to every pixel of x ([n][c]) and
// applies relu6, in place.
func detBiasRelu6(par *kernPar, x, b []float32) {
	c := len(b)
	par.For(len(x)/c, c, func(lo, hi int) {
		for i := lo * c; i < hi*c; i += c {
			o := x[i : i+c]
			detAdd(o, b)
			detRelu6(o)
		}
	})
}

// detDwPixelGeneric computes o = b + Σ_t src[t]·wk[t] element-wise, then
// relu6 if relu6 is set.
func detDwPixelGeneric(o []float32, src, wk [][]float32, b []float32, relu6 bool) {
	copy(o, b[:len(o)])
	for t := range src {
		a, w := src[t][:len(o)], wk[t][:len(o)]
		for i := range o {
			o[i] += a[i] * w[i]
		}
	}
	if relu6 {
		detRelu6Generic(o)
	}
}

// detAddGeneric computes o += b element-wise.
func detAddGeneric(o, b []float32) {
	b = b[:len(o)]
	for i := range o {
		o[i] += b[i]
	}
}

// detRelu6Generic clamps every value to [0, 6].
func detRelu6Generic(o []float32) {
	for i, v := range o {
		o[i] = min(max(v, 0), 6)
	}
}
