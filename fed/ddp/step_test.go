package ddp

import (
	"crypto/rand"
	"math"
	mrand "math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/dp"
)

// stepPlan is a small plan for the round's arithmetic: n clients, noise
// share σ lattice units.
func stepPlan(dim, clients int, noise uint64) Plan {
	return Plan{Unit: dp.UnitIdentity, Delta: 1e-5, Clip: 1, SamplingRate: 0.1, Rounds: 10, Clients: clients, Threshold: clients - 1,
		Noise: noise, Dim: dim, Block: 256, Scale: 1 << 16, SumClip: 8, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 10}
}

// The survivors' encodings, added modulo 2^32 as masking reveals them,
// decode to the sum of their clipped sums plus noise whose variance is the
// survivors' shares' (n·σ²γ² per coordinate): each client adds its share,
// no more and no less, and a dropped client's vector is not in the sum.
func TestRoundDecodesTheSurvivorsNoisySum(t *testing.T) {
	const dim, clients = 4000, 5
	const noise = 2000
	plan := stepPlan(dim, clients, noise)
	var seed [32]byte
	rand.Read(seed[:])
	r, err := NewRound(plan, seed)
	if err != nil {
		t.Fatal(err)
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	want := make([]float64, dim)
	sum := make([]uint32, r.Padded())
	for k := range clients {
		v := make([]float32, dim)
		var n2 float64
		for i := range v {
			v[i] = float32(rng.NormFloat64())
			n2 += float64(v[i]) * float64(v[i])
		}
		// Client 0's sum is far above the sum clip (8 C): it arrives
		// clipped to 8.
		scale := 3 / math.Sqrt(n2)
		if k == 0 {
			scale = 100 / math.Sqrt(n2)
		}
		for i := range v {
			v[i] *= float32(scale)
		}
		enc, err := r.Encode(v, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if k == clients-1 {
			continue // dropped out: its encoding never reaches the sum
		}
		if err := Add(sum, enc); err != nil {
			t.Fatal(err)
		}
		c := 1.0
		if k == 0 {
			c = 8 / 100.0
		}
		for i := range want {
			want[i] += float64(v[i]) * c
		}
	}
	got, err := r.Decode(sum)
	if err != nil {
		t.Fatal(err)
	}
	gamma := plan.Clip / plan.Scale
	var se, mean float64
	for i := range got {
		d := float64(got[i]) - want[i]
		mean += d
		se += d * d
	}
	mean /= dim
	variance := se/dim - mean*mean
	// The noise is rotated back (orthogonal), so each coordinate carries
	// variance 4σ²γ² (4 survivors) plus the rounding's (below 4·γ²/4).
	wantVar := 4 * noise * noise * gamma * gamma
	if math.Abs(variance/wantVar-1) > 0.08 || math.Abs(mean) > 5*math.Sqrt(wantVar/dim) {
		t.Errorf("decoded error: mean %.3g, variance %.4g; want about 0 and %.4g (4 shares of σ = %d at γ = %g)", mean, variance, wantVar, noise, gamma)
	}
}

// With a negligible share the decoded sum is the clipped sums' to the
// lattice's precision: the rotation, scaling and modular sum lose nothing
// else, also when coordinates of the sum are negative.
func TestRoundArithmeticIsExactUpToTheLattice(t *testing.T) {
	const dim = 1000
	plan := stepPlan(dim, 3, 1)
	r, err := NewRound(plan, [32]byte{7})
	if err != nil {
		t.Fatal(err)
	}
	rng := mrand.New(mrand.NewPCG(3, 4))
	want := make([]float64, dim)
	sum := make([]uint32, r.Padded())
	for range 3 {
		v := make([]float32, dim)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.05)
			want[i] += float64(v[i])
		}
		enc, err := r.Encode(v, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		Add(sum, enc)
	}
	got, err := r.Decode(sum)
	if err != nil {
		t.Fatal(err)
	}
	tol := 3 * 12 * plan.Clip / plan.Scale // 3 clients' rounding and σ = 1 noise, 12 lattice units each, generously
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol {
			t.Fatalf("value %d: decoded %g, sum %g (off by %g > %g)", i, got[i], want[i], d, tol)
		}
	}
	if err := Add(sum, make([]uint32, 3)); err == nil {
		t.Error("adding encodings of different lengths accepted")
	}
	if _, err := r.Decode(sum[:10]); err == nil {
		t.Error("a short sum decoded")
	}
}
