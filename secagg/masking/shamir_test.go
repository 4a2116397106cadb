package masking

import (
	"io"
	"math/bits"
	"math/rand/v2"
	"testing"
)

func TestFieldArithmetic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		a, b := r.Uint64N(fieldP), r.Uint64N(fieldP)
		hi, lo := bits.Mul64(a, b)
		_, want := bits.Div64(hi, lo, fieldP)
		if got := fmul(a, b); got != want {
			t.Fatalf("%d·%d = %d, want %d", a, b, got, want)
		}
		if (a+b)%fieldP != fadd(a, b) || (a+fieldP-b)%fieldP != fsub(a, b) {
			t.Fatalf("add/sub wrong for %d, %d", a, b)
		}
		if a != 0 && fmul(a, finv(a)) != 1 {
			t.Fatalf("inverse of %d wrong", a)
		}
	}
	if fmul(fieldP-1, fieldP-1) != 1 {
		t.Fatal("(−1)² ≠ 1")
	}
}

// TestShamirEverySubset: every t-subset of 6 holders reconstructs; every
// larger subset reconstructs and checks consistency; t − 1 shares do not.
func TestShamirEverySubset(t *testing.T) {
	rng := testRand(7)
	holders := []uint32{0, 4, 9, 100, 4000000000, 17}
	for _, thr := range []int{2, 3, 4, 6} {
		var secret [secretSize]byte
		io.ReadFull(rng, secret[:])
		secret[31] = 0xff // the last, short chunk at its widest
		shares, err := shareSecret(&secret, holders, thr, rng)
		if err != nil {
			t.Fatal(err)
		}
		for mask := 1; mask < 1<<len(holders); mask++ {
			var ids []uint32
			for i, h := range holders {
				if mask>>i&1 == 1 {
					ids = append(ids, h)
				}
			}
			sortU32(ids)
			got, err := reconstruct(shares, ids, thr)
			if len(ids) < thr {
				if err == nil {
					t.Fatalf("t=%d: %d shares reconstructed", thr, len(ids))
				}
				continue
			}
			if err != nil || got != secret {
				t.Fatalf("t=%d, holders %v: %v (equal: %v)", thr, ids, err, got == secret)
			}
		}
	}
}

// TestShamirDetectsForgedShare: with more than t shares, a single changed
// share is detected; with exactly t it changes the secret, which is why
// the server checks reconstructed keys against their advertisements.
func TestShamirDetectsForgedShare(t *testing.T) {
	rng := testRand(8)
	var secret [secretSize]byte
	io.ReadFull(rng, secret[:])
	holders := []uint32{1, 2, 3, 4, 5}
	shares, _ := shareSecret(&secret, holders, 3, rng)
	bad := shares[3]
	bad[2] = fadd(bad[2], 1)
	shares[3] = bad
	if _, err := reconstruct(shares, holders, 3); err == nil {
		t.Fatal("a forged share among 5 went unnoticed")
	}
}

// TestShamirTMinusOneConsistentWithAnySecret: t − 1 shares plus a forged
// share reconstruct any secret the forger chooses, so t − 1 shares carry
// no information about the secret.
func TestShamirTMinusOneConsistentWithAnySecret(t *testing.T) {
	rng := testRand(9)
	var secret [secretSize]byte
	io.ReadFull(rng, secret[:])
	holders := []uint32{1, 2, 3, 4, 5}
	shares, _ := shareSecret(&secret, holders, 4, rng)
	known := map[uint32]fieldShare{1: shares[1], 3: shares[3], 5: shares[5]}
	for range 20 {
		var target [secretSize]byte
		io.ReadFull(rng, target[:])
		f, err := forgeShare(known, []uint32{1, 3, 5}, 2, target)
		if err != nil {
			t.Fatal(err)
		}
		m := map[uint32]fieldShare{1: shares[1], 2: f, 3: shares[3], 5: shares[5]}
		got, err := reconstruct(m, []uint32{1, 2, 3, 5}, 4)
		if err != nil || got != target {
			t.Fatalf("forged reconstruction: %v, equal %v", err, got == target)
		}
	}
}

func sortU32(v []uint32) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}
