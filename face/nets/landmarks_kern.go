package nets

import (
	"fmt"
)

// landmarkKern runs a landmark network with Go kernels, its matrix
// products included (see kern_ops.go).
type landmarkKern struct {
	w     *landmarkW
	pool  *kernWSPool
	conv0 *kernMatmul     // first block's 3×3 convolution
	pw    [][]*kernMatmul // pointwise products: per block, conv0 (unused in block 0) then convs
}

// newLandmarkKern prepares one product per convolution.
func newLandmarkKern(model string, w *landmarkW, par *kernPar) (*landmarkKern, error) {
	k := &landmarkKern{w: w, pool: newKernWSPool(par)}
	var err error
	for i, bl := range w.blocks {
		var mms []*kernMatmul
		seps := bl.convs
		if bl.first {
			cout := bl.conv0W.Shape[3]
			if k.conv0, err = newKernMatmul(model+".dense0.conv0", bl.conv0W.F32, 9*bl.conv0W.Shape[2], cout); err != nil {
				return nil, err
			}
			mms = append(mms, nil)
		} else {
			seps = append([]sepConv{bl.conv0}, seps...)
		}
		for j, s := range seps {
			if bl.first {
				j++
			}
			name := fmt.Sprintf("%s.dense%d.conv%d", model, i, j)
			mm, err := newKernMatmul(name, s.pw.F32, s.pw.Shape[2], s.pw.Shape[3])
			if err != nil {
				return nil, err
			}
			mms = append(mms, mm)
		}
		k.pw = append(k.pw, mms)
	}
	return k, nil
}

// forward maps n inputs [n][112][112][3] (0..255) to [n][136].
func (k *landmarkKern) forward(x []float32, n int) ([]float32, error) {
	ws := k.pool.get(n)
	out, err := k.pass(ws, x, n)
	k.pool.put(ws)
	return out, err
}

// pass is forward with the workspace ws.
func (k *landmarkKern) pass(ws *kernWS, x []float32, n int) ([]float32, error) {
	h, w, c := LandmarkSize, LandmarkSize, 3
	in := ws.buf(len(x))
	kernNormalize(in, x)
	for i, bl := range k.w.blocks {
		var sum []float32
		var oh, ow, cout int
		var err error
		if bl.first {
			cout = bl.conv0W.Shape[3]
			oh, _, _ = outSize(h, 3, 2, Same)
			ow, _, _ = outSize(w, 3, 2, Same)
			sum = ws.buf(n * oh * ow * cout)
			err = k.conv0.run(ws, n*oh*ow, func(cols []float32) {
				kernIm2col(ws.par, cols, in, n, h, w, c, 3, 2, Same)
			}, func(v []float32) { kernBiasRelu(sum, v, bl.conv0B.F32, true) })
		} else {
			cout = bl.conv0.pw.Shape[3]
			oh, _, _ = outSize(h, 3, 2, Same)
			ow, _, _ = outSize(w, 3, 2, Same)
			sum = ws.buf(n * oh * ow * cout)
			_, _, err = kernSepConv(ws, k.pw[i][0], bl.conv0.dw.F32, in, n, h, w, c, 2, func(v []float32) {
				kernBiasRelu(sum, v, bl.conv0.b.F32, true)
			})
		}
		if err != nil {
			return nil, err
		}
		h, w, c = oh, ow, cout
		// sum holds out1 + out2 + ...; each convolution reads relu(sum).
		in = sum
		act := ws.buf(len(sum))
		for j, s := range bl.convs {
			b := s.b.F32
			if _, _, err := kernSepConv(ws, k.pw[i][j+1], s.dw.F32, in, n, h, w, c, 1, func(v []float32) {
				for p := 0; p < len(v); p += c {
					sp, ap, vp := sum[p:p+c], act[p:p+c], v[p:p+c]
					for q := range sp {
						sp[q] += vp[q] + b[q]
						ap[q] = max(sp[q], 0)
					}
				}
			}); err != nil {
				return nil, err
			}
			in = act
		}
	}
	if h != k.w.pool || w != k.w.pool {
		return nil, fmt.Errorf("nets: landmark features are %d×%d, want %d×%d", h, w, k.w.pool, k.w.pool)
	}
	feat := ws.buf(n * c)
	kernAvgPoolValid(feat, in, n, h, w, c, k.w.pool, 2)
	return kernDense(feat, k.w.fcW.F32, k.w.fcB.F32, n, c, 136), nil
}
