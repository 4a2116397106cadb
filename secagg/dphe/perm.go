package dphe

import (
	"fmt"
	"io"
	mrand "math/rand/v2"
)

// newStream returns a ChaCha8 stream seeded with 32 bytes from random (a
// CSPRNG such as crypto/rand).
func newStream(random io.Reader) (*mrand.Rand, error) {
	var seed [32]byte
	if _, err := io.ReadFull(random, seed[:]); err != nil {
		return nil, fmt.Errorf("dphe: reading seed: %w", err)
	}
	r := mrand.New(mrand.NewChaCha8(seed))
	clear(seed[:])
	return r, nil
}

// randomPerm returns a uniformly random permutation of [0, d) as an index
// array: element k moves to position p[k].
func randomPerm(rng *mrand.Rand, d int) []uint32 {
	p := make([]uint32, d)
	for i := range p {
		p[i] = uint32(i)
	}
	rng.Shuffle(d, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

// invertPerm returns q with q[p[k]] = k, or an error if p is not a permutation.
func invertPerm(p []uint32) ([]uint32, error) {
	q := make([]uint32, len(p))
	seen := make([]bool, len(p))
	for k, v := range p {
		if int(v) >= len(p) || seen[v] {
			return nil, fmt.Errorf("dphe: index array is not a permutation of %d elements", len(p))
		}
		seen[v] = true
		q[v] = uint32(k)
	}
	return q, nil
}
