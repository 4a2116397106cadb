package fedjoin

import (
	"fmt"

	"github.com/veil-privacy/veil/collab"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/record"
)

// ModelKind is the architecture name of ψ in a coordinator's checkpoint.
const ModelKind = "psi"

// InitialModel is the initial model of a federation of libraries, which
// the coordinator serves (veil fed coordinator --init): ψ(x) = x + r(x)
// on the descriptor at the identity (r's last layer zero), so a library
// that adopts it before any round suggests exactly as with plain
// descriptors. It has seen no data: it is marked public.
func InitialModel(o collab.PsiOptions) (*checkpoint.Checkpoint, error) {
	ψ, err := collab.NewPsi(o)
	if err != nil {
		return nil, err
	}
	o = ψ.Options()
	p := ψ.Params()
	st := record.State{}
	for i := 0; i < p.Len(); i++ {
		st.M = append(st.M, make([]float32, len(p.Values(i))))
	}
	h := checkpoint.Header{Model: arch.Config{Kind: ModelKind, In: o.Dim, Hidden: o.Hidden, Embedding: o.Dim}, Optimizer: "sgd",
		Seed: o.Seed, Public: true}
	return checkpoint.FromTrainer(h, p, st), nil
}

// psiFile converts the federation's weights into ψ's model file (package
// tagging/psimodel), which the library imports.
func (t *Trainer) psiFile(w wire.Weights) ([]byte, error) {
	ψ, err := t.psiOf(w)
	if err != nil {
		return nil, err
	}
	b, err := ψ.MarshalModel()
	if err != nil {
		return nil, fmt.Errorf("fedjoin: the federation's model: %w", err)
	}
	return b, nil
}
