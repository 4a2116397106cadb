package nets

// kernGemm multiplies activation matrices by one constant [k, n] filter
// matrix in Go (AVX2 with GOEXPERIMENT=simd on amd64), for kernMatmul.
//
// Why not GoMLX's product: the pretrained networks' products are small
// and skinny (a 35×35 feature map times a 288×32 filter in the
// descriptor), and the backend's general matrix product spent most of the
// descriptor's time on them (about 16 GFLOP/s, pprof of
// BenchmarkDescriptor). The filter never changes, so it is packed once into
// panels of 16 columns, [n/16][k][16]; a 6×16 block of the output then
// stays in twelve AVX2 registers while k runs (in slices of kernGemmKC),
// each step reading 16 filter values in sequence and broadcasting one
// value from each of the six rows (kernGemmBlock).
type kernGemm struct {
	k, n   int
	panels []float32 // [n/16][k][16]: the first n16 columns, panel by panel
	n16    int       // columns covered by panels (n rounded down to 16)
	w      []float32 // the [k, n] filter, row-major (for the tail columns)
}

// kernGemmPanel is the width of a filter panel, kernGemmMR the rows of an
// output block.
const (
	kernGemmPanel = 16
	kernGemmMR    = 6
)

func newKernGemm(w []float32, k, n int) *kernGemm {
	g := &kernGemm{k: k, n: n, n16: n / kernGemmPanel * kernGemmPanel, w: w}
	g.panels = make([]float32, g.n16*k)
	for p := 0; p < g.n16/kernGemmPanel; p++ {
		dst := g.panels[p*k*kernGemmPanel : (p+1)*k*kernGemmPanel]
		for i := range k {
			copy(dst[i*kernGemmPanel:(i+1)*kernGemmPanel], w[i*n+p*kernGemmPanel:i*n+(p+1)*kernGemmPanel])
		}
	}
	return g
}

// mul writes y = a·W for the [m, k] matrix a into y ([m, n]), spreading
// the rows over par's workers when the product is large enough.
func (g *kernGemm) mul(par *kernPar, y, a []float32, m int) {
	a, y = a[:m*g.k], y[:m*g.n]
	blocks := (m + kernGemmMR - 1) / kernGemmMR
	par.For(blocks, kernGemmMR*g.k*g.n/4, func(lo, hi int) {
		r0, r1 := lo*kernGemmMR, min(hi*kernGemmMR, m)
		g.rows(y[r0*g.n:r1*g.n], a[r0*g.k:r1*g.k], r1-r0)
	})
}

// kernGemmKC is how much of the inner dimension one pass over the output
// covers: a [kernGemmKC][16] slice of a panel (16 KB) stays in the level-1
// cache while every row block uses it, where a whole panel (up to 147 KB
// in the descriptor) would be read again from level 2 for each block.
const kernGemmKC = 256

// rows computes rows [0, m) of the product of a and W into y.
func (g *kernGemm) rows(y, a []float32, m int) {
	k, n := g.k, g.n
	mb := m / kernGemmMR * kernGemmMR
	for k0 := 0; k0 < k; k0 += kernGemmKC {
		kc := min(kernGemmKC, k-k0)
		for p := 0; p < g.n16/kernGemmPanel; p++ {
			panel := g.panels[(p*k+k0)*kernGemmPanel : (p*k+k0+kc)*kernGemmPanel]
			for i := 0; i < mb; i += kernGemmMR {
				kernGemmBlock(y[i*n+p*kernGemmPanel:], n, a[i*k+k0:], k, kc, panel, k0 > 0)
			}
		}
	}
	if mb < m && g.n16 > 0 {
		// The last m−mb rows, padded with zero rows to a block.
		ta := make([]float32, kernGemmMR*k)
		copy(ta, a[mb*k:m*k])
		ty := make([]float32, kernGemmMR*g.n16)
		for k0 := 0; k0 < k; k0 += kernGemmKC {
			kc := min(kernGemmKC, k-k0)
			for p := 0; p < g.n16/kernGemmPanel; p++ {
				panel := g.panels[(p*k+k0)*kernGemmPanel : (p*k+k0+kc)*kernGemmPanel]
				kernGemmBlock(ty[p*kernGemmPanel:], g.n16, ta[k0:], k, kc, panel, k0 > 0)
			}
		}
		for i := mb; i < m; i++ {
			copy(y[i*n:i*n+g.n16], ty[(i-mb)*g.n16:(i-mb+1)*g.n16])
		}
	}
	if g.n16 < n {
		for i := range m {
			ar := a[i*k : (i+1)*k]
			yr := y[i*n+g.n16 : (i+1)*n]
			for j := range yr {
				yr[j] = 0
			}
			for t, x := range ar {
				wr := g.w[t*n+g.n16 : (t+1)*n]
				for j := range yr {
					yr[j] += x * wr[j]
				}
			}
		}
	}
}

// kernGemm1x16Generic writes the 16 values a·panel for one row a of kc
// values and a [kc][16] panel into y, or adds them to y when acc is set.
func kernGemm1x16Generic(y, a, panel []float32, acc bool) {
	var sum [kernGemmPanel]float32
	if acc {
		copy(sum[:], y[:kernGemmPanel])
	}
	for t, x := range a {
		pr := panel[t*kernGemmPanel : (t+1)*kernGemmPanel]
		for j := range sum {
			sum[j] += x * pr[j]
		}
	}
	copy(y[:kernGemmPanel], sum[:])
}

// kernGemmBlockGeneric is kernGemmBlock without SIMD.
func kernGemmBlockGeneric(y []float32, ldy int, a []float32, lda, kc int, panel []float32, acc bool) {
	for r := range kernGemmMR {
		kernGemm1x16Generic(y[r*ldy:r*ldy+kernGemmPanel], a[r*lda:r*lda+kc], panel, acc)
	}
}
