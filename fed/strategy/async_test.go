package strategy

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/fed/wire"
)

// TestEASGDTwoClientsHandComputed runs Algorithm 1 for two clients that
// exchange in turn, against values worked out by hand (β = 0.5, λ = 2,
// η = 0.1, x̃ = (1, 2)).
func TestEASGDTwoClientsHandComputed(t *testing.T) {
	o := EASGDOptions{Beta: 0.5, Period: 2, LearningRate: 0.1}
	start := one(1, 2)
	centre, err := NewEASGDCentre(start)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewEASGDClient(o, start)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewEASGDClient(o, start)
	if err != nil {
		t.Fatal(err)
	}
	exchange := func(c *EASGDClient) {
		t.Helper()
		if !c.Due() {
			t.Fatalf("client at clock %d not due", c.Clock())
		}
		d, err := c.Elastic(centre.Centre())
		if err != nil {
			t.Fatal(err)
		}
		if err := centre.Apply(d); err != nil {
			t.Fatal(err)
		}
	}
	step := func(c *EASGDClient, g ...float32) {
		t.Helper()
		if err := c.Step(one(g...)); err != nil {
			t.Fatal(err)
		}
	}
	// Clock 0: both exchange (zero difference), then step.
	exchange(a)
	step(a, 1, 0) // x^A = (0.9, 2)
	exchange(b)
	step(b, 0, -2) // x^B = (1, 2.2)
	if a.Due() {
		t.Fatal("client due at clock 1 with λ = 2")
	}
	if err := a.Step(one(1, 0)); err != nil { // clock 1: x^A = (0.8, 2)
		t.Fatal(err)
	}
	step(b, 0, -2) // x^B = (1, 2.4)
	// A must exchange at clock 2 before stepping again.
	if err := a.Step(one(1, 0)); err == nil {
		t.Fatal("a client stepped past its period without exchanging")
	}
	exchange(a) // diff = 0.5·((0.8,2) − (1,2)) = (−0.1, 0)
	near(t, "x^A after its exchange", a.Params(), 0.9, 2)
	near(t, "x̃ after A", centre.Centre(), 0.9, 2)
	exchange(b) // diff = 0.5·((1,2.4) − (0.9,2)) = (0.05, 0.2)
	near(t, "x^B after its exchange", b.Params(), 0.95, 2.2)
	near(t, "x̃ after B", centre.Centre(), 0.95, 2.2)
	if centre.Exchanges() != 4 {
		t.Fatalf("%d exchanges, want 4", centre.Exchanges())
	}
}

func TestEASGDRefusesBadInput(t *testing.T) {
	for _, o := range []EASGDOptions{
		{Beta: 0, Period: 1, LearningRate: 0.1},
		{Beta: 1.5, Period: 1, LearningRate: 0.1},
		{Beta: 0.5, Period: 0, LearningRate: 0.1},
		{Beta: 0.5, Period: 1, LearningRate: 0},
		{Beta: 0.5, Period: 1, LearningRate: math.Inf(1)},
	} {
		if _, err := NewEASGDClient(o, one(1)); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	c, err := NewEASGDCentre(one(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []wire.Weights{one(1), one(float32(math.NaN()), 0)} {
		if err := c.Apply(d); err == nil {
			t.Errorf("difference %v accepted", d)
		}
	}
	near(t, "centre after refusals", c.Centre(), 1, 2)
	if c.Exchanges() != 0 {
		t.Fatal("a refused difference was counted")
	}
}

func TestStalenessWeights(t *testing.T) {
	for _, c := range []struct {
		s    int
		a    float64
		want float64
	}{{0, 0.5, 1}, {3, 0.5, 0.5}, {8, 0.5, 1.0 / 3}, {1, 1, 0.5}, {5, 0, 1}} {
		if got := StalenessWeight(c.s, c.a); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("StalenessWeight(%d, %g) = %g, want %g", c.s, c.a, got, c.want)
		}
	}
}

// TestFedBuffStalenessWeightedBuffer fills a buffer of 2 with a fresh and
// a 3-versions-stale update and checks the move by hand: model +
// η·(1/K)·(1·Δ₁ + ½·Δ₂); an update past the limit is refused.
func TestFedBuffStalenessWeightedBuffer(t *testing.T) {
	f, err := NewFedBuff(FedBuffOptions{BufferSize: 2, MaxStaleness: 3, ServerLR: 1}, one(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	// Move the model three versions with fresh unit updates.
	for v := range 3 {
		for range 2 {
			if _, err := f.Add(one(1, 0), uint64(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if f.Version() != 3 {
		t.Fatalf("version %d, want 3", f.Version())
	}
	near(t, "model after three fresh buffers", f.Model(), 3, 0)
	if moved, err := f.Add(one(0, 2), 3); err != nil || moved {
		t.Fatalf("first of the buffer: moved %v, %v", moved, err)
	}
	moved, err := f.Add(one(0, 4), 0) // staleness 3: weight 1/√4 = ½
	if err != nil || !moved {
		t.Fatalf("second of the buffer: moved %v, %v", moved, err)
	}
	near(t, "model after the stale buffer", f.Model(), 3, 0.5*(2+0.5*4))
	before := f.Model()
	_, err = f.Add(one(9, 9), 0) // staleness 4 > 3
	if !errors.Is(err, ErrStale) {
		t.Fatalf("an update 4 versions old: %v, want ErrStale", err)
	}
	if _, err := f.Add(one(9, 9), 99); err == nil {
		t.Fatal("an update from a future version accepted")
	}
	if _, err := f.Add(one(float32(math.Inf(1)), 0), 4); err == nil {
		t.Fatal("an infinite update accepted")
	}
	if f.Buffered() != 0 {
		t.Fatalf("refused updates left %d in the buffer", f.Buffered())
	}
	near(t, "model after refusals", f.Model(), float64(before[0].Values[0]), float64(before[0].Values[1]))
}

func fcModel() wire.Weights {
	r := rand.New(rand.NewChaCha8([32]byte{7}))
	t := func(name string, shape ...int) wire.Tensor { return randTensor(r, name, shape...) }
	return wire.Weights{t("fc1/w", 4, 6), t("fc1/b", 6), t("fc2/w", 6, 3), t("fc2/b", 3), t("other", 2)}
}

var fcLayers = []FCLayer{{Weight: "fc1/w", Bias: "fc1/b", Next: "fc2/w"}}

func TestThinMergeAllKeptIsTheFullUpdate(t *testing.T) {
	model := fcModel()
	th, err := Thin(model, ThinOptions{Drop: 0, Layers: fcLayers}, rand.New(rand.NewChaCha8([32]byte{1})))
	if err != nil {
		t.Fatal(err)
	}
	if err := model.SameLayout(th.Model); err != nil {
		t.Fatalf("p = 0 thinned the model: %v", err)
	}
	update := fcModel() // any update of the full layout
	for i := range update {
		for j := range update[i].Values {
			update[i].Values[j] *= 0.25
		}
	}
	merged, err := th.Merge(update)
	if err != nil {
		t.Fatal(err)
	}
	for i := range update {
		for j, v := range update[i].Values {
			if merged[i].Values[j] != v {
				t.Fatalf("tensor %s value %d: merged %g, update %g", update[i].Name, j, merged[i].Values[j], v)
			}
		}
	}
	if th.KeptShare() != 1 {
		t.Fatalf("kept share %g with p = 0", th.KeptShare())
	}
}

func TestThinnedUpdateTouchesOnlyKeptUnits(t *testing.T) {
	model := fcModel()
	th, err := Thin(model, ThinOptions{Drop: 0.5, Layers: fcLayers}, rand.New(rand.NewChaCha8([32]byte{3})))
	if err != nil {
		t.Fatal(err)
	}
	kept := th.Kept[0]
	if len(kept) == 0 || len(kept) == 6 {
		t.Fatalf("seeded draw kept %v of 6 units: pick a seed that drops some", kept)
	}
	isKept := map[int]bool{}
	for _, u := range kept {
		isKept[u] = true
	}
	// The served model holds exactly the kept units' parameters.
	for i, want := range [][]int{{4, len(kept)}, {len(kept)}, {len(kept), 3}, {3}, {2}} {
		got := th.Model[i].Shape
		if len(got) != len(want) || got[0] != want[0] || (len(want) == 2 && got[1] != want[1]) {
			t.Fatalf("thinned %s has shape %v, want %v", th.Model[i].Name, got, want)
		}
	}
	if got := th.Model[0].Values[1*len(kept)+0]; got != model[0].Values[1*6+kept[0]] {
		t.Fatalf("thinned fc1/w[1][0] = %g, want the model's fc1/w[1][%d]", got, kept[0])
	}
	// A client's update of all ones merges into ones on kept units' parameters only.
	up := th.Model.Clone()
	for i := range up {
		for j := range up[i].Values {
			up[i].Values[j] = 1
		}
	}
	merged, err := th.Merge(up)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, v float32, unit int) {
		t.Helper()
		if want := float32(0); isKept[unit] {
			want = 1
			if v != want {
				t.Fatalf("%s of kept unit %d = %g, want 1", name, unit, v)
			}
		} else if v != want {
			t.Fatalf("%s of dropped unit %d = %g, want 0", name, unit, v)
		}
	}
	for r := range 4 {
		for u := range 6 {
			check("fc1/w", merged[0].Values[r*6+u], u)
		}
	}
	for u := range 6 {
		check("fc1/b", merged[1].Values[u], u)
		for c := range 3 {
			check("fc2/w", merged[2].Values[u*3+c], u)
		}
	}
	for _, i := range []int{3, 4} {
		for _, v := range merged[i].Values {
			if v != 1 {
				t.Fatalf("unthinned tensor %s not fully updated", merged[i].Name)
			}
		}
	}
	if _, err := th.Merge(model); err == nil {
		t.Fatal("an update of the full layout merged into a thinned model")
	}
}

func TestThinIsSeededAndChecksLayers(t *testing.T) {
	model := fcModel()
	a, _ := Thin(model, ThinOptions{Drop: 0.4, Layers: fcLayers}, rand.New(rand.NewChaCha8([32]byte{9})))
	b, _ := Thin(model, ThinOptions{Drop: 0.4, Layers: fcLayers}, rand.New(rand.NewChaCha8([32]byte{9})))
	if len(a.Kept[0]) != len(b.Kept[0]) {
		t.Fatal("the same seed drew different units")
	}
	for i := range a.Kept[0] {
		if a.Kept[0][i] != b.Kept[0][i] {
			t.Fatal("the same seed drew different units")
		}
	}
	for _, c := range []struct {
		name string
		o    ThinOptions
	}{
		{"p = 1", ThinOptions{Drop: 1, Layers: fcLayers}},
		{"missing tensor", ThinOptions{Layers: []FCLayer{{Weight: "nope"}}}},
		{"bias of another size", ThinOptions{Layers: []FCLayer{{Weight: "fc1/w", Bias: "fc2/b"}}}},
		{"one axis twice", ThinOptions{Layers: []FCLayer{{Weight: "fc1/w"}, {Weight: "fc1/w"}}}},
		{"1-D weight", ThinOptions{Layers: []FCLayer{{Weight: "fc1/b"}}}},
	} {
		if _, err := Thin(model, c.o, rand.New(rand.NewChaCha8([32]byte{}))); err == nil {
			t.Errorf("%s accepted", c.name)
		}
	}
	if _, err := Thin(model, ThinOptions{Layers: fcLayers}, nil); err == nil {
		t.Error("thinning without a generator accepted")
	}
}
