package coord

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/internal/cputime"
)

// headLayout is a model of the federated embedding head's size (557,824
// values in six tensors), with small finite values.
func headLayout() wire.Weights {
	shapes := []struct {
		name  string
		shape []int
	}{{"fc1/w", []int{512, 512}}, {"fc1/b", []int{512}}, {"act1/alpha", []int{512}}, {"fc2/w", []int{512, 512}}, {"fc2/b", []int{512}}, {"head/centre", []int{250, 128}}}
	w := make(wire.Weights, len(shapes))
	for i, s := range shapes {
		n := 1
		for _, d := range s.shape {
			n *= d
		}
		v := make([]float32, n)
		for j := range v {
			v[j] = float32((j+i)%97-48) / 4096
		}
		w[i] = wire.Tensor{Name: s.name, Shape: s.shape, Values: v}
	}
	return w
}

// BenchmarkFoldRound measures the coordinator's loop over one round of 20
// updates of the head's size arriving together, as fedbench sends them
// (fedavg with DP metadata charged to each client's ledger): the batch
// that checks, charges and adds them, its transaction, which closes the
// round (aggregation, the next model encoded and stored), and the start
// of the next round. The updates are already decoded: receiving them is
// the server's (BenchmarkDecoderWrite in fed/wire).
func BenchmarkFoldRound(b *testing.B) {
	const clients = 20
	model := headLayout()
	if n := model.Len(); n != 557824 {
		b.Fatalf("the layout has %d values", n)
	}
	dpp := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1}
	meta := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1, SamplingRate: 0.05, Steps: 20}
	o := Options{StatePath: filepath.Join(b.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 1 << 30, Fraction: 1, MinAvailable: clients, MinUpdates: clients, RoundTimeout: time.Hour, MaxUpdateNorm: 1e9,
		Task: Task{LocalEpochs: 1, LearningRate: 0.01, Batch: 32, DP: dpp}}
	c, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	ids := make([]string, clients)
	for i := range ids {
		ids[i] = fmt.Sprintf("client-%02d", i)
		if _, err := c.enrol(ctx, ids[i], 1e9, 1e-5, "identity"); err != nil {
			b.Fatal(err)
		}
	}
	update := model.Clone()
	for i := range update {
		for j := range update[i].Values {
			update[i].Values[j] *= 1e-3
		}
	}
	ps := make([]*pending, clients)
	cpu0 := cputime.Process()
	for b.Loop() {
		if err := c.startRound(ctx, ids); err != nil {
			b.Fatal(err)
		}
		_, v := c.Model()
		n, _ := c.Round()
		for i, id := range ids {
			ps[i] = &pending{client: id, round: n, version: v, update: update, dp: meta, examples: 100, bytes: 4 * model.Len(), reply: make(chan result, 1)}
		}
		c.fold(ctx, ps)
		for i, p := range ps {
			if res := <-p.reply; res.err != nil {
				b.Fatalf("update %d: %v", i, res.err)
			}
		}
		if open, _ := c.Round(); open != 0 {
			b.Fatalf("round %d is still open after its last update", open)
		}
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}
