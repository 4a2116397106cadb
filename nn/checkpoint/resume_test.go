package checkpoint

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

type toyData struct {
	x []float32
	l []int32
}

func (d toyData) Len() int { return len(d.l) }
func (d toyData) Batch(idx []int, _ *rand.Rand) ([]float32, []int32, error) {
	var x []float32
	var l []int32
	for _, i := range idx {
		x = append(x, d.x[i*8:(i+1)*8]...)
		l = append(l, d.l[i])
	}
	return x, l, nil
}

func newToy(t *testing.T) (*train.Trainer, arch.Config, loss.Config) {
	mc := arch.Config{Kind: "head", In: 8, Hidden: 8, Embedding: 4}
	m, err := arch.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	lc := loss.Config{Kind: "cosface", Classes: 3}.Defaults()
	h, err := loss.New(m.Params(), lc, 4)
	if err != nil {
		t.Fatal(err)
	}
	m.Params().Init(4)
	tr, err := train.New(m, h, train.Options{Optimizer: "adam", LearningRate: 0.01, MicroBatch: 8, Seed: 3, EMA: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	return tr, m.Config(), lc
}

func TestResumeContinuesExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	d := toyData{}
	for i := 0; i < 24; i++ {
		d.l = append(d.l, int32(i%3))
		for j := 0; j < 8; j++ {
			d.x = append(d.x, float32(r.NormFloat64()))
		}
	}
	run := func(tr *train.Trainer, from, to int) {
		for ep := from; ep < to; ep++ {
			if _, err := tr.Epoch(d, train.EpochOptions{Epoch: ep, Batch: 8, Seed: 9}); err != nil {
				t.Fatal(err)
			}
		}
	}
	straight, _, _ := newToy(t)
	run(straight, 0, 3)

	first, mc, lc := newToy(t)
	run(first, 0, 1)
	var buf bytes.Buffer
	if err := FromTrainer(Header{Model: mc, Loss: lc, Optimizer: "adam", Epoch: 1}, first.Params(), first.State()).Write(&buf); err != nil {
		t.Fatal(err)
	}
	ck, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	resumed, _, _ := newToy(t)
	if err := ck.Apply(mc, resumed.Params()); err != nil {
		t.Fatal(err)
	}
	if err := resumed.Restore(ck.State); err != nil {
		t.Fatal(err)
	}
	run(resumed, ck.Header.Epoch, 3)
	for i := 0; i < straight.Params().Len(); i++ {
		if !slices.Equal(straight.Params().Values(i), resumed.Params().Values(i)) {
			t.Fatalf("parameter %q differs between a straight run and a resumed one", straight.Params().Spec(i).Name)
		}
		if !slices.Equal(straight.EMAValues(i), resumed.EMAValues(i)) {
			t.Fatalf("moving average of %q differs between a straight run and a resumed one", straight.Params().Spec(i).Name)
		}
	}
	if straight.Steps() != resumed.Steps() {
		t.Errorf("steps %d vs %d", straight.Steps(), resumed.Steps())
	}
}
