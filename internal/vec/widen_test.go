package vec

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAxpyWidenIsThePlainLoop: the vector kernel's sums are bit-for-bit
// the plain loop's, at every length around the vector widths, including
// subnormal, huge and negative values, and y past len(x) is left alone.
func TestAxpyWidenIsThePlainLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -3.4e38, 3.4e38, 1.17549435e-38, 0.1, -7.25}
	for _, n := range []int{0, 1, 3, 15, 16, 17, 31, 32, 33, 100, 1027} {
		for _, alpha := range []float64{1, 0.3, 1e-300, 7e10} {
			x := make([]float32, n)
			for i := range x {
				if i < len(special) && n > 20 {
					x[i] = special[i]
				} else {
					x[i] = float32(rng.NormFloat64()) * float32(math.Pow(10, float64(rng.IntN(9)-4)))
				}
			}
			got := make([]float64, n+1)
			want := make([]float64, n+1)
			for i := range got {
				got[i] = rng.NormFloat64()
				want[i] = got[i]
			}
			AxpyWiden(alpha, x, got)
			for i, v := range x {
				want[i] += alpha * float64(v)
			}
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("n=%d alpha=%g: y[%d] is %v, the plain loop gives %v", n, alpha, i, got[i], want[i])
				}
			}
		}
	}
}

// TestSqNormWiden: the squared norm is the plain loop's within float64
// rounding; a NaN or an infinity anywhere (in every lane and in the tail)
// makes it non-finite; the largest float32 values square without
// overflow.
func TestSqNormWiden(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 15, 16, 17, 33, 1000, 4099} {
		x := randVec32(rng, n)
		var want float64
		for _, v := range x {
			want += float64(v) * float64(v)
		}
		if got := SqNormWiden(x); math.Abs(got-want) > 1e-12*want {
			t.Errorf("n=%d: Σx² = %v, the plain loop gives %v", n, got, want)
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			for at := 0; at < n; at += max(1, n/37) {
				y := append([]float32(nil), x...)
				y[at] = bad
				if s := SqNormWiden(y); !math.IsNaN(s) && !math.IsInf(s, 0) {
					t.Fatalf("n=%d: %v at %d gives the finite Σx² %v", n, bad, at, s)
				}
			}
		}
		big := make([]float32, n)
		for i := range big {
			big[i] = math.MaxFloat32
		}
		if s := SqNormWiden(big); n > 0 && (math.IsInf(s, 0) || math.Abs(s-float64(n)*math.MaxFloat32*math.MaxFloat32) > 1e-12*s) {
			t.Errorf("n=%d: Σx² of MaxFloat32 values is %v", n, s)
		}
	}
}

// BenchmarkWidenBetweenScalarCode runs the widening kernels as the
// federation does, with other code between calls, against plain loops:
// SqNormWiden on each 32 KiB block of a 557,824-value update after the
// block is hashed (SHA-256, whose SHA-NI instructions are SSE, as the
// update decoder does), and AxpyWiden on each 8,192-value block of a sum
// followed by a scalar pass over part of it (as a mean is taken). A
// kernel that left the AVX registers' upper halves dirty would slow the
// SSE code after it.
func BenchmarkWidenBetweenScalarCode(b *testing.B) {
	const n, block = 557824, 8192
	rng := rand.New(rand.NewPCG(5, 6))
	x := randVec32(rng, n)
	raw := make([]byte, 4*n)
	for i, v := range x {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	y := make([]float64, n)
	mean := make([]float32, 1024)
	for _, k := range []struct {
		name string
		norm func([]float32) float64
		axpy func(float64, []float32, []float64)
	}{{"vec", SqNormWiden, AxpyWiden}, {"plain", sqNormWidenScalar, axpyWidenScalar}} {
		b.Run("SqNormWiden/"+k.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			h := sha256.New()
			for b.Loop() {
				h.Reset()
				var s float64
				for i := 0; i < n; i += block {
					j := min(i+block, n)
					h.Write(raw[4*i : 4*j])
					s += k.norm(x[i:j])
				}
				if math.IsNaN(s) || len(h.Sum(nil)) != sha256.Size {
					b.Fatal("a finite update's Σx² is NaN")
				}
			}
		})
		b.Run("AxpyWiden/"+k.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				for i := 0; i < n; i += block {
					j := min(i+block, n)
					k.axpy(0.5, x[i:j], y[i:j])
					for m := range mean {
						mean[m] = float32(y[i+m%(j-i)] / 3)
					}
				}
			}
		})
	}
}
