package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/internal/cputime"
)

// referencePayload is the payload by the protocol's definition: every
// value's float32 bits, little-endian, tensor after tensor.
func referencePayload(w Weights) []byte {
	var out []byte
	for _, t := range w {
		for _, v := range t.Values {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	}
	return out
}

// oddWeights has tensors of odd lengths and values of every kind a float32
// holds (negative zero, subnormals, the largest, NaNs with payloads),
// spanning several hashing blocks.
func oddWeights(rng *rand.Rand) Weights {
	w := Weights{
		{Name: "a", Shape: []int{3}, Values: make([]float32, 3)},
		{Name: "b", Shape: []int{50001}, Values: make([]float32, 50001)},
		{Name: "c", Shape: []int{1}, Values: make([]float32, 1)},
		{Name: "d", Shape: []int{7, 4099}, Values: make([]float32, 7*4099)},
	}
	special := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.MaxFloat32, math.Float32frombits(0x7fc01234)}
	for _, t := range w {
		for j := range t.Values {
			t.Values[j] = math.Float32frombits(rng.Uint32())
			if j%97 == 0 {
				t.Values[j] = special[j%len(special)]
			}
		}
	}
	return w
}

// TestEncodingIsTheProtocolsBytes: Payload, Encode and Header (which take
// the values' memory as the bytes on a little-endian machine, and hash in
// blocks) give exactly the protocol's bytes and their SHA-256, for every
// bit pattern a value can hold.
func TestEncodingIsTheProtocolsBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3 {
		w := oddWeights(rng)
		want := referencePayload(w)
		sum := sha256.Sum256(want)
		if got := w.Payload(); string(got) != string(want) {
			t.Fatal("Payload differs from the values' little-endian bytes")
		}
		h, p := w.Encode()
		if string(p) != string(want) || string(h.GetSha256()) != string(sum[:]) {
			t.Fatal("Encode's payload or SHA-256 differs from the protocol's")
		}
		if got := w.Header().GetSha256(); string(got) != string(sum[:]) {
			t.Fatal("Header's SHA-256 differs from the payload's")
		}
	}
}

// TestCheckFiniteFindsEveryNonFiniteValue: CheckFinite refuses a NaN
// (of any payload) or an infinity wherever it is (first, last, inside a
// vector block or in a tail) and names its tensor; the largest finite
// values, everywhere at once, pass.
func TestCheckFiniteFindsEveryNonFiniteValue(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001)}
	for _, n := range []int{1, 15, 16, 17, 1000, 65537} {
		for _, pos := range []int{0, n / 2, n - 1} {
			for _, v := range bad {
				w := Weights{{Name: "ok", Shape: []int{4}, Values: []float32{1, 2, 3, 4}}, {Name: "x", Shape: []int{n}, Values: make([]float32, n)}}
				for j := range w[1].Values {
					w[1].Values[j] = math.MaxFloat32
				}
				if err := w.CheckFinite(); err != nil {
					t.Fatalf("%d largest finite values refused: %v", n, err)
				}
				w[1].Values[pos] = v
				err := w.CheckFinite()
				if err == nil || err.Error() != `wire: tensor "x" holds a non-finite value` {
					t.Fatalf("%v at %d of %d: %v", v, pos, n, err)
				}
			}
		}
	}
}

// BenchmarkEncode measures encoding the head's 557,824 values (payload
// and SHA-256) as a round's close does.
func BenchmarkEncode(b *testing.B) {
	w := ramp(557824)
	b.SetBytes(int64(4 * w.Len()))
	cpu0 := cputime.Process()
	for b.Loop() {
		w.Encode()
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkCheckFinite measures the finiteness check over the head's
// values.
func BenchmarkCheckFinite(b *testing.B) {
	w := ramp(557824)
	b.SetBytes(int64(4 * w.Len()))
	cpu0 := cputime.Process()
	for b.Loop() {
		if err := w.CheckFinite(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}
