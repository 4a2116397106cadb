package train_test

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/gomlx/gomlx/core/graph"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/loss"
)

// seeded is a deterministic noise and sampling source (tests only).
func seeded(b byte) *dp.Source { return dp.NewSeededSource([32]byte{b, 0x7e, 0x57}) }

// memData is training data in memory that records the examples every
// Batch call asks for.
type memData struct {
	x        []float32
	l        []int32
	per      int
	requests [][]int
}

func (d *memData) Len() int { return len(d.l) }

func (d *memData) Batch(idx []int, _ *rand.Rand) ([]float32, []int32, error) {
	d.requests = append(d.requests, slices.Clone(idx))
	var x []float32
	var l []int32
	for _, i := range idx {
		if i < 0 || i >= len(d.l) {
			return nil, nil, fmt.Errorf("example %d of %d", i, len(d.l))
		}
		x = append(x, d.x[i*d.per:(i+1)*d.per]...)
		l = append(l, d.l[i])
	}
	return x, l, nil
}

// people is memData whose examples show people (train.Identified).
type people struct {
	*memData
	ids []int
	n   int
}

func (p people) Identity(i int) int { return p.ids[i] }
func (p people) Identities() int    { return p.n }

// denseModel is one dense layer with bias: the smallest train.Model.
type denseModel struct {
	p       *nn.Params
	d       *nn.Dense
	in, out int
}

func newDenseModel(in, out int) (*denseModel, error) {
	p := nn.NewParams()
	d, err := nn.NewDense(p, "d", in, out, true)
	if err != nil {
		return nil, err
	}
	p.Init(1)
	return &denseModel{p: p, d: d, in: in, out: out}, nil
}

func (m *denseModel) Params() *nn.Params                           { return m.p }
func (m *denseModel) Embed(s *nn.Scope, x *graph.Node) *graph.Node { return m.d.Apply(s, x) }
func (m *denseModel) InputDims() []int                             { return []int{m.in} }
func (m *denseModel) UsesBatchNorm() bool                          { return false }

// flatHead is a loss whose gradient is exactly zero (0 × the embedding's
// sum): a DP-SGD step on it moves the weights by the noise alone.
type flatHead struct{}

func (flatHead) Apply(_ *nn.Scope, emb *graph.Node, b loss.Batch) loss.Result {
	l := graph.MulScalar(graph.ReduceSum(emb, 1), 0)
	return loss.Result{Loss: graph.Mul(l, b.Mask), Weight: b.Mask}
}
func (flatHead) Logits(*nn.Scope, *graph.Node) *graph.Node { return nil }
func (flatHead) Coupled() bool                             { return false }
func (flatHead) AuxProb() float64                          { return 0 }
