package cli

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/collab"
	"github.com/veil-privacy/veil/fed/wire"
)

// TestCollabWireBytesMatchFedWire checks collab's wire sizes (collab may
// not import fed/...) against fed/wire's encoding of the same tensors: the
// header's protobuf size and the payload's length.
func TestCollabWireBytesMatchFedWire(t *testing.T) {
	size := func(w wire.Weights) int64 {
		h, p := w.Encode()
		return int64(proto.Size(h) + len(p))
	}
	for _, o := range []collab.PsiOptions{{Dim: 2}, {}, {Hidden: 64}, {Dim: 24, Out: 8}, {Dim: 2048, Hidden: 256, Out: 128}} {
		ψ, err := collab.NewPsi(o)
		if err != nil {
			t.Fatal(err)
		}
		p := ψ.Params()
		var w wire.Weights
		for i := range p.Len() {
			s := p.Spec(i)
			w = append(w, wire.Tensor{Name: s.Name, Shape: s.Shape, Values: p.Values(i)})
		}
		if got, want := collab.PsiWireBytes(ψ), size(w); got != want {
			t.Errorf("ψ %+v: collab counts %d bytes, fed/wire encodes %d", o, got, want)
		}
	}
	for _, d := range []int{1, 8, 128, 200} {
		w := wire.Weights{{Name: collab.V0Name, Shape: []int{d, d}, Values: make([]float32, d*d)}}
		if got, want := collab.V0WireBytes(d), size(w); got != want {
			t.Errorf("V₀ %d×%d: collab counts %d bytes, fed/wire encodes %d", d, d, got, want)
		}
	}
}
