package wire

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
)

func sample() Weights {
	return Weights{
		{Name: "dense/w", Shape: []int{3, 2}, Values: []float32{1, -2, 3.5, 0, 1e-30, -7}},
		{Name: "dense/b", Shape: []int{2}, Values: []float32{0.25, -0.125}},
	}
}

func roundTrip(w Weights, chunk int, lim Limits) (Weights, error) {
	d, err := NewDecoder(w.Header(), lim)
	if err != nil {
		return nil, err
	}
	if err := w.Chunks(chunk, d.Write); err != nil {
		return nil, err
	}
	return d.Finish()
}

func TestRoundTrip(t *testing.T) {
	w := sample()
	for _, chunk := range []int{1, 3, 4, 7, 1 << 20} {
		got, err := roundTrip(w, chunk, Limits{MaxBytes: 1 << 20, Layout: w})
		if err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		if err := w.SameLayout(got); err != nil {
			t.Fatal(err)
		}
		for i := range w {
			for j := range w[i].Values {
				if math.Float32bits(w[i].Values[j]) != math.Float32bits(got[i].Values[j]) {
					t.Fatalf("chunk %d: value %d/%d changed", chunk, i, j)
				}
			}
		}
	}
	// A model over 4 MiB streams in chunks.
	big := Weights{{Name: "w", Shape: []int{1 << 21}, Values: make([]float32, 1<<21)}}
	big[0].Values[12345] = 3
	got, err := roundTrip(big, 0, Limits{MaxBytes: 16 << 20})
	if err != nil || got[0].Values[12345] != 3 {
		t.Fatalf("8 MiB model: %v", err)
	}
}

// TestEncodeIsHeaderAndPayload: Encode gives exactly Header and Payload,
// and its payload decodes under its header.
func TestEncodeIsHeaderAndPayload(t *testing.T) {
	w := sample()
	h, p := w.Encode()
	if !proto.Equal(h, w.Header()) || string(p) != string(w.Payload()) {
		t.Fatalf("Encode gives header %v and %d bytes, Header and Payload %v and %d bytes", h, len(p), w.Header(), len(w.Payload()))
	}
	d, err := NewDecoder(h, Limits{MaxBytes: 1 << 20, Layout: w})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(p); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestVersionNamesContentAndLayout(t *testing.T) {
	a := sample()
	b := sample()
	if Version(a.Header()) != Version(b.Header()) {
		t.Fatal("same weights, different versions")
	}
	b[0].Values[0] = math.Nextafter32(1, 2)
	if Version(a.Header()) == Version(b.Header()) {
		t.Fatal("one ulp changed, same version")
	}
	c := sample()
	c[0].Shape = []int{2, 3}
	if Version(a.Header()) == Version(c.Header()) {
		t.Fatal("reshaped, same version")
	}
}

func TestRefusals(t *testing.T) {
	w := sample()
	lim := Limits{MaxBytes: 1 << 20, Layout: w}
	cases := []struct {
		name string
		edit func(h *fedpb.WeightsHeader)
	}{
		{"protocol version", func(h *fedpb.WeightsHeader) { h.ProtocolVersion = 9 }},
		{"no tensors", func(h *fedpb.WeightsHeader) { h.Tensors = nil }},
		{"short checksum", func(h *fedpb.WeightsHeader) { h.Sha256 = h.Sha256[:5] }},
		{"wrong name", func(h *fedpb.WeightsHeader) { h.Tensors[0].Name = "other" }},
		{"wrong shape", func(h *fedpb.WeightsHeader) { h.Tensors[0].Shape = []int64{2, 3} }},
		{"negative dim", func(h *fedpb.WeightsHeader) { h.Tensors[1].Shape = []int64{-2} }},
		{"byte count", func(h *fedpb.WeightsHeader) { h.TotalBytes += 4 }},
		{"duplicate", func(h *fedpb.WeightsHeader) { h.Tensors[1].Name = h.Tensors[0].Name }},
		{"empty name", func(h *fedpb.WeightsHeader) { h.Tensors[1].Name = "" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := w.Header()
			c.edit(h)
			if _, err := NewDecoder(h, lim); !errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, want a refusal", err)
			}
		})
	}
	// Oversized: refused from the header, before the payload.
	huge := &fedpb.WeightsHeader{ProtocolVersion: fedpb.ProtocolVersion, Sha256: make([]byte, 32),
		Tensors: []*fedpb.TensorSpec{{Name: "w", Shape: []int64{1 << 20, 1 << 20}}}, TotalBytes: 4 << 40}
	if _, err := NewDecoder(huge, Limits{MaxBytes: 1 << 20}); !errors.Is(err, ErrRefused) {
		t.Fatalf("oversized header: %v", err)
	}
	// Truncated, overlong and corrupted payloads.
	d, _ := NewDecoder(w.Header(), lim)
	p := w.Payload()
	_ = d.Write(p[:len(p)-4])
	if _, err := d.Finish(); !errors.Is(err, ErrRefused) {
		t.Fatalf("truncated: %v", err)
	}
	d, _ = NewDecoder(w.Header(), lim)
	if err := d.Write(append(append([]byte{}, p...), 0)); !errors.Is(err, ErrRefused) {
		t.Fatalf("overlong: %v", err)
	}
	d, _ = NewDecoder(w.Header(), lim)
	q := append([]byte{}, p...)
	q[5] ^= 1
	_ = d.Write(q)
	if _, err := d.Finish(); !errors.Is(err, ErrRefused) {
		t.Fatalf("corrupted: %v", err)
	}
}

func TestChecks(t *testing.T) {
	w := sample()
	if err := w.CheckFinite(); err != nil {
		t.Fatal(err)
	}
	w[1].Values[0] = float32(math.NaN())
	if err := w.CheckFinite(); err == nil {
		t.Fatal("NaN passed")
	}
	w[1].Values[0] = float32(math.Inf(-1))
	if err := w.CheckFinite(); err == nil {
		t.Fatal("-Inf passed")
	}
	if n := (Weights{{Name: "a", Shape: []int{2}, Values: []float32{3, 4}}}).Norm(); n != 5 {
		t.Fatalf("norm %g", n)
	}
	bad := sample()
	bad[0].Values = bad[0].Values[:5]
	if err := bad.Validate(); err == nil {
		t.Fatal("wrong value count passed")
	}
}

// FuzzDecode feeds arbitrary headers and payloads to the decoder: it must
// never panic, whatever it accepts must re-encode to the same bytes, and
// decoding into a reused buffer full of an earlier update's bytes
// (Limits.Buffer, as the coordinator does) must accept and refuse exactly
// what a fresh decoder does, with the same values.
func FuzzDecode(f *testing.F) {
	w := sample()
	hb, _ := proto.Marshal(w.Header())
	f.Add(hb, w.Payload(), 3)
	f.Add(hb, w.Payload()[:len(w.Payload())-4], 5)
	f.Add([]byte{}, []byte{1, 2, 3}, 1)
	f.Fuzz(func(t *testing.T, header, payload []byte, chunk int) {
		var h fedpb.WeightsHeader
		if proto.Unmarshal(header, &h) != nil {
			return
		}
		if chunk <= 0 || chunk > 1<<16 {
			chunk = 7
		}
		decode := func(buf []byte) (Weights, error) {
			d, err := NewDecoder(&h, Limits{MaxBytes: 1 << 16, Buffer: buf})
			if err != nil {
				return nil, err
			}
			for p := payload; len(p) > 0; {
				n := min(chunk, len(p))
				if err := d.Write(p[:n]); err != nil {
					return nil, err
				}
				p = p[n:]
			}
			// The one pass's sum of squares covers exactly the whole
			// values received, whatever the chunks and the buffer's old
			// contents.
			checkSquares(t, payload[:len(payload)&^3], d.SumSquares())
			return d.Finish()
		}
		got, err := decode(nil)
		dirty := make([]byte, 1<<16)
		for i := range dirty {
			dirty[i] = 0xff // NaN bit patterns
		}
		reused, rerr := decode(dirty)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("fresh decoder: %v; reused buffer: %v", err, rerr)
		}
		if err != nil {
			return
		}
		if string(reused.Payload()) != string(got.Payload()) {
			t.Fatal("decoding into a reused buffer gave other values")
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("accepted invalid weights: %v", err)
		}
		if string(got.Header().GetSha256()) != string(h.GetSha256()) {
			t.Fatal("accepted payload re-encodes differently")
		}
	})
}

// checkSquares fails unless got is Σ v² over the float32 values of p: NaN
// or infinite exactly when one of them is not finite, else within the
// rounding of another order of addition.
func checkSquares(t *testing.T, p []byte, got float64) {
	t.Helper()
	var want float64
	finite := true
	for i := 0; i+4 <= len(p); i += 4 {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(p[i:])))
		if math.IsNaN(x) || math.IsInf(x, 0) {
			finite = false
		}
		want += x * x
	}
	gotFinite := !math.IsNaN(got) && !math.IsInf(got, 0)
	if gotFinite != finite {
		t.Fatalf("sum of squares %g over values that are all finite: %v", got, finite)
	}
	if finite && math.Abs(got-want) > 1e-12*want {
		t.Fatalf("sum of squares %g, want %g", got, want)
	}
}
