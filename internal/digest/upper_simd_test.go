//go:build goexperiment.simd && amd64

package digest

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"testing"

	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/internal/vec"
)

// TestHashingClearsTheDirtyState: SHA-NI does not touch the upper halves,
// so whether they are in use after hashing shows whether the hashing
// cleared them first. crypto/sha256 (the control) leaves them dirty; New,
// Sum256, Reader and HMAC over New leave them clear.
func TestHashingClearsTheDirtyState(t *testing.T) {
	if _, known := vec.UpperInUse(); !known {
		t.Fatal("this processor cannot report the AVX upper state (no AVX or no XINUSE): the check cannot run here")
	}
	p := data(BlockSize + 100)
	for _, tc := range []struct {
		name  string
		hash  func()
		clean bool
	}{
		{"crypto/sha256 (control)", func() { sha256.Sum256(p) }, false},
		{"Sum256", func() { Sum256(p) }, true},
		{"Sum256 of one byte", func() { Sum256(p[:1]) }, true},
		{"New", func() { h := New(); h.Write(p); h.Sum(nil) }, true},
		{"HMAC over New", func() { m := hmac.New(New, []byte("k")); m.Write(p); m.Sum(nil) }, true},
	} {
		// Several tries: a goroutine switch between two steps could run
		// other code on the thread.
		matched := 0
		for range 5 {
			vec.DirtyUpper()
			if in, _ := vec.UpperInUse(); !in {
				continue
			}
			tc.hash()
			if in, _ := vec.UpperInUse(); in != tc.clean {
				matched++
			}
		}
		if matched == 0 {
			t.Errorf("%s: after the dirtying code, the upper state in use was never %v after hashing", tc.name, !tc.clean)
		}
	}
}

// hashCase is one way of hashing a benchmark compares.
type hashCase struct {
	name string
	hash func(p []byte)
}

// afterDirty runs each case on 256 KiB right after vec.DirtyUpper,
// reporting CPU time per hash (cpu-ns/op), readable on a loaded machine.
func afterDirty(b *testing.B, cases ...hashCase) {
	p := data(256 << 10)
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			cpu0 := cputime.Process()
			for b.Loop() {
				vec.DirtyUpper()
				bc.hash(p)
			}
			b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkSum256AfterDirtyUpper hashes 256 KiB right after code that
// leaves the AVX upper halves dirty, as an asynchronous preemption does
// on an AVX-512 processor under Go 1.26: crypto/sha256 (old) against this
// package's Sum256 (new), in the same run.
func BenchmarkSum256AfterDirtyUpper(b *testing.B) {
	afterDirty(b,
		hashCase{"crypto-sha256", func(p []byte) { sha256.Sum256(p) }},
		hashCase{"digest", func(p []byte) { Sum256(p) }})
}

// BenchmarkHMACAfterDirtyUpper is the same for HMAC-SHA256 of 256 KiB,
// over crypto/sha256.New (old) and New (new).
func BenchmarkHMACAfterDirtyUpper(b *testing.B) {
	mac := func(h func() hash.Hash) func([]byte) {
		return func(p []byte) { m := hmac.New(h, []byte("key")); m.Write(p); m.Sum(nil) }
	}
	afterDirty(b, hashCase{"crypto-sha256", mac(sha256.New)}, hashCase{"digest", mac(New)})
}

// BenchmarkSHA512AfterDirtyUpper hashes 256 KiB with crypto/sha512 right
// after the dirtying code, without and with vec.ClearUpper: Go computes
// SHA-512 with AVX2 (VEX-encoded) instructions on amd64, which do not
// stall on the dirty state.
func BenchmarkSHA512AfterDirtyUpper(b *testing.B) {
	afterDirty(b,
		hashCase{"dirty", func(p []byte) { sha512.Sum512(p) }},
		hashCase{"cleared", func(p []byte) { vec.ClearUpper(); sha512.Sum512(p) }})
}
