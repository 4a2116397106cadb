package nets

import (
	"fmt"
	"sync"
)

// This file holds the plain-Go building blocks of the descriptor, landmark
// and age/gender networks: im2col, padding, biases, activations, residual
// sums and pools are direct loops over contiguous NHWC memory, and the
// matrix products are Go kernels too (kern_gemm.go). They used to run as
// GoMLX executions, but the backend's general product is slow on these
// small, skinny matrices.

// kernMatmul is the product of an [M, K] activation matrix with a constant
// [K, N] filter matrix; M (the number of output pixels of the whole batch)
// may vary.
type kernMatmul struct {
	name string
	gemm *kernGemm
	k, n int
}

// newKernMatmul wraps the [k, n] row-major matrix w.
func newKernMatmul(name string, w []float32, k, n int) (*kernMatmul, error) {
	if len(w) != k*n {
		return nil, fmt.Errorf("nets: %s: filter has %d values, want %d×%d", name, len(w), k, n)
	}
	return &kernMatmul{name: name, gemm: newKernGemm(w, k, n), k: k, n: n}, nil
}

// run fills an [m, K] matrix (a buffer of ws) with fill, multiplies it by
// the filter and hands the [m, N] product to use (which may modify it in
// place: the product is a buffer of ws that the next run reuses).
func (mm *kernMatmul) run(ws *kernWS, m int, fill func(cols []float32), use func(y []float32)) error {
	if m < 0 {
		return fmt.Errorf("nets: %s: %d rows", mm.name, m)
	}
	ws.colsBuf = grow(ws.colsBuf, m*mm.k)
	ws.prodBuf = grow(ws.prodBuf, m*mm.n)
	cols, y := ws.colsBuf[:m*mm.k], ws.prodBuf[:m*mm.n]
	fill(cols)
	mm.gemm.mul(ws.par, y, cols, m)
	use(y)
	return nil
}

// grow returns b if it holds n values, else a new slice of n values.
func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// kernWS is the reusable memory of one forward pass: the products' input
// and output matrices and the Go activation buffers. Reusing them avoids
// allocating and zeroing tens of megabytes per pass.
type kernWS struct {
	par              *kernPar // the network's parallelism
	n                int      // batch size
	colsBuf, prodBuf []float32
	acts             detArena // the activation buffers handed out by buf
	zero             []float32
}

// buf returns the pass's next activation buffer, of n values (not
// zeroed).
func (ws *kernWS) buf(n int) []float32 { return ws.acts.get(n) }

// zeros returns n zeros.
func (ws *kernWS) zeros(n int) []float32 {
	if len(ws.zero) < n {
		ws.zero = make([]float32, n)
	}
	return ws.zero[:n]
}

// kernWSPool keeps a few idle workspaces for reuse; it is safe for
// concurrent use (each pass takes a workspace of its own).
type kernWSPool struct {
	par  *kernPar // handed to every workspace
	mu   sync.Mutex
	free []*kernWS
}

// kernWSKeep is how many idle workspaces a pool keeps: one per
// concurrently running pass on this 2-core target. A descriptor workspace
// holds about 9 MB per input of its batch size, so at most about 70 MB
// stay allocated with netMaxBatch = 4.
const kernWSKeep = 2

func newKernWSPool(par *kernPar) *kernWSPool {
	return &kernWSPool{par: par}
}

// get returns a workspace for a batch of n inputs.
func (p *kernWSPool) get(n int) *kernWS {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, ws := range p.free {
		if ws.n == n {
			p.free = append(p.free[:i], p.free[i+1:]...)
			ws.acts.next = 0
			return ws
		}
	}
	return &kernWS{n: n, par: p.par}
}

// put returns ws to the pool; the caller must not use it or any buffer it
// handed out afterwards. When the pool is full, the oldest idle workspace
// is dropped.
func (p *kernWSPool) put(ws *kernWS) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == kernWSKeep {
		p.free = append(p.free[:0], p.free[1:]...)
	}
	p.free = append(p.free, ws)
}

// kernNormalize writes face-api's (x - mean) / 255 of the n·size·size·3
// values of in to out (see faNormalize).
func kernNormalize(out, in []float32) {
	mean := [3]float32{122.782, 117.001, 104.298}
	out = out[:len(in)]
	for i := 0; i+3 <= len(in); i += 3 {
		out[i] = (in[i] - mean[0]) / 255
		out[i+1] = (in[i+1] - mean[1]) / 255
		out[i+2] = (in[i+2] - mean[2]) / 255
	}
}

// kernIm2col writes the k×k windows (stride s, TensorFlow padding p, zero
// fill) of the n images in ([n][h][w][c]) as rows of dst: one row per
// output pixel, tap-major then channel, matching an HWIO filter reshaped to
// [k·k·c, cout]. It returns the output size.
func kernIm2col(par *kernPar, dst, in []float32, n, h, w, c, k, s int, p Padding) (oh, ow int) {
	oh, pt, _ := outSize(h, k, s, p)
	ow, pl, _ := outSize(w, k, s, p)
	row := k * k * c
	dst = dst[:n*oh*ow*row]
	par.For(n*oh, ow*row, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			img, oy := r/oh, r%oh
			src := in[img*h*w*c : (img+1)*h*w*c]
			for ox := 0; ox < ow; ox++ {
				d := dst[(r*ow+ox)*row : (r*ow+ox+1)*row]
				for ky := 0; ky < k; ky++ {
					iy := oy*s + ky - pt
					dk := d[ky*k*c : (ky+1)*k*c]
					if iy < 0 || iy >= h {
						clear(dk)
						continue
					}
					ix0 := ox*s - pl
					// Copy the in-bounds run of the kernel row in one go.
					lo := min(max(0, -ix0), k)
					hi := max(min(k, w-ix0), lo)
					clear(dk[:lo*c])
					copy(dk[lo*c:hi*c], src[(iy*w+ix0+lo)*c:(iy*w+ix0+hi)*c])
					clear(dk[hi*c:])
				}
			}
		}
	})
	return oh, ow
}

// kernBiasRelu writes y + b (b per channel), then max(·, 0) if relu is set,
// for every row of y ([m][c]) to dst.
func kernBiasRelu(dst, y, b []float32, relu bool) {
	c := len(b)
	dst = dst[:len(y)]
	for i := 0; i < len(y); i += c {
		o, v := dst[i:i+c], y[i:i+c]
		for j := range o {
			o[j] = v[j] + b[j]
		}
		if relu {
			kernRelu(o)
		}
	}
}

// kernRelu is max(x, 0) in place.
func kernRelu(x []float32) {
	for i, v := range x {
		x[i] = max(v, 0)
	}
}

// kernMaxPoolValid is a k×k VALID max pool with stride s of n images
// [n][h][w][c]; it writes [n][oh][ow][c] to dst and returns oh, ow.
func kernMaxPoolValid(dst, in []float32, n, h, w, c, k, s int) (oh, ow int) {
	oh, ow = (h-k)/s+1, (w-k)/s+1
	for img := range n {
		src := in[img*h*w*c:]
		for oy := range oh {
			for ox := range ow {
				o := dst[((img*oh+oy)*ow+ox)*c:][:c]
				copy(o, src[(oy*s*w+ox*s)*c:][:c])
				for ky := range k {
					for kx := range k {
						v := src[((oy*s+ky)*w+ox*s+kx)*c:][:c]
						for j := range o {
							o[j] = max(o[j], v[j])
						}
					}
				}
			}
		}
	}
	return oh, ow
}

// kernMaxPoolSame is a k×k SAME max pool with stride s (padded cells never
// win) of n images [n][h][w][c]; it writes [n][oh][ow][c] to dst.
func kernMaxPoolSame(dst, in []float32, n, h, w, c, k, s int) (oh, ow int) {
	oh, pt, _ := outSize(h, k, s, Same)
	ow, pl, _ := outSize(w, k, s, Same)
	for img := range n {
		src := in[img*h*w*c:]
		for oy := range oh {
			for ox := range ow {
				o := dst[((img*oh+oy)*ow+ox)*c:][:c]
				first := true
				for ky := range k {
					iy := oy*s + ky - pt
					if iy < 0 || iy >= h {
						continue
					}
					for kx := range k {
						ix := ox*s + kx - pl
						if ix < 0 || ix >= w {
							continue
						}
						v := src[(iy*w+ix)*c:][:c]
						if first {
							copy(o, v)
							first = false
							continue
						}
						for j := range o {
							o[j] = max(o[j], v[j])
						}
					}
				}
			}
		}
	}
	return oh, ow
}

// kernSepConv runs a 3×3 SAME depthwise convolution (filters dw
// [3][3][c], stride st, no bias) of the n images in ([n][h][w][c]) straight
// into the input of the pointwise product mm and hands the
// [n·oh·ow, cout] product (without bias) to use.
func kernSepConv(ws *kernWS, mm *kernMatmul, dw, in []float32, n, h, w, c, st int, use func(y []float32)) (oh, ow int, err error) {
	oh, _, _ = outSize(h, 3, st, Same)
	ow, _, _ = outSize(w, 3, st, Same)
	zero := ws.zeros(c)
	err = mm.run(ws, n*oh*ow, func(cols []float32) {
		for img := range n {
			ssdDepthwise3x3(ws.par, cols[img*oh*ow*c:(img+1)*oh*ow*c], in[img*h*w*c:(img+1)*h*w*c], h, w, c, st, dw, zero, false)
		}
	}, use)
	return oh, ow, err
}

// kernAvgPoolValid is a k×k VALID average pool with stride s of n images
// [n][h][w][c] (window sum in row-major tap order, times 1/k²); it writes
// [n][oh][ow][c] to dst.
func kernAvgPoolValid(dst, in []float32, n, h, w, c, k, s int) (oh, ow int) {
	oh, ow = (h-k)/s+1, (w-k)/s+1
	scale := float32(1 / float64(k*k))
	for img := range n {
		src := in[img*h*w*c:]
		for oy := range oh {
			for ox := range ow {
				o := dst[((img*oh+oy)*ow+ox)*c:][:c]
				clear(o)
				for ky := range k {
					for kx := range k {
						v := src[((oy*s+ky)*w+ox*s+kx)*c:][:c]
						for j := range o {
							o[j] += v[j]
						}
					}
				}
				for j := range o {
					o[j] *= scale
				}
			}
		}
	}
	return oh, ow
}

// kernDense computes x·w + b for the rows of x ([n][k]) with w [k][m],
// accumulating in float64; b may be nil.
func kernDense(x, w, b []float32, n, k, m int) []float32 {
	out := make([]float32, n*m)
	acc := make([]float64, m)
	for i := range n {
		clear(acc)
		for j, v := range x[i*k : (i+1)*k] {
			row := w[j*m : (j+1)*m]
			for o := range acc {
				acc[o] += float64(v) * float64(row[o])
			}
		}
		for o := range acc {
			if b != nil {
				acc[o] += float64(b[o])
			}
			out[i*m+o] = float32(acc[o])
		}
	}
	return out
}
