//go:build goexperiment.simd && amd64

package digest

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"simd/archsimd"
	"testing"

	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/internal/vec"
)

// dirty leaves the AVX registers' upper halves in use, as a kernel
// without VZEROUPPER or an asynchronous preemption on an AVX-512
// processor does.
//
//go:noinline
func dirty(a, b []float64) {
	archsimd.LoadFloat64x4Slice(a).Add(archsimd.LoadFloat64x4Slice(b)).StoreSlice(b)
}

// TestHashingClearsTheDirtyState: SHA-NI does not touch the upper halves,
// so whether they are in use after hashing shows whether the hashing
// cleared them first. crypto/sha256 (the control) leaves them dirty; New,
// Sum256, Reader and HMAC over New leave them clear.
func TestHashingClearsTheDirtyState(t *testing.T) {
	if _, known := vec.UpperInUse(); !known {
		t.Fatal("this processor cannot report the AVX upper state (no AVX or no XINUSE): the check cannot run here")
	}
	p := data(BlockSize + 100)
	x, y := []float64{1, 2, 3, 4}, []float64{5, 6, 7, 8}
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
			dirty(x, y)
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

// BenchmarkSum256AfterDirtyUpper hashes 256 KiB right after code that
// leaves the AVX upper halves dirty, as an asynchronous preemption does
// on an AVX-512 processor under Go 1.26: crypto/sha256 (old) against this
// package's Sum256 (new), in the same run. It reports CPU time per hash
// (cpu-ns/op), readable on a loaded machine.
func BenchmarkSum256AfterDirtyUpper(b *testing.B) {
	p := data(256 << 10)
	x, y := []float64{1, 2, 3, 4}, []float64{5, 6, 7, 8}
	for _, bc := range []struct {
		name string
		sum  func([]byte) [32]byte
	}{{"crypto-sha256", sha256.Sum256}, {"digest", Sum256}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			cpu0 := cputime.Process()
			for b.Loop() {
				dirty(x, y)
				bc.sum(p)
			}
			b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkHMACAfterDirtyUpper is the same for HMAC-SHA256 of 256 KiB,
// over crypto/sha256.New (old) and New (new).
func BenchmarkHMACAfterDirtyUpper(b *testing.B) {
	p := data(256 << 10)
	x, y := []float64{1, 2, 3, 4}, []float64{5, 6, 7, 8}
	for _, bc := range []struct {
		name string
		h    func() hash.Hash
	}{{"crypto-sha256", sha256.New}, {"digest", New}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			cpu0 := cputime.Process()
			for b.Loop() {
				dirty(x, y)
				m := hmac.New(bc.h, []byte("key"))
				m.Write(p)
				m.Sum(nil)
			}
			b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkSHA512AfterDirtyUpper hashes 256 KiB with crypto/sha512 right
// after the dirtying code, with and without vec.ClearUpper: Go computes
// SHA-512 with AVX2 (VEX-encoded) instructions, which should not stall.
func BenchmarkSHA512AfterDirtyUpper(b *testing.B) {
	p := data(256 << 10)
	x, y := []float64{1, 2, 3, 4}, []float64{5, 6, 7, 8}
	for _, bc := range []struct {
		name  string
		clear bool
	}{{"dirty", false}, {"cleared", true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			cpu0 := cputime.Process()
			for b.Loop() {
				dirty(x, y)
				if bc.clear {
					vec.ClearUpper()
				}
				sha512.Sum512(p)
			}
			b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
