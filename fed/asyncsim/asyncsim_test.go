package asyncsim

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/collab"
	"github.com/veil-privacy/veil/fed/strategy"
)

// TestMLPGradient compares the simulated model's gradient with central
// finite differences.
func TestMLPGradient(t *testing.T) {
	m := mlp{in: 5, hidden: 4, classes: 3}
	rng := rand.New(rand.NewPCG(1, 2))
	w := m.init(rng)
	for i := range w[1].Values {
		w[1].Values[i] = 0.3 // keep the hidden units active
	}
	xs := [][]float32{{1, -0.5, 0.3, 0.2, -1}, {0.1, 0.7, -0.2, 0.9, 0.4}}
	ys := []int32{2, 0}
	g, _ := m.gradient(w, xs, ys, nil)
	for ti := range w {
		for j := range w[ti].Values {
			orig := w[ti].Values[j]
			const h = 1e-3
			w[ti].Values[j] = orig + h
			_, lp := m.gradient(w, xs, ys, nil)
			w[ti].Values[j] = orig - h
			_, lm := m.gradient(w, xs, ys, nil)
			w[ti].Values[j] = orig
			num := (lp - lm) / (2 * h)
			if math.Abs(num-float64(g[ti].Values[j])) > 2e-3 {
				t.Fatalf("%s[%d]: gradient %g, finite difference %g", w[ti].Name, j, g[ti].Values[j], num)
			}
		}
	}
}

// TestOverlayKeepsOwnValuesForDroppedUnits: the client's view of a
// thinned centre holds the centre's kept values and its own elsewhere, so
// its elastic difference is zero on the dropped units; with nothing
// dropped the view is the centre.
func TestOverlayKeepsOwnValuesForDroppedUnits(t *testing.T) {
	m := mlp{in: 3, hidden: 6, classes: 2}
	centre, own := m.init(rand.New(rand.NewPCG(1, 1))), m.init(rand.New(rand.NewPCG(2, 2)))
	for _, drop := range []float64{0, 0.5} {
		th, err := strategy.Thin(centre, strategy.ThinOptions{Drop: drop, Layers: thinLayers}, rand.New(rand.NewPCG(3, 3)))
		if err != nil {
			t.Fatal(err)
		}
		view, err := overlay(th, own)
		if err != nil {
			t.Fatal(err)
		}
		kept := map[int]bool{}
		for _, u := range th.Kept[0] {
			kept[u] = true
		}
		for ti, tn := range view {
			for j, v := range tn.Values {
				unit := -1
				switch tn.Name {
				case mlpW1:
					unit = j % m.hidden
				case mlpB1:
					unit = j
				case mlpW2:
					unit = j / m.classes
				}
				want := centre[ti].Values[j]
				if unit >= 0 && !kept[unit] {
					want = own[ti].Values[j]
				}
				if v != want {
					t.Fatalf("p = %g: %s[%d] (unit %d, kept %v) = %g, want %g", drop, tn.Name, j, unit, kept[unit], v, want)
				}
			}
		}
		if drop == 0 && th.KeptShare() != 1 {
			t.Fatalf("nothing dropped but kept share %g", th.KeptShare())
		}
	}
}

// TestAsyncAccounting runs the Fig. 10 simulation on tiny synthetic data
// and checks its accounting against what each strategy must send: EASGD
// without dropout two full models per exchange, with dropout less;
// FedAvg one model and one update per client per round, every round
// waiting for the slow client; the slow client's share of the updates.
func TestAsyncAccounting(t *testing.T) {
	split := synthSplit(11, 30, 8, 5)
	o := Options{Users: 4, Classes: 32, Hidden: 8, Periods: []int{4}, Drops: []float64{0.5}, DropPeriod: 4,
		LocalSteps: 4, BufferSize: 2, Duration: 200, EvalEvery: 20, Seed: 5}
	rep, err := Simulate(context.Background(), split, o)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]Run{}
	for _, r := range rep.Runs {
		runs[r.Name] = r
		if len(r.Curve) != 11 || r.Curve[0].Time != 0 || r.Final.Time != 200 {
			t.Fatalf("%s: %d points, final at %g (want 11, 0…200)", r.Name, len(r.Curve), r.Final.Time)
		}
		for i := 1; i < len(r.Curve); i++ {
			if r.Curve[i].Bytes < r.Curve[i-1].Bytes {
				t.Fatalf("%s: bytes went down", r.Name)
			}
		}
	}
	full := int64(rep.Runs[0].ModelBytes)
	want := wireBytes(mlp{in: 128, hidden: 8, classes: 32}.zero())
	if full != want || rep.Parameters != 128*8+8+8*32+32 {
		t.Fatalf("model bytes %d, want %d; parameters %d", full, want, rep.Parameters)
	}
	e := runs["easgd_l4"]
	// Exchanges before the last sample (time 200): fast clients exchange
	// at steps 0, 4, 8, … of their own clock; the slow one every 4·5.
	if e.Final.Bytes != int64(e.Exchanges)*2*full {
		t.Fatalf("EASGD without dropout: %d bytes for %d exchanges of %d-byte models", e.Final.Bytes, e.Exchanges, full)
	}
	if want := 3*50 + 10; e.Exchanges != want || e.SlowUpdates != 10 {
		t.Fatalf("EASGD λ = 4 over 200 units: %d exchanges (%d slow), want %d (10 slow)", e.Exchanges, e.SlowUpdates, want)
	}
	d := runs["easgd_l4_p0.5"]
	if d.Exchanges != e.Exchanges || !(d.Final.Bytes < e.Final.Bytes) || !(d.KeptShare < 1) {
		t.Fatalf("dropout 0.5: %d exchanges, %d bytes, kept %g; without: %d, %d", d.Exchanges, d.Final.Bytes, d.KeptShare, e.Exchanges, e.Final.Bytes)
	}
	f := runs["fedavg"]
	// A round lasts 4 steps of the slow client: 20 units, so 10 rounds
	// end by time 200 and the 11th starts at 200 (not counted).
	if f.Exchanges != 10*4 || f.SlowUpdates != 10 {
		t.Fatalf("FedAvg: %d updates (%d slow), want 40 (10)", f.Exchanges, f.SlowUpdates)
	}
	update := wireBytes(mlp{in: 128, hidden: 8, classes: 32}.zero())
	if f.Final.Bytes != int64(f.Exchanges)*(full+update) {
		t.Fatalf("FedAvg: %d bytes for %d updates", f.Final.Bytes, f.Exchanges)
	}
	b := runs["fedbuff"]
	if b.Exchanges+b.Refused == 0 || b.SlowUpdates == 0 || b.SlowUpdates*4 > b.Exchanges {
		t.Fatalf("FedBuff: %d accepted (%d slow), %d refused", b.Exchanges, b.SlowUpdates, b.Refused)
	}
	if !(rep.Target > 0) {
		t.Fatalf("target %g", rep.Target)
	}
}

// TestAsyncRefusesBadOptions names each bad option.
func TestAsyncRefusesBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Users: 1},
		{Slowdown: 0.5},
		{Drops: []float64{1}},
		{Periods: []int{0}},
		{Beta: 2},
		{LearningRate: -1},
		{Duration: 10, EvalEvery: 1e-5},
		{Target: 2},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := Simulate(context.Background(), &collab.Split{}, Options{}); err == nil {
		t.Error("an empty split accepted")
	}
}

// synthSplit is a split of people around random centres in 128
// dimensions: people with faces photos each, then strangers with one.
func synthSplit(seed uint64, people, faces, strangers int) *collab.Split {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := &collab.Split{}
	for p := range people + strangers {
		c := make([]float64, 128)
		for i := range c {
			c[i] = 0.09 * rng.NormFloat64()
		}
		n := faces
		if p >= people {
			n = 1
		}
		s.Stranger = append(s.Stranger, p >= people)
		for range n {
			d := make([]float32, 128)
			for i := range d {
				d[i] = float32(c[i] + 0.02*rng.NormFloat64())
			}
			s.Descs = append(s.Descs, d)
			s.Identity = append(s.Identity, p)
		}
	}
	return s
}

// TestThinnedGradientIsTheThinnedModels: the gradient a simulated client
// trains with after a thinned exchange is the gradient of the thinned
// model itself (the served tensors, a network of the kept units only),
// laid out on the full model by Thinned.Merge: zero for every dropped
// unit's parameters, so the client trains only the model it was served.
func TestThinnedGradientIsTheThinnedModels(t *testing.T) {
	m := mlp{in: 5, hidden: 8, classes: 3}
	w := m.init(rand.New(rand.NewPCG(4, 5)))
	for i := range w[1].Values {
		w[1].Values[i] = 0.3
	}
	xs := [][]float32{{1, -0.5, 0.3, 0.2, -1}, {0.1, 0.7, -0.2, 0.9, 0.4}, {-0.3, 0.2, 0.8, -0.6, 0.5}}
	ys := []int32{2, 0, 1}
	th, err := strategy.Thin(w, strategy.ThinOptions{Drop: 0.5, Layers: thinLayers}, rand.New(rand.NewPCG(6, 7)))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(th.Kept[0]); n == 0 || n == m.hidden {
		t.Fatalf("the draw keeps %d of %d units; the test needs some dropped and some kept", n, m.hidden)
	}
	small := mlp{in: m.in, hidden: len(th.Kept[0]), classes: m.classes}
	gs, ls := small.gradient(th.Model, xs, ys, nil)
	want, err := th.Merge(gs)
	if err != nil {
		t.Fatal(err)
	}
	got, lg := m.gradient(w, xs, ys, keptUnits(th.Kept[0], m.hidden))
	if math.Abs(ls-lg) > 1e-9 {
		t.Errorf("loss of the thinned model %g, of the masked full model %g", ls, lg)
	}
	for i := range want {
		for j, v := range want[i].Values {
			if math.Abs(float64(v-got[i].Values[j])) > 1e-6 {
				t.Fatalf("%s[%d]: masked gradient %g, thinned model's %g", want[i].Name, j, got[i].Values[j], v)
			}
		}
	}
	// Without the mask (the old simulation) dropped units get gradient.
	full, _ := m.gradient(w, xs, ys, nil)
	moved := false
	for i := range full {
		for j, v := range full[i].Values {
			moved = moved || math.Abs(float64(v-want[i].Values[j])) > 1e-6
		}
	}
	if !moved {
		t.Error("the whole model's gradient equals the thinned one's: the test cannot tell them apart")
	}
}
