package masking

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"golang.org/x/crypto/chacha20"
	"golang.org/x/crypto/chacha20poly1305"
)

// Domain-separation labels: every derived key names its purpose, the
// protocol version, the round and the parties, so no key is ever used for
// two purposes, two rounds or two directions.
const (
	labelPair   = "veil/secagg/masking/v1 pairwise mask"
	labelShare  = "veil/secagg/masking/v1 share encryption"
	labelAdvert = "veil/secagg/masking/v1 key advertisement"
)

// newX25519Key draws an X25519 private key from 32 bytes of r (explicit
// randomness: the same stream gives the same key, in tests).
func newX25519Key(r io.Reader) (*ecdh.PrivateKey, error) {
	var b [32]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil, fmt.Errorf("reading randomness for a key: %w", err)
	}
	k, err := ecdh.X25519().NewPrivateKey(b[:])
	clear(b[:])
	if err != nil {
		return nil, fmt.Errorf("making an X25519 key: %w", err)
	}
	return k, nil
}

// pairSeed derives the pairwise mask seed of clients a and b from their
// X25519 shared secret: HKDF-SHA256(ECDH, salt = round, info = label ‖
// min(a,b) ‖ max(a,b)). Both sides derive the same seed.
func pairSeed(priv *ecdh.PrivateKey, peer *ecdh.PublicKey, round *[32]byte, a, b uint32) ([32]byte, error) {
	var seed [32]byte
	shared, err := priv.ECDH(peer)
	if err != nil {
		return seed, fmt.Errorf("X25519 agreement with client %d: %w", b, err)
	}
	lo, hi := min(a, b), max(a, b)
	info := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte(labelPair), lo), hi)
	k, err := hkdf.Key(sha256.New, shared, round[:], string(info), 32)
	clear(shared)
	if err != nil {
		return seed, fmt.Errorf("deriving the pairwise seed: %w", err)
	}
	copy(seed[:], k)
	clear(k)
	return seed, nil
}

// shareKey derives the AEAD key for shares sent from → to in a round. The
// direction is part of the derivation, so the two directions of a pair
// never share a key, and each key encrypts exactly one message (nonce 0).
func shareKey(priv *ecdh.PrivateKey, peer *ecdh.PublicKey, round *[32]byte, from, to uint32) ([]byte, error) {
	shared, err := priv.ECDH(peer)
	if err != nil {
		return nil, fmt.Errorf("X25519 agreement for shares %d→%d: %w", from, to, err)
	}
	info := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte(labelShare), from), to)
	k, err := hkdf.Key(sha256.New, shared, round[:], string(info), chacha20poly1305.KeySize)
	clear(shared)
	if err != nil {
		return nil, fmt.Errorf("deriving the share key: %w", err)
	}
	return k, nil
}

// shareAAD binds a share ciphertext to its round, sender and recipient.
func shareAAD(round *[32]byte, from, to uint32) []byte {
	b := append([]byte(labelShare), round[:]...)
	b = binary.BigEndian.AppendUint32(b, from)
	return binary.BigEndian.AppendUint32(b, to)
}

// prgBlock is the number of bytes of keystream expanded at a time.
const prgBlock = 16 << 10

// addMask adds sign·PRG(seed) to v element-wise modulo 2^32, where PRG is
// ChaCha20 keyed by seed with a zero nonce, read as little-endian uint32
// words. sign is +1 or −1. The seeds are uniformly random 32-byte keys
// used for one vector each, so the zero nonce never repeats under a key.
func addMask(v []uint32, seed *[32]byte, sign int) {
	var nonce [chacha20.NonceSize]byte
	c, err := chacha20.NewUnauthenticatedCipher(seed[:], nonce[:])
	if err != nil {
		panic(err) // unreachable: fixed key and nonce sizes
	}
	buf := make([]byte, prgBlock)
	for off := 0; off < len(v); off += prgBlock / 4 {
		n := min(prgBlock/4, len(v)-off)
		b := buf[:4*n]
		clear(b)
		c.XORKeyStream(b, b)
		w := v[off : off+n]
		if sign > 0 {
			for i := range w {
				w[i] += binary.LittleEndian.Uint32(b[4*i:])
			}
		} else {
			for i := range w {
				w[i] -= binary.LittleEndian.Uint32(b[4*i:])
			}
		}
	}
	clear(buf)
}
