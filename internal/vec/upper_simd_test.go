//go:build goexperiment.simd && amd64

package vec

import (
	"crypto/sha256"
	"testing"
)

// TestClearUpperClearsTheDirtyState: after code that leaves the upper
// halves dirty (checked: XINUSE shows it), ClearUpper leaves them clear,
// so SHA-NI and AES-NI code after it runs at full speed.
func TestClearUpperClearsTheDirtyState(t *testing.T) {
	if _, known := avxStateInUse(); !known || !hasAVX {
		t.Fatal("this processor has no AVX or no XGETBV with ECX = 1 (XINUSE): the check cannot run here")
	}
	const upper = 1<<2 | 1<<6 // YMM and ZMM upper halves of registers 0–15
	sawDirty, cleared := 0, 0
	// Several tries: a goroutine switch between two steps could run
	// other code on the thread.
	for range 5 {
		DirtyUpper()
		if s, _ := avxStateInUse(); s&upper != 0 {
			sawDirty++
		}
		ClearUpper()
		if s, _ := avxStateInUse(); s&upper == 0 {
			cleared++
		}
	}
	if sawDirty == 0 {
		t.Fatal("the dirtying code never left the upper halves in use: the test shows nothing")
	}
	if cleared == 0 {
		t.Fatal("ClearUpper left the AVX registers' upper halves in use")
	}
}

// BenchmarkSHA256AfterDirtyUpper hashes 256 KiB (SHA-NI, SSE-encoded)
// right after code that leaves the AVX registers' upper halves dirty, as
// an asynchronous preemption does on an AVX-512 processor under Go 1.26,
// with and without ClearUpper in between.
func BenchmarkSHA256AfterDirtyUpper(b *testing.B) {
	p := make([]byte, 256<<10)
	for _, bc := range []struct {
		name  string
		clear bool
	}{{"dirty", false}, {"cleared", true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				DirtyUpper()
				if bc.clear {
					ClearUpper()
				}
				sha256.Sum256(p)
			}
		})
	}
}
