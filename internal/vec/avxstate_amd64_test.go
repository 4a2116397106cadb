package vec

import (
	"math/rand/v2"
	"testing"
)

// dirtyUpper is the XINUSE bits of state VZEROUPPER clears: the AVX
// registers' upper halves (bit 2) and AVX-512's (bits 6 and 7).
const dirtyUpper = 1<<2 | 1<<6 | 1<<7

// TestKernelsLeaveAVXUpperClear calls each kernel that uses AVX registers
// and checks, right after it returns, that the registers' upper halves
// are clear: a kernel that leaves them dirty slows the scalar code after
// it (fed/wire's own norm kernel, which did, made the update decoder's
// SHA-256 about 70 times slower: BenchmarkDecoderWrite, 124 ms of CPU per
// update instead of 1.8).
func TestKernelsLeaveAVXUpperClear(t *testing.T) {
	if _, known := avxStateInUse(); !known {
		t.Fatal("this processor has no XGETBV with ECX = 1 (XINUSE): the check cannot run here")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	a, b := randVec(rng, 1000), randVec(rng, 1000)
	a32, b32 := randVec32(rng, 1000), randVec32(rng, 1000)
	q := (*[128]float32)(randVec32(rng, 128))
	out := make([]float32, 7)
	c := make([]float64, 64*64)
	kernels := map[string]func(){
		"Dot":           func() { Dot(a, b) },
		"SqDist":        func() { SqDist(a, b) },
		"Axpy":          func() { Axpy(0.5, a, b) },
		"SqDist32":      func() { SqDist32(a32, b32) },
		"SqDistRows128": func() { SqDistRows128(q, a32, out) },
		"Dot32":         func() { Dot32(a32, b32) },
		"Dot32x4":       func() { Dot32x4(a32, b32, a32, b32, a32) },
		"AxpyWiden":     func() { AxpyWiden(0.5, a32, b) },
		"SqNormWiden":   func() { SqNormWiden(a32) },
		"gemmTile":      func() { gemmTile(c, a, b, 0, 0, 0, 8, 8, 64) },
	}
	for name, k := range kernels {
		// Several tries: a goroutine switch between the kernel and the
		// check could run other code on the thread; a kernel that leaves
		// the state dirty leaves it so every time.
		dirty := 0
		for range 5 {
			k()
			if s, _ := avxStateInUse(); s&dirtyUpper != 0 {
				dirty++
			}
		}
		if dirty == 5 {
			t.Errorf("%s returns with the AVX registers' upper halves in use (XINUSE): VZEROUPPER is missing", name)
		}
	}
}
