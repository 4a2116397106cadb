package dphe

import (
	"math/big"
	mrand "math/rand/v2"
)

// checksumCoeffBytes is the size of a checksum coefficient α_j: 128 bits,
// so a forged aggregate passes the check with probability at most 2^-127
// (see the package documentation).
const checksumCoeffBytes = 16

// coefficients streams the round's checksum coefficients α_0, α_1, … from
// ChaCha8 keyed with the round's checksum key (C2SP chacha8rand, the same
// stream in every Go version), so users and the key generator derive the
// same values without sending D of them.
type coefficients struct {
	r   *mrand.ChaCha8
	buf [checksumCoeffBytes]byte
}

func newCoefficients(key [32]byte) *coefficients {
	return &coefficients{r: mrand.NewChaCha8(key)}
}

// next sets x to the next coefficient and returns it.
func (c *coefficients) next(x *big.Int) *big.Int {
	_, _ = c.r.Read(c.buf[:])
	return x.SetBytes(c.buf[:])
}

// skip advances past one coefficient.
func (c *coefficients) skip() { _, _ = c.r.Read(c.buf[:]) }
