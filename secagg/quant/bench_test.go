package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/veil-privacy/veil/internal/cputime"
)

// BenchmarkEncode times one client's encoding of 557,824 values with
// noise σ = 20, padded to 2^20 (one Hadamard block) or to 573,440 (blocks
// of 2^14), and the coordinator's decoding.
//
//	go test -run XXX -bench 'Encode|Decode' -benchtime 3x ./secagg/quant/
func BenchmarkEncode(b *testing.B) {
	for _, block := range []int{0, 1 << 14} {
		b.Run(fmt.Sprintf("block=%d", block), func(b *testing.B) { benchEncode(b, block) })
	}
}

func benchEncode(b *testing.B, block int) {
	q, x := benchSetup(b, block)
	r := testRand(1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := cputime.Thread()
	b.ResetTimer()
	for range b.N {
		if _, err := q.Encode(x, r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cputime.Thread()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(q.Padded()), "values_sent")
}

func BenchmarkDecode(b *testing.B) {
	q, x := benchSetup(b, 0)
	e, err := q.Encode(x, testRand(1))
	if err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := cputime.Thread()
	b.ResetTimer()
	for range b.N {
		if _, err := q.Decode(e); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cputime.Thread()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func benchSetup(b *testing.B, block int) (*Quantizer, []float32) {
	cfg := Config{Dim: 557824, Block: block, ClipNorm: 1, Gamma: 1e-4, Beta: math.Exp(-0.5), Bits: 32, Noise: 20, Clients: 100, WrapProb: 1e-9}
	q, err := New(cfg, [32]byte{1})
	if err != nil {
		b.Fatal(err)
	}
	return q, randVec(rand.New(rand.NewPCG(1, 2)), cfg.Dim, 2)
}
