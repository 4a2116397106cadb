package nets

import (
	"fmt"
)

// descKern runs the descriptor with Go kernels, its matrix products
// included (see kern_ops.go).
type descKern struct {
	w      *descriptorW
	pool   *kernWSPool
	conv0  *kernMatmul
	blocks [][2]*kernMatmul // conv1, conv2 of each residual block
}

// newDescKern prepares one product per convolution.
func newDescKern(w *descriptorW, par *kernPar) (*descKern, error) {
	k := &descKern{w: w, pool: newKernWSPool(par)}
	var err error
	if k.conv0, err = newKernMatmul("descriptor.conv32_down", w.conv0.w.F32, 7*7*3, 32); err != nil {
		return nil, err
	}
	for i, bl := range w.blocks {
		var mm [2]*kernMatmul
		for j, c := range []resConv{bl.conv1, bl.conv2} {
			name := fmt.Sprintf("descriptor.%s.conv%d", descriptorBlocks[i].name, j+1)
			cin, cout := c.w.Shape[2], c.w.Shape[3]
			if mm[j], err = newKernMatmul(name, c.w.F32, 9*cin, cout); err != nil {
				return nil, err
			}
		}
		k.blocks = append(k.blocks, mm)
	}
	return k, nil
}

// forward maps n inputs [n][150][150][3] (0..255) to [n][128].
func (k *descKern) forward(x []float32, n int) ([]float32, error) {
	ws := k.pool.get(n)
	out, err := k.pass(ws, x, n)
	k.pool.put(ws)
	return out, err
}

// pass is forward with the workspace ws.
func (k *descKern) pass(ws *kernWS, x []float32, n int) ([]float32, error) {
	h, w, c := DescriptorSize, DescriptorSize, 3
	a := ws.buf(len(x))
	kernNormalize(a, x)
	oh, _, _ := outSize(h, 7, 2, Valid)
	ow, _, _ := outSize(w, 7, 2, Valid)
	y := ws.buf(n * oh * ow * 32)
	if err := k.conv0.run(ws, n*oh*ow, func(cols []float32) {
		kernIm2col(ws.par, cols, a, n, h, w, c, 7, 2, Valid)
	}, func(v []float32) { kernBiasRelu(y, v, k.w.conv0.b.F32, true) }); err != nil {
		return nil, err
	}
	h, w, c = oh, ow, 32
	ph, pw := (h-3)/2+1, (w-3)/2+1
	x = ws.buf(n * ph * pw * c)
	h, w = kernMaxPoolValid(x, y, n, h, w, c, 3, 2)
	for i, bl := range k.w.blocks {
		var err error
		if k.w.down[i] {
			x, h, w, c, err = k.down(ws, x, n, h, w, c, bl, k.blocks[i])
		} else {
			x, err = k.residual(ws, x, n, h, w, c, bl, k.blocks[i])
		}
		if err != nil {
			return nil, err
		}
	}
	// Mean over the pixels, then the fully connected layer.
	feat := make([]float32, n*c)
	for img := range n {
		f := feat[img*c : (img+1)*c]
		for p := range h * w {
			v := x[(img*h*w+p)*c:][:c]
			for j := range f {
				f[j] += v[j]
			}
		}
		for j := range f {
			f[j] /= float32(h * w)
		}
	}
	return kernDense(feat, k.w.fc.F32, nil, n, c, DescriptorDim), nil
}

// residual is relu(conv2(relu(conv1(x))) + x) with 3×3 SAME convolutions.
func (k *descKern) residual(ws *kernWS, x []float32, n, h, w, c int, bl descResidualW, mm [2]*kernMatmul) ([]float32, error) {
	m := n * h * w
	t := ws.buf(m * c)
	if err := mm[0].run(ws, m, func(cols []float32) {
		kernIm2col(ws.par, cols, x, n, h, w, c, 3, 1, Same)
	}, func(v []float32) { kernBiasRelu(t, v, bl.conv1.b.F32, true) }); err != nil {
		return nil, err
	}
	out := ws.buf(m * c)
	b := bl.conv2.b.F32
	if err := mm[1].run(ws, m, func(cols []float32) {
		kernIm2col(ws.par, cols, t, n, h, w, c, 3, 1, Same)
	}, func(v []float32) {
		for i := 0; i < len(v); i += c {
			o, y, r := out[i:i+c], v[i:i+c], x[i:i+c]
			for j := range o {
				o[j] = max((y[j]+b[j])+r[j], 0)
			}
		}
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// down is the down-sampling block (see descResidualDown): conv1 3×3
// stride 2 VALID, conv2 3×3 SAME, zero-padded at the bottom and right to
// the size of the shortcut, a 2×2 average pool of x with zero channels
// appended.
func (k *descKern) down(ws *kernWS, x []float32, n, h, w, cin int, bl descResidualW, mm [2]*kernMatmul) (out []float32, ph, pw, cout int, err error) {
	cout = bl.conv1.w.Shape[3]
	oh, _, _ := outSize(h, 3, 2, Valid)
	ow, _, _ := outSize(w, 3, 2, Valid)
	m := n * oh * ow
	t := ws.buf(m * cout)
	if err := mm[0].run(ws, m, func(cols []float32) {
		kernIm2col(ws.par, cols, x, n, h, w, cin, 3, 2, Valid)
	}, func(v []float32) { kernBiasRelu(t, v, bl.conv1.b.F32, true) }); err != nil {
		return nil, 0, 0, 0, err
	}
	ph, pw = (h-2)/2+1, (w-2)/2+1
	pooled := ws.buf(n * ph * pw * cin)
	kernAvgPoolValid(pooled, x, n, h, w, cin, 2, 2)
	out = ws.buf(n * ph * pw * cout)
	b := bl.conv2.b.F32
	if err := mm[1].run(ws, m, func(cols []float32) {
		kernIm2col(ws.par, cols, t, n, oh, ow, cout, 3, 1, Same)
	}, func(v []float32) {
		for img := range n {
			for py := range ph {
				for px := range pw {
					o := out[((img*ph+py)*pw+px)*cout:][:cout]
					p := pooled[((img*ph+py)*pw+px)*cin:][:cin]
					if py < oh && px < ow {
						y := v[((img*oh+py)*ow+px)*cout:][:cout]
						for j := range o {
							o[j] = y[j] + b[j]
						}
					} else {
						clear(o)
					}
					for j := range p {
						o[j] += p[j]
					}
					kernRelu(o)
				}
			}
		}
	}); err != nil {
		return nil, 0, 0, 0, err
	}
	return out, ph, pw, cout, nil
}
