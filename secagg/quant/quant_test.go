package quant

import (
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func testRand(seed byte) io.Reader {
	var s [32]byte
	s[0] = seed
	return rand.NewChaCha8(s)
}

func randVec(r *rand.Rand, d int, norm float64) []float32 {
	v := make([]float32, d)
	var n2 float64
	for i := range v {
		x := r.NormFloat64()
		v[i] = float32(x)
		n2 += x * x
	}
	s := norm / math.Sqrt(n2)
	for i := range v {
		v[i] = float32(float64(v[i]) * s)
	}
	return v
}

func clipped(x []float32, c float64) []float64 {
	var n2 float64
	for _, v := range x {
		n2 += float64(v) * float64(v)
	}
	s := 1.0
	if n := math.Sqrt(n2); n > c {
		s = c / n
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) * s
	}
	return out
}

func dist(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += (a[i] - b[i]) * (a[i] - b[i])
	}
	return math.Sqrt(s)
}

// TestSumRoundTrip: the decoded modular sum of n encodings (no noise) is
// the sum of the clipped inputs within the rounding error's deterministic
// bound γ·n·√D' (each client's rounding error has norm < √D' and the
// rotation is orthogonal).
func TestSumRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		d, block, n int
		beta        float64
		bits        int
		scale       float64 // input norm / clip
	}{
		{100, 0, 5, math.Exp(-0.5), 32, 0.7},
		{100, 0, 5, 0, 20, 3}, // clipped inputs, no conditioning
		{1, 0, 3, math.Exp(-0.5), 20, 1},
		{1000, 0, 20, 0.1, 24, 1.5},
		{1000, 256, 20, 0.1, 24, 1.5},         // D' = 1024 in 4 blocks
		{3000, 512, 7, math.Exp(-0.5), 32, 1}, // D' = 3072, not a power of two
		{5, 2, 3, math.Exp(-0.5), 24, 1},
	} {
		cfg := Config{Dim: tc.d, Block: tc.block, ClipNorm: 2, Gamma: 1e-3, Beta: tc.beta, Bits: tc.bits, Clients: tc.n, WrapProb: 1e-9}
		q, err := New(cfg, [32]byte{1})
		if err != nil {
			t.Fatal(err)
		}
		if tc.block > 0 && q.Padded() != (tc.d+tc.block-1)/tc.block*tc.block {
			t.Fatalf("%+v: padded to %d", tc, q.Padded())
		}
		r := testRand(byte(tc.d))
		pr := rand.New(rand.NewPCG(uint64(tc.d), 1))
		sum := make([]uint32, q.Padded())
		want := make([]float64, tc.d)
		for range tc.n {
			x := randVec(pr, tc.d, tc.scale*cfg.ClipNorm)
			e, err := q.Encode(x, r)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range e {
				if v>>tc.bits != 0 {
					t.Fatalf("encoded value %d outside Z_2^%d", v, tc.bits)
				}
				sum[i] += v
			}
			for i, v := range clipped(x, cfg.ClipNorm) {
				want[i] += v
			}
		}
		got, err := q.Decode(sum)
		if err != nil {
			t.Fatal(err)
		}
		if e, tol := dist(got, want), cfg.Gamma*float64(tc.n)*math.Sqrt(float64(q.Padded())); e > tol {
			t.Fatalf("%+v: error %.3g above %.3g", tc, e, tol)
		}
	}
}

// TestNoisySumAccuracy: with noise, the decoded sum's error is the noise
// of n clients: ‖error‖² ≈ γ²·D'·(nσ² + rounding), checked within 10%.
func TestNoisySumAccuracy(t *testing.T) {
	cfg := Config{Dim: 4000, ClipNorm: 1, Gamma: 1e-3, Beta: math.Exp(-0.5), Bits: 32, Noise: 20, Clients: 8, WrapProb: 1e-9}
	q, err := New(cfg, [32]byte{2})
	if err != nil {
		t.Fatal(err)
	}
	r := testRand(3)
	pr := rand.New(rand.NewPCG(3, 4))
	sum := make([]uint32, q.Padded())
	want := make([]float64, cfg.Dim)
	for range cfg.Clients {
		x := randVec(pr, cfg.Dim, 1)
		e, _ := q.Encode(x, r)
		for i, v := range e {
			sum[i] += v
		}
		for i, v := range x {
			want[i] += float64(v)
		}
	}
	got, _ := q.Decode(sum)
	// The error in the padded rotated domain has variance ≈ nσ² + n/6 per
	// coordinate (rounding of uniform fractional parts: ≤ 1/4, ≈ 1/6);
	// the first d coordinates carry a fraction d/D' of it.
	e2 := dist(got, want) * dist(got, want) / (cfg.Gamma * cfg.Gamma)
	exp := float64(cfg.Dim) * float64(cfg.Clients) * (400 + 1.0/6)
	if math.Abs(e2/exp-1) > 0.1 {
		t.Fatalf("squared error %.4g, expected about %.4g", e2, exp)
	}
}

// TestConditionalRoundingBound: every rounded vector satisfies the norm
// bound, and with β near 1 the bound is tight enough that unconditional
// rounding would often exceed it (so the resampling is doing work).
func TestConditionalRoundingBound(t *testing.T) {
	// c = C/γ = 8 and v = (½, …, ½) in D' = 256 dimensions: ‖v‖ = c,
	// E‖round(v)‖² = c² + D'/4 = 128, and the β = 0.999 bound is 128.7.
	cfg := Config{Dim: 256, ClipNorm: 0.08, Gamma: 1e-2, Beta: 0.999, Bits: 32, Clients: 1, WrapProb: 1e-9}
	q, err := New(cfg, [32]byte{4})
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float64, q.Padded())
	c := cfg.ClipNorm / cfg.Gamma
	for i := range v {
		v[i] = c / 16 * (1 - 1e-15) // keep ‖v‖ ≤ c despite rounding
	}
	src := rand.NewChaCha8([32]byte{5})
	exceed := 0
	for range 2000 {
		// Unconditional rounding of v.
		var u2 float64
		for _, x := range v {
			f := math.Floor(x)
			z := f
			if float64(src.Uint64()>>11)*0x1p-53 < x-f {
				z++
			}
			u2 += z * z
		}
		if u2 > q.norm2 {
			exceed++
		}
		y, err := q.round(v, src)
		if err != nil {
			t.Fatal(err)
		}
		var y2 float64
		for _, z := range y {
			y2 += float64(z) * float64(z)
		}
		if y2 > q.norm2 {
			t.Fatalf("rounded norm² %g above the bound %g", y2, q.norm2)
		}
	}
	if exceed == 0 {
		t.Fatal("unconditional rounding never exceeded the bound: the test does not exercise the resampling")
	}
	t.Logf("unconditional rounding exceeded the bound in %d of 2000 tries", exceed)
	l2, l1 := q.Sensitivity()
	if math.Abs(l2*l2-q.norm2) > 1e-9*q.norm2 || l1 > math.Sqrt(float64(q.Padded()))*l2*(1+1e-12) {
		t.Fatalf("sensitivity %g, %g inconsistent with norm² bound %g", l2, l1, q.norm2)
	}
}

// wrapConfig is small enough that the wrap bound binds at a few dozen
// clients.
func wrapConfig() Config {
	return Config{Dim: 60, ClipNorm: 1, Gamma: 1.0 / 64, Beta: math.Exp(-0.5), Bits: 14, Noise: 3, Clients: 1, WrapProb: 1e-9}
}

// TestWrapBoundBlocks: the block layout's bound is the same check with
// the signal term of its block size; it accepts fewer clients than one
// block of the same padded length, accepts exactly MaxClients and keeps
// the sums of aligned inputs inside the bound.
func TestWrapBoundBlocks(t *testing.T) {
	one := wrapConfig()
	blocks := one
	blocks.Block = 16 // D' = 64 in four blocks
	b1, _ := Bound(one)
	b4, err := Bound(blocks)
	if err != nil {
		t.Fatal(err)
	}
	if !(b4.MaxClients < b1.MaxClients) {
		t.Fatalf("blocks of 16 allow %d clients, one block of 64 %d", b4.MaxClients, b1.MaxClients)
	}
	at := blocks
	at.Clients = b4.MaxClients
	q, err := New(at, [32]byte{12})
	if err != nil {
		t.Fatal(err)
	}
	at.Clients++
	if _, err := New(at, [32]byte{12}); err == nil {
		t.Fatal("one client beyond the block bound accepted")
	}
	r := testRand(13)
	x := make([]float32, at.Dim)
	x[5] = float32(at.ClipNorm)
	sum := make([]int64, q.Padded())
	for range b4.MaxClients {
		y, err := q.encodeInts(x, r)
		if err != nil {
			t.Fatal(err)
		}
		for i, z := range y {
			sum[i] += z
		}
	}
	for i, s := range sum {
		if float64(max(s, -s)) > q.WrapBound().Bound {
			t.Fatalf("|S_%d| = %d above the stated bound %.1f", i, s, q.WrapBound().Bound)
		}
	}
	if _, err := New(Config{Dim: 60, Block: 24, ClipNorm: 1, Gamma: 1, Bits: 32, Clients: 1, WrapProb: 1e-9}, [32]byte{}); err == nil || !strings.Contains(err.Error(), "block") {
		t.Fatalf("block 24: %v", err)
	}
}

// TestWrapBoundAtAndBeyond: New accepts exactly MaxClients clients and
// refuses one more; at MaxClients, sums of encodings of random and
// axis-aligned inputs stay within the stated bound and decode exactly;
// MaxNoise is likewise the last accepted noise.
func TestWrapBoundAtAndBeyond(t *testing.T) {
	cfg := wrapConfig()
	b, err := Bound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := b.MaxClients
	t.Logf("b = %d, D' = 64, C/γ = 64, σ = 3, wrap probability 1e-9: at most %d clients (bound %.1f ≤ %.0f at %d clients; %.1f at %d)",
		cfg.Bits, m, boundAt(64, 64, 64, m, 3, 1e-9), b.Limit, m, boundAt(64, 64, 64, m+1, 3, 1e-9), m+1)
	if m < 5 || m > 1000 {
		t.Fatalf("MaxClients %d: the test parameters are off", m)
	}
	at := cfg
	at.Clients = m
	q, err := New(at, [32]byte{6})
	if err != nil {
		t.Fatalf("at the bound (%d clients): %v", m, err)
	}
	beyond := cfg
	beyond.Clients = m + 1
	if _, err := New(beyond, [32]byte{6}); err == nil || !strings.Contains(err.Error(), "wrap") {
		t.Fatalf("beyond the bound (%d clients): %v", m+1, err)
	}
	nb := at
	nb.Noise = q.WrapBound().MaxNoise
	if _, err := New(nb, [32]byte{6}); err != nil {
		t.Fatalf("at MaxNoise %d: %v", nb.Noise, err)
	}
	nb.Noise++
	if _, err := New(nb, [32]byte{6}); err == nil {
		t.Fatalf("noise %d beyond MaxNoise accepted", nb.Noise)
	}
	r := testRand(7)
	pr := rand.New(rand.NewPCG(7, 8))
	limit := int64(1)<<(at.Bits-1) - 1
	for trial := range 20 {
		ints := make([]int64, q.Padded())
		mod := make([]uint32, q.Padded())
		want := make([]float64, at.Dim)
		for range m {
			var x []float32
			if trial%2 == 0 {
				x = make([]float32, at.Dim)
				x[trial%at.Dim] = float32(at.ClipNorm) // all clients aligned
			} else {
				x = randVec(pr, at.Dim, at.ClipNorm)
			}
			y, err := q.encodeInts(x, r)
			if err != nil {
				t.Fatal(err)
			}
			for i, z := range y {
				ints[i] += z
				mod[i] += uint32(uint64(z) & (1<<at.Bits - 1))
			}
			for i, v := range x {
				want[i] += float64(v)
			}
		}
		for i, s := range ints {
			if math.Abs(float64(s)) > b.Limit || s > limit || s < -limit-1 {
				t.Fatalf("trial %d: coordinate %d of the sum is %d, beyond 2^(b−1)", trial, i, s)
			}
			if float64(max(s, -s)) > q.WrapBound().Bound {
				t.Fatalf("trial %d: |S_%d| = %d above the stated bound %.1f", trial, i, s, q.WrapBound().Bound)
			}
		}
		got, _ := q.Decode(mod)
		// Decoding the modular sum equals decoding the integer sum.
		exact := make([]uint32, len(ints))
		for i, s := range ints {
			exact[i] = uint32(s)
		}
		ref, _ := q.Decode(exact)
		for i := range got {
			if got[i] != ref[i] {
				t.Fatalf("trial %d: the modular sum decodes differently from the integer sum", trial)
			}
		}
	}
}

// TestWrapIsRealBeyondLimit: clients that know the rotation can align
// their inputs with one rotated coordinate; enough of them then make the
// sum wrap and the decoded aggregate is wrong. This is why the bound's
// probability is over signs chosen independently of the data, and why a
// wrap is an accuracy failure only (the output is still a function of
// the noisy integer sum).
func TestWrapIsRealBeyondLimit(t *testing.T) {
	cfg := wrapConfig()
	cfg.Noise = 0
	cfg.Clients = 1
	q, err := New(cfg, [32]byte{8})
	if err != nil {
		t.Fatal(err)
	}
	// x = C·U⁻¹e₀ restricted to the first d coordinates: its rotation
	// puts most of its mass on coordinate 0.
	e0 := make([]uint32, q.Padded())
	e0[0] = 1
	dir, _ := q.Decode(e0)
	x := make([]float32, cfg.Dim)
	var n2 float64
	for _, v := range dir {
		n2 += v * v
	}
	for i, v := range dir {
		x[i] = float32(v / math.Sqrt(n2) * cfg.ClipNorm)
	}
	c := cfg.ClipNorm / cfg.Gamma
	n := int(float64(int64(1)<<(cfg.Bits-1))/(c*math.Sqrt(float64(cfg.Dim)/float64(q.Padded())))) + 2
	r := testRand(9)
	sum := make([]uint32, q.Padded())
	var s0 int64
	for range n {
		y, _ := q.encodeInts(x, r)
		s0 += y[0]
		for i, z := range y {
			sum[i] += uint32(uint64(z) & (1<<cfg.Bits - 1))
		}
	}
	if s0 <= int64(1)<<(cfg.Bits-1) {
		t.Fatalf("aligned sum %d did not pass 2^(b−1): the test is off", s0)
	}
	got, _ := q.Decode(sum)
	var want []float64
	for range n {
		if want == nil {
			want = make([]float64, cfg.Dim)
		}
		for i, v := range x {
			want[i] += float64(v)
		}
	}
	if dist(got, want) < float64(n)*cfg.ClipNorm/2 {
		t.Fatal("the wrapped sum decoded correctly; wrapping is not happening")
	}
}

func TestConfigRefusals(t *testing.T) {
	good := wrapConfig()
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"dim", func(c *Config) { c.Dim = 0 }, "dimension"},
		{"clip", func(c *Config) { c.ClipNorm = math.Inf(1) }, "clip"},
		{"gamma", func(c *Config) { c.Gamma = 0 }, "γ"},
		{"beta", func(c *Config) { c.Beta = 1 }, "β"},
		{"bits", func(c *Config) { c.Bits = 33 }, "bits"},
		{"clients", func(c *Config) { c.Clients = 0 }, "clients"},
		{"wrap prob", func(c *Config) { c.WrapProb = 0 }, "wrap probability"},
		{"too fine", func(c *Config) { c.Gamma = 1e-9 }, "not even one client"},
	} {
		c := good
		tc.mod(&c)
		if _, err := New(c, [32]byte{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	q, _ := New(good, [32]byte{})
	if _, err := q.Encode(make([]float32, good.Dim+1), testRand(1)); err == nil {
		t.Fatal("wrong length accepted")
	}
	bad := make([]float32, good.Dim)
	bad[3] = float32(math.NaN())
	if _, err := q.Encode(bad, testRand(1)); err == nil {
		t.Fatal("NaN accepted")
	}
	if _, err := q.Decode(make([]uint32, 3)); err == nil {
		t.Fatal("short aggregate accepted")
	}
}

// TestMechanismCharges: the quantiser's sensitivity feeds the DDG
// accountant, and more honest clients give a smaller ε.
func TestMechanismCharges(t *testing.T) {
	cfg := Config{Dim: 1000, ClipNorm: 1, Gamma: 1e-2, Beta: math.Exp(-0.5), Bits: 32, Noise: 60, Clients: 10, WrapProb: 1e-9}
	q, err := New(cfg, [32]byte{9})
	if err != nil {
		t.Fatal(err)
	}
	var prev float64 = math.Inf(1)
	for _, honest := range []int{3, 5, 10} {
		m, err := q.Mechanism(honest)
		if err != nil {
			t.Fatal(err)
		}
		eps, _, err := m.Epsilon(nil, 1, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		if !(eps < prev) {
			t.Fatalf("ε %g with %d honest clients not below %g", eps, honest, prev)
		}
		prev = eps
	}
	cfg.Noise = 0
	q0, _ := New(cfg, [32]byte{9})
	if _, err := q0.Mechanism(3); err == nil {
		t.Fatal("a round without noise was given a privacy charge")
	}
}
