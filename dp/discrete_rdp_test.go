package dp

import (
	"math"
	"testing"
)

// latticeRDP computes, by direct summation over a box of Z^d, the Rényi
// divergences of one step of the Poisson-subsampled discrete Gaussian
// N_Z(0, s²I) against N_Z(v, s²I): removal D_α(μ‖μ0) and addition
// D_α(μ0‖μ) with μ = (1−q)μ0 + qμ1. It is independent of the closed forms
// in rdp.go.
func latticeRDP(s float64, v []int, q, alpha float64) (remove, add float64) {
	d := len(v)
	const r = 40 // box half-width; the mass outside is below e^{-40²/(2·9)}
	idx := make([]int, d)
	for i := range idx {
		idx[i] = -r
	}
	var z, sumRemove, sumAdd float64
	// Unnormalised weights: w0 = e^{-|x|²/2s²}, w1 = e^{-|x−v|²/2s²}; the
	// normaliser is the same for both (shift invariance is what the proof
	// uses, so compute z only from w0 and check it against the w1 sum).
	var z1 float64
	for {
		var n0, n1 float64
		for i, x := range idx {
			n0 += float64(x * x)
			n1 += float64((x - v[i]) * (x - v[i]))
		}
		w0 := math.Exp(-n0 / (2 * s * s))
		w1 := math.Exp(-n1 / (2 * s * s))
		z += w0
		z1 += w1
		m := (1-q)*w0 + q*w1
		if w0 > 0 && m > 0 {
			sumRemove += w0 * math.Pow(m/w0, alpha)
			sumAdd += m * math.Pow(w0/m, alpha)
		}
		k := 0
		for k < d && idx[k] == r {
			idx[k] = -r
			k++
		}
		if k == d {
			break
		}
		idx[k]++
	}
	if math.Abs(z1/z-1) > 1e-12 {
		panic("shifted normaliser differs")
	}
	return math.Log(sumRemove/z) / (alpha - 1), math.Log(sumAdd/z) / (alpha - 1)
}

// TestSubsampledDiscreteGaussianRDPExact checks the accounting argument of
// SubsampledDiscreteGaussianRDP numerically: at integer orders the removal
// divergence of the lattice mechanism equals the continuous sampled
// Gaussian's, addition never exceeds removal, and the charged value
// bounds both at every order, in one and two dimensions (a shift that is
// not along an axis).
func TestSubsampledDiscreteGaussianRDPExact(t *testing.T) {
	cases := []struct {
		s float64
		v []int
		q float64
	}{
		{1.3, []int{1}, 0.3},
		{2.5, []int{2}, 0.05},
		{0.9, []int{1}, 0.6},
		{2, []int{1, 2}, 0.2},
	}
	for _, c := range cases {
		var n2 float64
		for _, x := range c.v {
			n2 += float64(x * x)
		}
		mu := c.s / math.Sqrt(n2)
		for _, alpha := range []float64{1.5, 2, 2.7, 3, 4.5, 6, 9} {
			rem, add := latticeRDP(c.s, c.v, c.q, alpha)
			got, err := SubsampledDiscreteGaussianRDP(c.q, mu, alpha)
			if err != nil {
				t.Fatal(err)
			}
			tol := 1e-9 + 1e-9*rem
			if add > rem+tol {
				t.Errorf("s=%g v=%v q=%g α=%g: addition %.12g exceeds removal %.12g", c.s, c.v, c.q, alpha, add, rem)
			}
			if rem > got+tol {
				t.Errorf("s=%g v=%v q=%g α=%g: exact removal %.12g above the charged %.12g", c.s, c.v, c.q, alpha, rem, got)
			}
			if alpha == math.Trunc(alpha) {
				cont, _ := SubsampledGaussianRDP(c.q, mu, alpha)
				if math.Abs(rem-cont) > 1e-9*(1+cont) || math.Abs(got-cont) > 1e-12*(1+cont) {
					t.Errorf("s=%g v=%v q=%g α=%g: lattice %.12g, charged %.12g, continuous %.12g", c.s, c.v, c.q, alpha, rem, got, cont)
				}
			}
		}
	}
}

// TestRandomizedResponseAdditionBelowRemoval checks the lemma behind the
// addition direction on a grid of randomized-response pairs, including
// orders far from those used in the lattice test.
func TestRandomizedResponseAdditionBelowRemoval(t *testing.T) {
	for _, l := range []float64{0.01, 0.3, 1, 3, 8, 20} {
		r := math.Exp(l)
		p0 := []float64{1 / (1 + r), r / (1 + r)}
		p1 := []float64{r / (1 + r), 1 / (1 + r)}
		for _, q := range []float64{1e-4, 0.01, 0.2, 0.5, 0.9, 1} {
			for _, alpha := range []float64{1.01, 1.5, 2, 3.3, 10, 64} {
				var a, b float64
				for i := range 2 {
					m := (1-q)*p0[i] + q*p1[i]
					a += p0[i] * math.Pow(m/p0[i], alpha)
					b += m * math.Pow(p0[i]/m, alpha)
				}
				if b > a*(1+1e-12) {
					t.Errorf("ℓ=%g q=%g α=%g: addition moment %.15g above removal %.15g", l, q, alpha, b, a)
				}
			}
		}
	}
}
