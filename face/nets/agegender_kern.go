package nets

import (
	"fmt"
	"math"
	"slices"
)

// agKern runs the age/gender network with Go kernels, its matrix
// products included (see kern_ops.go).
type agKern struct {
	w                *agW
	pool             *kernWSPool
	convIn           *kernMatmul
	rb0, rb1, exitRB agReductionMM
	main             [2][3]*kernMatmul
	exitSep          *kernMatmul
}

// agReductionMM holds a reduction block's products.
type agReductionMM struct{ sep0, sep1, expansion *kernMatmul }

func newAgReductionMM(name string, rb xcReduction) (agReductionMM, error) {
	var r agReductionMM
	var err error
	if r.sep0, err = agPointwise(name+".sep0", rb.sep0); err != nil {
		return r, err
	}
	if r.sep1, err = agPointwise(name+".sep1", rb.sep1); err != nil {
		return r, err
	}
	e := rb.expansion.w
	r.expansion, err = newKernMatmul(name+".expansion", e.F32, e.Shape[2], e.Shape[3])
	return r, err
}

func agPointwise(name string, s sepConv) (*kernMatmul, error) {
	return newKernMatmul(name, s.pw.F32, s.pw.Shape[2], s.pw.Shape[3])
}

// newAgeGenderKern prepares one product per convolution.
func newAgeGenderKern(a *agW, par *kernPar) (*agKern, error) {
	k := &agKern{w: a, pool: newKernWSPool(par)}
	var err error
	const p = "age_gender_model."
	cw := a.convIn.w
	if k.convIn, err = newKernMatmul(p+"conv_in", cw.F32, 9*cw.Shape[2], cw.Shape[3]); err != nil {
		return nil, err
	}
	if k.rb0, err = newAgReductionMM(p+"rb0", a.rb0); err != nil {
		return nil, err
	}
	if k.rb1, err = newAgReductionMM(p+"rb1", a.rb1); err != nil {
		return nil, err
	}
	if k.exitRB, err = newAgReductionMM(p+"exit_rb", a.exitRB); err != nil {
		return nil, err
	}
	for b := range a.main {
		for s := range a.main[b] {
			if k.main[b][s], err = agPointwise(fmt.Sprintf("%smain%d.sep%d", p, b, s), a.main[b][s]); err != nil {
				return nil, err
			}
		}
	}
	if k.exitSep, err = agPointwise(p+"exit_sep", a.exitSep); err != nil {
		return nil, err
	}
	return k, nil
}

// forward maps n inputs [n][112][112][3] (0..255) to [n][age, P(male), P(female)].
func (k *agKern) forward(x []float32, n int) ([]float32, error) {
	return k.fromMap(x, n, func(ws *kernWS, m []float32) []float32 { return k.heads(k.meanPool(ws, m, n), n) })
}

// forwardFeatures maps n inputs to their [n][AgeGenderFeatures] pooled
// features, the input of the two dense heads.
func (k *agKern) forwardFeatures(x []float32, n int) ([]float32, error) {
	return k.fromMap(x, n, func(ws *kernWS, m []float32) []float32 {
		return slices.Clone(k.meanPool(ws, m, n)) // the pool lives in the workspace
	})
}

// forwardRegions maps n inputs to their [n][AgeGenderRegionFeatures]
// region features (regionPool of the last feature map).
func (k *agKern) forwardRegions(x []float32, n int) ([]float32, error) {
	return k.fromMap(x, n, func(_ *kernWS, m []float32) []float32 { return regionPool(m, n, agMapSide, AgeGenderFeatures) })
}

// fromMap runs the network on n inputs up to its last feature map, in a
// pooled workspace, and returns read's result for that map; read must not
// return memory of the workspace, which is reused once fromMap returns.
func (k *agKern) fromMap(x []float32, n int, read func(ws *kernWS, m []float32) []float32) ([]float32, error) {
	ws := k.pool.get(n)
	defer k.pool.put(ws)
	m, err := k.featureMap(ws, x, n)
	if err != nil {
		return nil, err
	}
	return read(ws, m), nil
}

// agMapSide is the side of the age/gender network's last feature map.
const agMapSide = 7

// regionPool averages each of n [side][side][c] maps over four
// overlapping quadrants (rows and columns [0, ⌈side/2⌉) and
// [⌊side/2⌋, side): the middle row and column belong to both halves) and
// concatenates the four means, top-left, top-right, bottom-left,
// bottom-right: [n][4c].
func regionPool(m []float32, n, side, c int) []float32 {
	half := (side + 1) / 2
	starts := [2]int{0, side - half}
	out := make([]float32, n*4*c)
	inv := 1 / float32(half*half)
	for i := range n {
		img := m[i*side*side*c : (i+1)*side*side*c]
		for r, y0 := range starts {
			for q, x0 := range starts {
				o := out[(i*4+2*r+q)*c : (i*4+2*r+q+1)*c]
				for y := y0; y < y0+half; y++ {
					for x := x0; x < x0+half; x++ {
						v := img[(y*side+x)*c : (y*side+x+1)*c]
						for j := range o {
							o[j] += v[j]
						}
					}
				}
				for j := range o {
					o[j] *= inv
				}
			}
		}
	}
	return out
}

// reluCopy returns max(x, 0) in a new workspace buffer.
func reluCopy(ws *kernWS, x []float32) []float32 {
	r := ws.buf(len(x))
	for i, v := range x {
		r[i] = max(v, 0)
	}
	return r
}

// sepBias runs separable convolution s (stride 1) on in and returns its
// output with the bias added, in a new workspace buffer.
func (k *agKern) sepBias(ws *kernWS, mm *kernMatmul, s sepConv, in []float32, n, h, w, c int) ([]float32, error) {
	cout := s.pw.Shape[3]
	out := ws.buf(n * h * w * cout)
	_, _, err := kernSepConv(ws, mm, s.dw.F32, in, n, h, w, c, 1, func(v []float32) {
		kernBiasRelu(out, v, s.b.F32, false)
	})
	return out, err
}

// reduction is TinyXception's reduction block (see xcReduction.apply).
func (k *agKern) reduction(ws *kernWS, mm agReductionMM, rb xcReduction, x []float32, n, h, w, c int, activate bool) (out []float32, oh, ow, cout int, err error) {
	in := x
	if activate {
		in = reluCopy(ws, x)
	}
	cout = rb.sep0.pw.Shape[3]
	t, err := k.sepBias(ws, mm.sep0, rb.sep0, in, n, h, w, c)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	kernRelu(t)
	t, err = k.sepBias(ws, mm.sep1, rb.sep1, t, n, h, w, cout)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	oh, _, _ = outSize(h, 3, 2, Same)
	ow, _, _ = outSize(w, 3, 2, Same)
	out = ws.buf(n * oh * ow * cout)
	kernMaxPoolSame(out, t, n, h, w, cout, 3, 2)
	b := rb.expansion.b.F32
	err = mm.expansion.run(ws, n*oh*ow, func(cols []float32) {
		kernIm2col(ws.par, cols, x, n, h, w, c, 1, 2, Same)
	}, func(v []float32) {
		for i := 0; i < len(v); i += cout {
			o, y := out[i:i+cout], v[i:i+cout]
			for j := range o {
				o[j] += y[j] + b[j]
			}
		}
	})
	return out, oh, ow, cout, err
}

// meanPool averages n last feature maps m into a workspace buffer: the
// [n][512] features the age and gender heads read.
func (k *agKern) meanPool(ws *kernWS, m []float32, n int) []float32 {
	c := k.w.exitSep.pw.Shape[3]
	feat := ws.buf(n * c)
	kernAvgPoolValid(feat, m, n, agMapSide, agMapSide, c, agMapSide, 2)
	return feat
}

// featureMap runs the network up to its last feature map, [n][7][7][512]
// ReLU outputs, with the workspace ws (which holds the result).
func (k *agKern) featureMap(ws *kernWS, x []float32, n int) ([]float32, error) {
	a := k.w
	h, w, c := AgeGenderSize, AgeGenderSize, 3
	in := ws.buf(len(x))
	kernNormalize(in, x)
	oh, _, _ := outSize(h, 3, 2, Same)
	ow, _, _ := outSize(w, 3, 2, Same)
	cout := a.convIn.w.Shape[3]
	y := ws.buf(n * oh * ow * cout)
	if err := k.convIn.run(ws, n*oh*ow, func(cols []float32) {
		kernIm2col(ws.par, cols, in, n, h, w, c, 3, 2, Same)
	}, func(v []float32) { kernBiasRelu(y, v, a.convIn.b.F32, true) }); err != nil {
		return nil, err
	}
	h, w, c = oh, ow, cout
	var err error
	if y, h, w, c, err = k.reduction(ws, k.rb0, a.rb0, y, n, h, w, c, false); err != nil {
		return nil, err
	}
	if y, h, w, c, err = k.reduction(ws, k.rb1, a.rb1, y, n, h, w, c, true); err != nil {
		return nil, err
	}
	for b, mb := range a.main {
		out := y
		for s, sc := range mb {
			if out, err = k.sepBias(ws, k.main[b][s], sc, reluCopy(ws, out), n, h, w, c); err != nil {
				return nil, err
			}
		}
		for i := range out {
			out[i] += y[i]
		}
		y = out
	}
	if y, h, w, c, err = k.reduction(ws, k.exitRB, a.exitRB, y, n, h, w, c, true); err != nil {
		return nil, err
	}
	if y, err = k.sepBias(ws, k.exitSep, a.exitSep, y, n, h, w, c); err != nil {
		return nil, err
	}
	kernRelu(y)
	if h != agMapSide || w != agMapSide {
		return nil, fmt.Errorf("nets: age/gender features are %d×%d, want %d×%d", h, w, agMapSide, agMapSide)
	}
	return y, nil
}

// heads applies the age regression and the gender softmax to n pooled
// feature vectors.
func (k *agKern) heads(feat []float32, n int) []float32 {
	a, c := k.w, k.w.exitSep.pw.Shape[3]
	age := kernDense(feat, a.ageW.F32, a.ageB.F32, n, c, 1)
	logits := kernDense(feat, a.gendW.F32, a.gendB.F32, n, c, 2)
	out := make([]float32, 3*n)
	for i := range n {
		l0, l1 := float64(logits[2*i]), float64(logits[2*i+1])
		m := max(l0, l1)
		e0, e1 := math.Exp(l0-m), math.Exp(l1-m)
		out[3*i] = age[i]
		out[3*i+1] = float32(e0 / (e0 + e1))
		out[3*i+2] = float32(e1 / (e0 + e1))
	}
	return out
}
