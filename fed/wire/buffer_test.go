package wire

import (
	"errors"
	"math"
	"testing"
)

// TestDecoderReusesBuffer: a payload decoded into a reused buffer full of
// an earlier update's bytes is exactly the payload sent, the weights alias
// the buffer, and a payload cut short is refused rather than completed
// from the old contents.
func TestDecoderReusesBuffer(t *testing.T) {
	w := sample()
	n := 4 * w.Len()
	dirty := make([]byte, n, n+8)
	for i := range dirty {
		dirty[i] = 0xff // NaN bit patterns
	}
	got, err := roundTrip(w, 3, Limits{MaxBytes: 1 << 20, Layout: w, Buffer: dirty})
	if err != nil {
		t.Fatal(err)
	}
	for i := range w {
		for j := range w[i].Values {
			if math.Float32bits(w[i].Values[j]) != math.Float32bits(got[i].Values[j]) {
				t.Fatalf("value %d/%d is %v, sent %v", i, j, got[i].Values[j], w[i].Values[j])
			}
		}
	}
	if asFloat32(dirty) != nil && &got[0].Values[0] != &asFloat32(dirty)[0] {
		t.Error("the weights do not alias the buffer given")
	}
	for i := range dirty {
		dirty[i] = 0xff
	}
	d, err := NewDecoder(w.Header(), Limits{MaxBytes: 1 << 20, Layout: w, Buffer: dirty})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(w.Payload()[:n-4]); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Finish(); !errors.Is(err, ErrRefused) {
		t.Fatalf("a truncated payload in a full-sized buffer: %v, want a refusal", err)
	}
	// A buffer too small is not used.
	small := make([]byte, 0, n-1)
	got, err = roundTrip(w, 5, Limits{MaxBytes: 1 << 20, Buffer: small})
	if err != nil || got[1].Values[1] != -0.125 {
		t.Fatalf("with a small buffer: %v", err)
	}
}
