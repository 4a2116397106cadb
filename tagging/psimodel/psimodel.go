// Package psimodel is the file format of a shared model ψ (package collab's
// Psi) as a library stores and adopts it: ψ(x) = x + r(x), r one linear
// layer or two with a ReLU between, on descriptors of Dim values.
//
// Model files come from a federation, so Parse treats them as untrusted
// bytes: it checks the header, every size against fixed bounds, the exact
// length, a SHA-256 trailer over everything before it (a truncated or
// corrupted file is refused), and that every weight is finite. The package
// stands on the standard library alone, so the tagging library can apply
// ψ without linking the training engine.
package psimodel

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/internal/digest"
)

// Format constants.
const (
	magic = "VPSI"
	// Version is the format version this build writes and reads.
	Version = 1
	// MaxDim bounds the descriptor size and a hidden layer's width.
	MaxDim = 4096
	// MaxLayers is the most layers r may have.
	MaxLayers = 2
)

// ErrMalformed is wrapped by every error of Parse.
var ErrMalformed = errors.New("malformed ψ model file")

// Layer is one dense layer of r: y[o] = B[o] + Σᵢ x[i]·W[i·Out+o].
type Layer struct {
	In, Out int
	W, B    []float32
}

// Model is ψ(x) = x + r(x).
type Model struct {
	Dim    int
	Layers []Layer
}

// Validate checks the sizes chain from Dim back to Dim, within the bounds,
// and that every weight is finite.
func (m *Model) Validate() error {
	if m == nil {
		return errors.New("psimodel: no model")
	}
	if m.Dim < 1 || m.Dim > MaxDim {
		return fmt.Errorf("psimodel: dimension %d outside 1–%d", m.Dim, MaxDim)
	}
	if len(m.Layers) < 1 || len(m.Layers) > MaxLayers {
		return fmt.Errorf("psimodel: %d layers, want 1–%d", len(m.Layers), MaxLayers)
	}
	in := m.Dim
	for i, l := range m.Layers {
		if l.In != in || l.Out < 1 || l.Out > MaxDim {
			return fmt.Errorf("psimodel: layer %d is %d→%d, want input %d and output 1–%d", i, l.In, l.Out, in, MaxDim)
		}
		if len(l.W) != l.In*l.Out || len(l.B) != l.Out {
			return fmt.Errorf("psimodel: layer %d has %d weights and %d biases, want %d and %d", i, len(l.W), len(l.B), l.In*l.Out, l.Out)
		}
		for _, v := range [][]float32{l.W, l.B} {
			for _, x := range v {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					return fmt.Errorf("psimodel: layer %d has a non-finite weight", i)
				}
			}
		}
		in = l.Out
	}
	if in != m.Dim {
		return fmt.Errorf("psimodel: the last layer gives %d values, want %d", in, m.Dim)
	}
	return nil
}

// Identity returns ψ at the identity (one zero linear layer).
func Identity(dim int) *Model {
	return &Model{Dim: dim, Layers: []Layer{{In: dim, Out: dim, W: make([]float32, dim*dim), B: make([]float32, dim)}}}
}

// Apply computes ψ(x) with float64 sums. It fails when x has the wrong
// size or ψ(x) is not finite.
func (m *Model) Apply(x []float32) ([]float32, error) {
	if len(x) != m.Dim {
		return nil, fmt.Errorf("psimodel: ψ takes %d values, got %d", m.Dim, len(x))
	}
	h := x
	for li, l := range m.Layers {
		y := make([]float32, l.Out)
		for o := range l.Out {
			s := float64(l.B[o])
			for i, v := range h {
				s += float64(v) * float64(l.W[i*l.Out+o])
			}
			if li < len(m.Layers)-1 && s < 0 {
				s = 0 // ReLU
			}
			y[o] = float32(s)
		}
		h = y
	}
	res := make([]float32, len(x))
	for i := range x {
		res[i] = x[i] + h[i]
		if math.IsNaN(float64(res[i])) || math.IsInf(float64(res[i]), 0) {
			return nil, errors.New("psimodel: ψ(x) is not finite")
		}
	}
	return res, nil
}

// MarshalBinary encodes a valid model: "VPSI", version (1 byte), Dim and
// the number of layers (uint32 each), each layer's In and Out (uint32),
// then each layer's W and B (float32, little-endian), then SHA-256 of all
// the bytes before.
func (m *Model) MarshalBinary() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b := append([]byte(magic), Version)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Dim))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Layers)))
	for _, l := range m.Layers {
		b = binary.LittleEndian.AppendUint32(b, uint32(l.In))
		b = binary.LittleEndian.AppendUint32(b, uint32(l.Out))
	}
	for _, l := range m.Layers {
		for _, v := range [][]float32{l.W, l.B} {
			for _, x := range v {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
			}
		}
	}
	sum := digest.Sum256(b)
	return append(b, sum[:]...), nil
}

// Parse decodes MarshalBinary's bytes, refusing anything else with an
// error that wraps ErrMalformed and says what was wrong.
func Parse(b []byte) (*Model, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
	}
	const head = len(magic) + 1 + 8
	if len(b) < head+sha256.Size {
		return nil, bad("%d bytes is too short (truncated?)", len(b))
	}
	if string(b[:len(magic)]) != magic {
		return nil, bad("not a ψ model file (bad magic)")
	}
	if b[len(magic)] != Version {
		return nil, bad("format version %d, this build reads %d", b[len(magic)], Version)
	}
	body, trailer := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if sum := digest.Sum256(body); string(sum[:]) != string(trailer) {
		return nil, bad("checksum mismatch (truncated or corrupted)")
	}
	p := len(magic) + 1
	u32 := func() uint32 { v := binary.LittleEndian.Uint32(body[p:]); p += 4; return v }
	dim, n := u32(), u32()
	if dim < 1 || dim > MaxDim {
		return nil, bad("dimension %d outside 1–%d", dim, MaxDim)
	}
	if n < 1 || n > MaxLayers {
		return nil, bad("%d layers, want 1–%d", n, MaxLayers)
	}
	if len(body) < p+8*int(n) {
		return nil, bad("truncated layer sizes")
	}
	m := &Model{Dim: int(dim), Layers: make([]Layer, n)}
	want := p + 8*int(n)
	for i := range m.Layers {
		in, out := u32(), u32()
		if in < 1 || in > MaxDim || out < 1 || out > MaxDim {
			return nil, bad("layer %d is %d→%d, sizes must be 1–%d", i, in, out, MaxDim)
		}
		m.Layers[i].In, m.Layers[i].Out = int(in), int(out)
		want += 4 * (int(in)*int(out) + int(out))
	}
	if len(body) != want {
		return nil, bad("%d bytes of weights, the sizes need %d", len(body)-p, want-p)
	}
	f32 := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = math.Float32frombits(u32())
		}
		return v
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		l.W = f32(l.In * l.Out)
		l.B = f32(l.Out)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return m, nil
}
