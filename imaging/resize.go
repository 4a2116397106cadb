package imaging

import "math"

// ResizeBilinear is TensorFlow's resizeBilinear with alignCorners=false and
// halfPixelCenters=false, computed exactly as the TF.js cpu backend does:
//
//	scale = in/out                    (float64, as JS numbers)
//	src   = scale·dst                 (float64)
//	y0    = floor(src), y1 = min(ceil(src), in-1), frac = src - y0
//	top   = tl + (tr-tl)·xfrac, bottom = bl + (br-bl)·xfrac
//	out   = float32(top + (bottom-top)·yfrac)
//
// The inputs are float32 (TF.js reads them from a Float32Array), every
// intermediate is float64 (JS numbers) and only the stored result is rounded
// to float32 (the output Float32Array), so the output matches TF.js bit for
// bit. The channel count is preserved. A source or output with no pixels, or
// a malformed src, gives a zero outW×outH tensor.
func ResizeBilinear(src *Float, outW, outH int) *Float {
	if src == nil {
		return NewFloat(outW, outH, 3)
	}
	out := NewFloat(outW, outH, src.C)
	if src.Validate() != nil || src.W == 0 || src.H == 0 || out.W == 0 || out.H == 0 {
		return out
	}
	inW, inH, C := src.W, src.H, src.C
	rowScale := float64(inH) / float64(outH)
	colScale := float64(inW) / float64(outW)
	// Column geometry is shared by every row.
	x0s := make([]int, outW)
	x1s := make([]int, outW)
	xfs := make([]float64, outW)
	for c := 0; c < outW; c++ {
		f := colScale * float64(c)
		x0 := math.Floor(f)
		x0s[c] = int(x0) * C
		x1s[c] = min(inW-1, int(math.Ceil(f))) * C
		xfs[c] = f - x0
	}
	o := 0
	for r := 0; r < outH; r++ {
		f := rowScale * float64(r)
		y0f := math.Floor(f)
		yf := f - y0f
		y0 := int(y0f)
		y1 := min(inH-1, int(math.Ceil(f)))
		top := src.Pix[y0*inW*C : (y0+1)*inW*C]
		bot := src.Pix[y1*inW*C : (y1+1)*inW*C]
		if C == 3 {
			for c := 0; c < outW; c++ {
				a, b, xf := x0s[c], x1s[c], xfs[c]
				for d := 0; d < 3; d++ {
					tl, tr := float64(top[a+d]), float64(top[b+d])
					bl, br := float64(bot[a+d]), float64(bot[b+d])
					t := tl + (tr-tl)*xf
					bo := bl + (br-bl)*xf
					out.Pix[o+d] = float32(t + (bo-t)*yf)
				}
				o += 3
			}
			continue
		}
		for c := 0; c < outW; c++ {
			a, b, xf := x0s[c], x1s[c], xfs[c]
			for d := 0; d < C; d++ {
				tl, tr := float64(top[a+d]), float64(top[b+d])
				bl, br := float64(bot[a+d]), float64(bot[b+d])
				t := tl + (tr-tl)*xf
				bo := bl + (br-bl)*xf
				out.Pix[o+d] = float32(t + (bo-t)*yf)
			}
			o += C
		}
	}
	return out
}

// PadToSquare zero-pads src to a square of side max(W, H), as face-api's
// padToSquare does. With centred=false the image stays at the top-left and
// the padding goes to the bottom or right (the detectors' preprocessing).
// With centred=true (the descriptor's preprocessing) round(diff/2) zero
// rows/columns go after the image and the rest, floor(diff/2), before it.
// It returns the offset of the original image inside the square; a square
// src is returned as is (offset 0, 0). A malformed src gives an empty tensor.
func PadToSquare(src *Float, centred bool) (out *Float, offX, offY int) {
	if src == nil || src.Validate() != nil {
		return NewFloat(0, 0, 3), 0, 0
	}
	if src.W == src.H {
		return src, 0, 0
	}
	side := max(src.W, src.H)
	diff := side - min(src.W, src.H)
	before := 0
	if centred {
		// JS Math.round(diff*0.5) appended; diff ≥ 1 so halves round up.
		after := int(math.Floor(float64(diff)*0.5 + 0.5))
		before = diff - after
	}
	if src.W < src.H {
		offX = before
	} else {
		offY = before
	}
	out = NewFloat(side, side, src.C)
	rowLen := src.W * src.C
	for y := 0; y < src.H; y++ {
		d := ((y+offY)*side + offX) * src.C
		copy(out.Pix[d:d+rowLen], src.Pix[y*rowLen:(y+1)*rowLen])
	}
	return out, offX, offY
}
