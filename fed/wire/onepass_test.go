package wire

import (
	"errors"
	"github.com/veil-privacy/veil/internal/cputime"
	"math"
	"testing"
)

// onePass decodes w's payload, optionally altered by corrupt after the
// header is made, in chunks of chunk bytes into buf, and returns the
// decoder's sum of squares and Finish's error.
func onePass(t *testing.T, w Weights, chunk int, buf []byte, corrupt func([]byte)) (float64, error) {
	t.Helper()
	d, err := NewDecoder(w.Header(), Limits{MaxBytes: 1 << 24, Layout: w, Buffer: buf})
	if err != nil {
		t.Fatal(err)
	}
	p := w.Payload()
	if corrupt != nil {
		corrupt(p)
	}
	for len(p) > 0 {
		n := min(chunk, len(p))
		if err := d.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	_, err = d.Finish()
	return d.SumSquares(), err
}

// ramp returns one tensor of n values v_i = (i mod 7) − 3 (Σ v² known).
func ramp(n int) Weights {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%7 - 3)
	}
	return Weights{{Name: "w", Shape: []int{n}, Values: v}}
}

// TestOnePassChecks: the decoder's one pass gives the squared norm of the
// whole update for any cut into chunks (values split between chunks, the
// last value in a chunk of its own, blocks larger than Write's pass), is
// non-finite exactly when one value is (wherever it sits, including the
// very last value and a value cut in two), ignores the old contents of a
// reused buffer, and a payload changed after its header was made is
// refused by the SHA-256.
func TestOnePassChecks(t *testing.T) {
	const n = 3*passBlock/4 + 5 // three passes and a bit
	want := 0.0
	for i := range n {
		x := float64(i%7 - 3)
		want += x * x
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name   string
		at     int // value set to bad; -1: none
		bad    float32
		chunks []int
	}{
		{"finite", -1, 0, []int{1, 3, 4, 5, 4093, passBlock, passBlock + 1, 4 * n}},
		{"NaN first", 0, nan, []int{1, 4, passBlock}},
		{"NaN last", n - 1, nan, []int{1, 2, 3, 4, 6, passBlock - 1, 4 * n}},
		{"+Inf at a pass boundary", passBlock / 4, inf, []int{3, passBlock, 4 * n}},
		{"-Inf in the middle", n / 2, -inf, []int{5, 4096}},
		{"largest finite", n - 1, math.MaxFloat32, []int{3, 4 * n}},
	}
	for _, tc := range tests {
		for _, chunk := range tc.chunks {
			w := ramp(n)
			expect := want
			if tc.at >= 0 {
				x := float64(w[0].Values[tc.at])
				w[0].Values[tc.at] = tc.bad
				expect += float64(tc.bad)*float64(tc.bad) - x*x
			}
			dirty := make([]byte, 4*n)
			for i := range dirty {
				dirty[i] = 0xff // NaN bit patterns
			}
			got, err := onePass(t, w, chunk, dirty, nil)
			if err != nil {
				t.Fatalf("%s, chunks of %d: %v", tc.name, chunk, err)
			}
			finite := !math.IsNaN(got) && !math.IsInf(got, 0)
			if wantFinite := w.CheckFinite() == nil; finite != wantFinite {
				t.Fatalf("%s, chunks of %d: sum of squares %g, finite values %v", tc.name, chunk, got, wantFinite)
			}
			if finite && math.Abs(got-expect) > 1e-12*expect {
				t.Fatalf("%s, chunks of %d: sum of squares %g, want %g", tc.name, chunk, got, expect)
			}
		}
	}
	for _, at := range []int{0, 4*n/2 + 1, 4*n - 1} {
		_, err := onePass(t, ramp(n), 4093, nil, func(p []byte) { p[at] ^= 0x40 })
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("a payload changed at byte %d after its header was made: %v", at, err)
		}
	}
}

// TestOnePassRefusesOverlongWrites: a chunk running past the declared
// length is refused, and nothing of it is hashed or squared.
func TestOnePassRefusesOverlongWrites(t *testing.T) {
	w := sample()
	d, err := NewDecoder(w.Header(), Limits{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p := w.Payload()
	if err := d.Write(p[:len(p)-2]); err != nil {
		t.Fatal(err)
	}
	before := d.SumSquares()
	nan := []byte{0, 0, 0xc0, 0x7f, 0, 0} // 2 bytes to finish, then a NaN
	if err := d.Write(nan); !errors.Is(err, ErrRefused) {
		t.Fatalf("an overlong chunk: %v", err)
	}
	if d.SumSquares() != before || d.Received() != uint64(len(p)-2) {
		t.Fatalf("a refused chunk changed the sum of squares (%g → %g) or the count (%d)", before, d.SumSquares(), d.Received())
	}
	if err := d.Write(p[len(p)-2:]); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if got, want := d.SumSquares(), w.Norm()*w.Norm(); math.Abs(got-want) > 1e-12*want {
		t.Fatalf("sum of squares %g, want %g", got, want)
	}
}

// BenchmarkDecoderWrite measures the decoder's pass (copy, SHA-256, sum of
// squares) over an update of the federated head's size in 16 KiB pieces,
// as HTTP/2 frames deliver it.
func BenchmarkDecoderWrite(b *testing.B) {
	w := ramp(557824)
	h, p := w.Header(), w.Payload()
	buf := make([]byte, len(p))
	b.SetBytes(int64(len(p)))
	cpu0 := cputime.Process()
	for b.Loop() {
		d, err := NewDecoder(h, Limits{MaxBytes: uint64(len(p)), Layout: w, Buffer: buf})
		if err != nil {
			b.Fatal(err)
		}
		for q := p; len(q) > 0; {
			n := min(16<<10, len(q))
			if err := d.Write(q[:n]); err != nil {
				b.Fatal(err)
			}
			q = q[n:]
		}
		if _, err := d.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}
