package collab

import (
	"errors"
	"fmt"
	"slices"

	"github.com/veil-privacy/veil/tagging/psimodel"
)

// view is ψ as a psimodel.Model sharing ψ's weights (no copy).
func (ψ *Psi) view() *psimodel.Model {
	m := &psimodel.Model{Dim: ψ.o.Dim}
	for _, l := range ψ.names {
		wi, _ := ψ.params.Index(l[0])
		bi, _ := ψ.params.Index(l[1])
		w, b := ψ.params.Values(wi), ψ.params.Values(bi)
		m.Layers = append(m.Layers, psimodel.Layer{In: len(w) / max(len(b), 1), Out: len(b), W: w, B: b})
	}
	return m
}

// Model returns ψ in the library's model-file format (package
// tagging/psimodel): the weights copied, layer by layer.
func (ψ *Psi) Model() (*psimodel.Model, error) {
	if !ψ.Residual() {
		return nil, errors.New("collab: ψ on public features has no library model file (a library's ψ maps its 128-d descriptors)")
	}
	m := ψ.view()
	for i := range m.Layers {
		m.Layers[i].W = slices.Clone(m.Layers[i].W)
		m.Layers[i].B = slices.Clone(m.Layers[i].B)
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
