package imaging

import (
	"errors"
	"fmt"
	"math"
)

// Affine is a 2×3 matrix [a, c, tx, b, d, ty] mapping (x, y) to
// (a·x + c·y + tx, b·x + d·y + ty). A similarity transform p' = s·R·p + t
// has the form [a, -b, tx, b, a, ty] with a = s·cos θ, b = s·sin θ.
type Affine [6]float64

// Identity is the identity transform.
var Identity = Affine{1, 0, 0, 0, 1, 0}

// Apply maps the point (x, y).
func (a Affine) Apply(x, y float64) (float64, float64) {
	return a[0]*x + a[1]*y + a[2], a[3]*x + a[4]*y + a[5]
}

// Invert returns the inverse transform; it is an error if a is singular or
// not finite.
func (a Affine) Invert() (Affine, error) {
	det := a[0]*a[4] - a[1]*a[3]
	if det == 0 || math.IsNaN(det) || math.IsInf(det, 0) {
		return Affine{}, fmt.Errorf("imaging: affine %v is not invertible (determinant %g)", a, det)
	}
	ia, ic := a[4]/det, -a[1]/det
	ib, id := -a[3]/det, a[0]/det
	inv := Affine{ia, ic, -(ia*a[2] + ic*a[5]), ib, id, -(ib*a[2] + id*a[5])}
	for _, v := range inv {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Affine{}, fmt.Errorf("imaging: affine %v: inverse is not finite", a)
		}
	}
	return inv, nil
}

// Then returns the transform that applies a first and then b.
func (a Affine) Then(b Affine) Affine {
	return Affine{
		b[0]*a[0] + b[1]*a[3], b[0]*a[1] + b[1]*a[4], b[0]*a[2] + b[1]*a[5] + b[2],
		b[3]*a[0] + b[4]*a[3], b[3]*a[1] + b[4]*a[4], b[3]*a[2] + b[4]*a[5] + b[5],
	}
}

// EstimateSimilarity returns the least-squares similarity transform
// (rotation, uniform scale > 0, translation; never a reflection) mapping
// from[i] to to[i]: the minimiser of Σ|s·R·from[i] + t − to[i]|², which is
// Umeyama's (1991) solution and dlib's find_similarity_transform. In 2-D it
// has the closed form, with p, q the centred from and to points,
//
//	a = Σ p·q / Σ|p|²,  b = Σ p×q / Σ|p|²,  t = mean(to) − [a −b; b a]·mean(from).
//
// It is an error if the slices differ in length, hold fewer than two points,
// contain non-finite values, or are degenerate (all from points coincide or
// all to points coincide).
func EstimateSimilarity(from, to [][2]float64) (Affine, error) {
	if len(from) != len(to) {
		return Affine{}, fmt.Errorf("imaging: similarity: %d source points but %d targets", len(from), len(to))
	}
	n := len(from)
	if n < 2 {
		return Affine{}, fmt.Errorf("imaging: similarity: need at least 2 point pairs, have %d", n)
	}
	var mfx, mfy, mtx, mty float64
	for i := range from {
		for _, v := range [4]float64{from[i][0], from[i][1], to[i][0], to[i][1]} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return Affine{}, fmt.Errorf("imaging: similarity: point pair %d is not finite", i)
			}
		}
		mfx += from[i][0]
		mfy += from[i][1]
		mtx += to[i][0]
		mty += to[i][1]
	}
	fn := float64(n)
	mfx, mfy, mtx, mty = mfx/fn, mfy/fn, mtx/fn, mty/fn
	var sxx, dot, cross, syy float64
	for i := range from {
		px, py := from[i][0]-mfx, from[i][1]-mfy
		qx, qy := to[i][0]-mtx, to[i][1]-mty
		sxx += px*px + py*py
		syy += qx*qx + qy*qy
		dot += px*qx + py*qy
		cross += px*qy - py*qx
	}
	if sxx == 0 {
		return Affine{}, errors.New("imaging: similarity: degenerate: all source points coincide")
	}
	if syy == 0 {
		return Affine{}, errors.New("imaging: similarity: degenerate: all target points coincide")
	}
	a, b := dot/sxx, cross/sxx
	if a == 0 && b == 0 {
		return Affine{}, errors.New("imaging: similarity: degenerate: best fit has zero scale")
	}
	tx := mtx - (a*mfx - b*mfy)
	ty := mty - (b*mfx + a*mfy)
	return Affine{a, -b, tx, b, a, ty}, nil
}

// WarpAffine returns a w×h image whose pixel (x, y) is src sampled
// bilinearly at dstToSrc.Apply(x, y), pixel centres at integer coordinates.
// The source is treated as surrounded by black: a sample point whose four
// neighbours all lie outside is black, and one straddling the border blends
// with black. Values are rounded to the nearest integer. An identity or
// integer-translation transform copies pixels exactly.
func WarpAffine(src *RGB, dstToSrc Affine, w, h int) *RGB {
	out := NewRGB(w, h)
	if src == nil || src.Validate() != nil || src.W == 0 || src.H == 0 {
		return out
	}
	W, H := src.W, src.H
	px := func(x, y int) (float64, float64, float64) {
		if x < 0 || y < 0 || x >= W || y >= H {
			return 0, 0, 0
		}
		i := 3 * (y*W + x)
		return float64(src.Pix[i]), float64(src.Pix[i+1]), float64(src.Pix[i+2])
	}
	o := 0
	for y := 0; y < out.H; y++ {
		for x := 0; x < out.W; x++ {
			sx, sy := dstToSrc.Apply(float64(x), float64(y))
			if !(sx > -1 && sy > -1 && sx < float64(W) && sy < float64(H)) { // also rejects NaN
				o += 3
				continue
			}
			fx, fy := math.Floor(sx), math.Floor(sy)
			x0, y0 := int(fx), int(fy)
			ax, ay := sx-fx, sy-fy
			w00, w10, w01, w11 := (1-ax)*(1-ay), ax*(1-ay), (1-ax)*ay, ax*ay
			if x0 >= 0 && y0 >= 0 && x0+1 < W && y0+1 < H { // interior: no border checks
				i := 3 * (y0*W + x0)
				p0 := src.Pix[i : i+6 : i+6]
				p1 := src.Pix[i+3*W : i+3*W+6 : i+3*W+6]
				for c := 0; c < 3; c++ {
					out.Pix[o+c] = clamp8(w00*float64(p0[c]) + w10*float64(p0[3+c]) + w01*float64(p1[c]) + w11*float64(p1[3+c]))
				}
				o += 3
				continue
			}
			r00, g00, b00 := px(x0, y0)
			r10, g10, b10 := px(x0+1, y0)
			r01, g01, b01 := px(x0, y0+1)
			r11, g11, b11 := px(x0+1, y0+1)
			out.Pix[o] = clamp8(w00*r00 + w10*r10 + w01*r01 + w11*r11)
			out.Pix[o+1] = clamp8(w00*g00 + w10*g10 + w01*g01 + w11*g11)
			out.Pix[o+2] = clamp8(w00*b00 + w10*b10 + w01*b01 + w11*b11)
			o += 3
		}
	}
	return out
}

// clamp8 rounds half up (v is a convex combination of 0..255 samples, so
// non-negative up to rounding) and saturates.
func clamp8(v float64) uint8 {
	v += 0.5
	if v < 1 {
		return 0
	}
	if v >= 255 {
		return 255
	}
	return uint8(v)
}
