package dp

import (
	"math"
	"math/bits"
)

// fftPlan holds the twiddle factors of a radix-2 FFT of length n.
type fftPlan struct {
	n   int
	tw  []complex128 // e^{−2πik/n}, k < n/2
	inv []complex128 // conjugates, for the inverse transform
}

// newFFTPlan returns a plan for length n (a power of two).
func newFFTPlan(n int) *fftPlan {
	tw := make([]complex128, n/2)
	inv := make([]complex128, n/2)
	for k := range tw {
		s, c := math.Sincos(-2 * math.Pi * float64(k) / float64(n))
		tw[k] = complex(c, s)
		inv[k] = complex(c, -s)
	}
	return &fftPlan{n: n, tw: tw, inv: inv}
}

// transform computes the DFT of x in place (len(x) = p.n); inverse selects
// the inverse transform, scaled by 1/n.
func (p *fftPlan) transform(x []complex128, inverse bool) {
	n := p.n
	if n <= 1 {
		return
	}
	shift := 64 - uint(bits.TrailingZeros(uint(n)))
	for i := range n {
		j := int(bits.Reverse64(uint64(i)) >> shift)
		if j > i {
			x[i], x[j] = x[j], x[i]
		}
	}
	tw := p.tw
	if inverse {
		tw = p.inv
	}
	for size := 2; size <= n; size <<= 1 {
		half := size / 2
		stride := n / size
		for start := 0; start < n; start += size {
			lo := x[start : start+half]
			hi := x[start+half : start+size]
			for k := range half {
				a := lo[k]
				b := hi[k] * tw[k*stride]
				lo[k] = a + b
				hi[k] = a - b
			}
		}
	}
	if inverse {
		inv := 1 / float64(n)
		for i := range x {
			x[i] = complex(real(x[i])*inv, imag(x[i])*inv)
		}
	}
}

// fft is a one-shot transform (len(x) a power of two).
func fft(x []complex128, inverse bool) { newFFTPlan(len(x)).transform(x, inverse) }
