package psimodel

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
)

func sample() *Model {
	m := &Model{Dim: 3, Layers: []Layer{
		{In: 3, Out: 2, W: []float32{1, -1, 0.5, 2, -0.25, 0}, B: []float32{0.1, -3}},
		{In: 2, Out: 3, W: []float32{1, 0, 2, 0, 1, -1}, B: []float32{0, 0.5, 0}},
	}}
	return m
}

// TestApplyByHand checks ψ(x) = x + W₂ᵀReLU(W₁ᵀx + b₁) + b₂ against values
// computed by hand.
func TestApplyByHand(t *testing.T) {
	// x = (1, 2, 3): h₁ = (1·1 + 2·0.5 − 0.25·3 + 0.1, −1·1 + 2·2 + 0 − 3) = (1.35, 0).
	// r = (1.35·1, 1.35·0 + 0.5, 1.35·2) = (1.35, 0.5, 2.7).
	y, err := sample().Apply([]float32{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{2.35, 2.5, 5.7}
	for i := range want {
		if math.Abs(float64(y[i]-want[i])) > 1e-6 {
			t.Fatalf("ψ(x) = %v, want %v", y, want)
		}
	}
	if _, err := sample().Apply([]float32{1, 2}); err == nil {
		t.Fatal("a descriptor of the wrong size was accepted")
	}
	id, err := Identity(3).Apply([]float32{1, 2, 3})
	if err != nil || !slices.Equal(id, []float32{1, 2, 3}) {
		t.Fatalf("identity gave %v, %v", id, err)
	}
}

func TestRoundTrip(t *testing.T) {
	b, err := sample().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := m.MarshalBinary()
	if !slices.Equal(b, b2) {
		t.Fatal("round trip changed the bytes")
	}
}

// reseal recomputes the trailer, as an adversary can.
func reseal(b []byte) []byte {
	body := b[:len(b)-sha256.Size]
	s := sha256.Sum256(body)
	return append(slices.Clone(body), s[:]...)
}

// TestParseRefusesAdversarialFiles: an attacker who recomputes the
// checksum still cannot get NaN, Inf, a wrong dimension or a size bomb
// past Parse; truncation is refused.
func TestParseRefusesAdversarialFiles(t *testing.T) {
	good, _ := sample().MarshalBinary()
	firstW := len(magic) + 1 + 8 + 16
	setF := func(v float32) []byte {
		b := slices.Clone(good)
		binary.LittleEndian.PutUint32(b[firstW:], math.Float32bits(v))
		return reseal(b)
	}
	setU := func(off int, v uint32) []byte {
		b := slices.Clone(good)
		binary.LittleEndian.PutUint32(b[off:], v)
		return reseal(b)
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"NaN weight", setF(float32(math.NaN()))},
		{"+Inf weight", setF(float32(math.Inf(1)))},
		{"-Inf weight", setF(float32(math.Inf(-1)))},
		{"truncated", good[:len(good)-5]},
		{"truncated and resealed", reseal(good[:len(good)-9])},
		{"empty", nil},
		{"bad magic", reseal(append([]byte("XPSI"), good[4:]...))},
		{"dimension bomb", setU(5, 1<<30)},
		{"zero layers", setU(9, 0)},
		{"three layers", setU(9, 3)},
		{"wrong chain", setU(13, 4)},
		{"flipped bit", func() []byte { b := slices.Clone(good); b[firstW] ^= 1; return b }()},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Parse(c.b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse = %v, want ErrMalformed", err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	good, _ := sample().MarshalBinary()
	f.Add(good)
	id, _ := Identity(4).MarshalBinary()
	f.Add(id)
	f.Add(good[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid model: %v", err)
		}
		b2, err := m.MarshalBinary()
		if err != nil || !slices.Equal(b, b2) {
			t.Fatalf("accepted bytes do not round-trip")
		}
	})
}
