package ops

import (
	"fmt"

	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// InitialHeadOptions configure InitialHead.
type InitialHeadOptions struct {
	// Features is what the head reads: "agegender" (the default; the 2,048
	// public age/gender features veil fed client trains on) or
	// "descriptor" (the face pipeline's 128-value descriptor).
	Features string
	// Seed seeds the initialisation.
	Seed uint64
}

// InitialHead returns a new federation's initial model: a checkpoint of
// the embedding head that veil fed client and veil fed sim train (the head
// on Features with the distillation loss's centre vector), initialised
// exactly as package training initialises a new run (the model's and the
// loss's parameters declared, then nn.Params.Init(Seed)), so a seed gives
// the initial model veil fed sim starts from with that seed. It has seen
// no data, so it is marked public (DP training may start from it without
// accounting for it); its optimiser moments are zero. The distillation
// loss's targets belong to each client's data and are not part of it.
func InitialHead(o InitialHeadOptions) (*checkpoint.Checkpoint, error) {
	mc := arch.Config{Kind: "head"}
	switch o.Features {
	case "", arch.HeadAgeGender:
		mc.Features = arch.HeadAgeGender
	case "descriptor":
	default:
		return nil, fmt.Errorf("features %q: want %s or descriptor", o.Features, arch.HeadAgeGender)
	}
	m, err := arch.New(mc)
	if err != nil {
		return nil, err
	}
	mc = m.Config()
	// loss.New declares the head's parameters for a set of targets; one
	// placeholder target declares them without any data.
	placeholder := make([]float32, mc.Embedding)
	placeholder[0] = 1
	lc := loss.Config{Kind: "distill", Classes: 1, Targets: [][]float32{placeholder}}.Defaults()
	if _, err := loss.New(m.Params(), lc, mc.Embedding); err != nil {
		return nil, err
	}
	m.Params().Init(o.Seed)
	st := train.State{}
	for i := 0; i < m.Params().Len(); i++ {
		st.M = append(st.M, make([]float32, len(m.Params().Values(i))))
	}
	h := checkpoint.Header{Model: mc, Loss: loss.Config{Kind: lc.Kind}, Optimizer: "sgd", Seed: o.Seed, Public: true}
	return checkpoint.FromTrainer(h, m.Params(), st), nil
}
