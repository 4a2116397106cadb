package collab

import (
	"fmt"

	"github.com/veil-privacy/veil/tagging/psimodel"
)

// Model returns ψ in the library's model-file format (package
// tagging/psimodel): the weights copied, layer by layer.
func (ψ *Psi) Model() (*psimodel.Model, error) {
	m := &psimodel.Model{Dim: ψ.o.Dim}
	for _, l := range ψ.names {
		wi, _ := ψ.params.Index(l[0])
		bi, _ := ψ.params.Index(l[1])
		b := append([]float32(nil), ψ.params.Values(bi)...)
		w := append([]float32(nil), ψ.params.Values(wi)...)
		if len(b) == 0 || len(w)%len(b) != 0 {
			return nil, fmt.Errorf("collab: ψ layer %q has %d weights for %d outputs", l[0], len(w), len(b))
		}
		m.Layers = append(m.Layers, psimodel.Layer{In: len(w) / len(b), Out: len(b), W: w, B: b})
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("collab: %w", err)
	}
	return m, nil
}

// MarshalModel is ψ's model file, which a library imports
// (tagging.Library.ImportModel).
func (ψ *Psi) MarshalModel() ([]byte, error) {
	m, err := ψ.Model()
	if err != nil {
		return nil, err
	}
	return m.MarshalBinary()
}
