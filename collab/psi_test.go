package collab

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/tagging"
)

// synthLibrary makes a library of people around random centres (spread
// 0.09 per coordinate, noise 0.02: distances like the descriptors'), the
// last strangers people with one face.
func synthLibrary(rng *rand.Rand, people, faces, strangers int) *Library {
	l := &Library{Stranger: map[int]bool{}}
	for p := range people + strangers {
		c := make([]float64, 128)
		for i := range c {
			c[i] = 0.09 * rng.NormFloat64()
		}
		n := faces
		if p >= people {
			n = 1
			l.Stranger[p] = true
		}
		for range n {
			d := make([]float32, 128)
			for i := range d {
				d[i] = float32(c[i] + 0.02*rng.NormFloat64())
			}
			l.Descs = append(l.Descs, d)
			l.Person = append(l.Person, p)
		}
	}
	return l
}

// TestPsiStartsAtTheIdentity: an untrained ψ maps every descriptor to
// itself bit for bit (linear and MLP), so a library's suggestions through
// it are exactly today's.
func TestPsiStartsAtTheIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := synthLibrary(rng, 12, 5, 20)
	for _, hidden := range []int{0, 32} {
		ψ, err := NewPsi(PsiOptions{Hidden: hidden, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range l.Descs {
			y, err := ψ.Apply(d)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(y, d) {
				t.Fatalf("hidden %d: ψ(x) ≠ x for face %d", hidden, i)
			}
		}
		isNamed := chooseNamed(l, 3, rand.New(rand.NewPCG(4, 5)))
		plain, err := queries(l, l.Descs, isNamed)
		if err != nil {
			t.Fatal(err)
		}
		ys, err := mapAll(ψ.Apply, l.Descs)
		if err != nil {
			t.Fatal(err)
		}
		through, err := queries(l, ys, isNamed)
		if err != nil {
			t.Fatal(err)
		}
		def := tagging.DefaultSuggestOptions()
		var a, b Counts
		a.count(plain, def.Distance, def.Margin)
		b.count(through, def.Distance, def.Margin)
		if a != b || a.Suggested == 0 {
			t.Fatalf("hidden %d: suggestions through ψ %+v, plain %+v", hidden, b, a)
		}
		for i := range plain {
			if plain[i].best != through[i].best || plain[i].second != through[i].second {
				t.Fatalf("hidden %d: query %d's nearest people differ through ψ", hidden, i)
			}
		}
	}
	if _, err := NewPsi(PsiOptions{Hidden: -1}); err == nil {
		t.Fatal("a negative hidden width accepted")
	}
}

// taggedFrom pools libraries' people under hashed tags (random keys).
func taggedFrom(t *testing.T, libs []*Library, classes int) *Tagged {
	t.Helper()
	d, _, _, err := pooled(libs, classes, rand.New(rand.NewPCG(9, 9)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBootstrapLearnsAndChangesPsi: bootstrapping lowers the loss and
// moves ψ away from the identity; with a noisy hashed-tag classifier over
// few classes the loss must fall.
func TestBootstrapLearnsAndChangesPsi(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	libs := []*Library{synthLibrary(rng, 10, 6, 0), synthLibrary(rng, 10, 6, 0)}
	data := taggedFrom(t, libs, 64)
	ψ, err := NewPsi(PsiOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	rep, err := Bootstrap(context.Background(), ψ, data, BootstrapOptions{Classes: 64, Epochs: 15, Batch: 16, LearningRate: 1e-2, Seed: 2,
		Progress: func(_ int, l float64) { losses = append(losses, l) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(losses) != 15 || !(losses[14] < 0.8*losses[0]) {
		t.Fatalf("loss did not fall: %v", losses)
	}
	if rep.Units != 20 || rep.Examples != 120 || rep.Epsilon != 0 {
		t.Fatalf("report %+v", rep)
	}
	y, err := ψ.Apply(libs[0].Descs[0])
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(y, libs[0].Descs[0]) {
		t.Fatal("ψ is still the identity after bootstrapping")
	}
}

// TestBootstrapRefusedByALedgerChangesNothing: under DP the whole
// training's event is charged first; a ledger that refuses stops it before
// a step, and ψ stays the identity.
func TestBootstrapRefusedByALedgerChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	libs := []*Library{synthLibrary(rng, 8, 4, 0), synthLibrary(rng, 8, 4, 0)}
	data := taggedFrom(t, libs, 32)
	ψ, err := NewPsi(PsiOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	before := ψ.Weights()
	led, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := led.SetBudget("user", dp.Budget{Epsilon: 1, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	charged := 0
	_, err = Bootstrap(context.Background(), ψ, data, BootstrapOptions{Classes: 32, Epochs: 2, Batch: 4, Seed: 2,
		DP: &BootstrapDP{Epsilon: 4, Delta: 1e-5, Source: dp.NewSeededSource([32]byte{1})},
		Charge: func(ev dp.Event) error {
			charged++
			_, err := led.Charge("user", ev)
			return err
		}})
	if !errors.Is(err, dp.ErrBudgetExceeded) || charged != 1 {
		t.Fatalf("training at ε = 4 on a budget of 1: %v (charged %d times), want the ledger's refusal", err, charged)
	}
	spent, err := led.Spent("user")
	if err != nil || spent.Epsilon != 0 {
		t.Fatalf("the refusing ledger spent %+v, %v", spent, err)
	}
	for n, v := range ψ.Weights() {
		if !slices.Equal(v, before[n]) {
			t.Fatalf("ψ's %s changed although the training was refused", n)
		}
	}
}

// TestBootstrapUnderDPReportsItsEpsilon: a DP run spends at most its
// target per unit and says so.
func TestBootstrapUnderDPReportsItsEpsilon(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	libs := []*Library{synthLibrary(rng, 10, 4, 0), synthLibrary(rng, 10, 4, 0)}
	data := taggedFrom(t, libs, 32)
	ψ, err := NewPsi(PsiOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Bootstrap(context.Background(), ψ, data, BootstrapOptions{Classes: 32, Epochs: 2, Batch: 5, Seed: 2,
		DP: &BootstrapDP{Epsilon: 3, Delta: 1e-5, Source: dp.NewSeededSource([32]byte{2})}})
	if err != nil {
		t.Fatal(err)
	}
	if !(rep.Epsilon > 0 && rep.Epsilon <= 3*(1+1e-3)) || !(rep.NoiseMultiplier > 0) || rep.Steps != 2*int(math.Ceil(20.0/5)) {
		t.Fatalf("DP report %+v: want 0 < ε ≤ 3, σ > 0 and 8 steps", rep)
	}
}

// TestPsiOnPublicFeatures: ψ as a head on public features maps the
// input size to Out, unit length, has no library model file, and
// bootstrapping trains it (its loss falls).
func TestPsiOnPublicFeatures(t *testing.T) {
	for _, hidden := range []int{0, 16} {
		ψ, err := NewPsi(PsiOptions{Dim: 40, Out: 12, Hidden: hidden, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		if ψ.Residual() {
			t.Fatal("a 40 → 12 head reported residual")
		}
		rng := rand.New(rand.NewPCG(5, 6))
		x := make([]float32, 40)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		y, err := ψ.Apply(x)
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, v := range y {
			n += float64(v) * float64(v)
		}
		if len(y) != 12 || math.Abs(n-1) > 1e-5 {
			t.Fatalf("hidden %d: ψ(x) of %d values, squared norm %g", hidden, len(y), n)
		}
		if _, err := ψ.Model(); err == nil {
			t.Fatal("a head on public features exported as a library model")
		}
		if _, err := ψ.Apply(x[:39]); err == nil {
			t.Fatal("a 39-value input accepted")
		}
	}
	if _, err := NewPsi(PsiOptions{Dim: 4, Out: -1}); err == nil {
		t.Fatal("a negative output size accepted")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	libs := []*Library{synthLibrary(rng, 10, 6, 0), synthLibrary(rng, 10, 6, 0)}
	data := taggedFrom(t, libs, 64)
	ψ, err := NewPsi(PsiOptions{Out: 32, Hidden: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	if _, err := Bootstrap(context.Background(), ψ, data, BootstrapOptions{Classes: 64, Epochs: 15, Batch: 16, LearningRate: 1e-2, Seed: 2,
		Progress: func(_ int, l float64) { losses = append(losses, l) }}); err != nil {
		t.Fatal(err)
	}
	if len(losses) != 15 || !(losses[14] < 0.8*losses[0]) {
		t.Fatalf("the public head's loss did not fall: %v", losses)
	}
}
