package masking

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
)

// Key advertisements are signed by the client's long-term key, the key of
// its mTLS certificate in the federation, so the coordinator, which relays
// them, cannot substitute its own X25519 keys (the man-in-the-middle that
// would let it unmask single clients). Ed25519 keys sign the message
// itself; ECDSA and RSA (PKCS #1 v1.5) keys sign its SHA-256 digest.

// KeyDirectory returns the long-term public key that authenticates a
// client's key advertisements. The federation implements it with the
// clients' verified mTLS certificates (see CertDirectory).
type KeyDirectory interface {
	PublicKey(id uint32) (crypto.PublicKey, error)
}

// StaticKeys is a KeyDirectory from a fixed map.
type StaticKeys map[uint32]crypto.PublicKey

// PublicKey returns id's key or an error naming the unknown client.
func (s StaticKeys) PublicKey(id uint32) (crypto.PublicKey, error) {
	k, ok := s[id]
	if !ok {
		return nil, fmt.Errorf("no public key known for client %d", id)
	}
	return k, nil
}

// CertDirectory is a KeyDirectory over X.509 client certificates, each
// verified against a root pool for client authentication when the
// directory is built.
type CertDirectory struct{ keys map[uint32]crypto.PublicKey }

// NewCertDirectory verifies each client's certificate chain (leaf first,
// then intermediates) against roots for client authentication and returns
// a directory of their public keys.
func NewCertDirectory(roots *x509.CertPool, chains map[uint32][]*x509.Certificate) (*CertDirectory, error) {
	if roots == nil {
		return nil, errors.New("masking: a certificate directory needs a root pool")
	}
	d := &CertDirectory{keys: make(map[uint32]crypto.PublicKey, len(chains))}
	for id, chain := range chains {
		if len(chain) == 0 {
			return nil, fmt.Errorf("masking: client %d has no certificate", id)
		}
		inter := x509.NewCertPool()
		for _, c := range chain[1:] {
			inter.AddCert(c)
		}
		if _, err := chain[0].Verify(x509.VerifyOptions{
			Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}); err != nil {
			return nil, fmt.Errorf("masking: client %d's certificate: %w", id, err)
		}
		d.keys[id] = chain[0].PublicKey
	}
	return d, nil
}

// PublicKey returns the key of id's verified certificate.
func (d *CertDirectory) PublicKey(id uint32) (crypto.PublicKey, error) {
	k, ok := d.keys[id]
	if !ok {
		return nil, fmt.Errorf("no verified certificate for client %d", id)
	}
	return k, nil
}

// signMessage signs msg with s (see the package comment on key types).
func signMessage(s crypto.Signer, r io.Reader, msg []byte) ([]byte, error) {
	switch s.Public().(type) {
	case ed25519.PublicKey:
		return s.Sign(r, msg, crypto.Hash(0))
	case *ecdsa.PublicKey, *rsa.PublicKey:
		d := sha256.Sum256(msg)
		return s.Sign(r, d[:], crypto.SHA256)
	default:
		return nil, fmt.Errorf("unsupported signing key type %T", s.Public())
	}
}

// verifyMessage checks sig on msg under pub.
func verifyMessage(pub crypto.PublicKey, msg, sig []byte) error {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if !ed25519.Verify(k, msg, sig) {
			return errors.New("bad Ed25519 signature")
		}
	case *ecdsa.PublicKey:
		d := sha256.Sum256(msg)
		if !ecdsa.VerifyASN1(k, d[:], sig) {
			return errors.New("bad ECDSA signature")
		}
	case *rsa.PublicKey:
		d := sha256.Sum256(msg)
		if err := rsa.VerifyPKCS1v15(k, crypto.SHA256, d[:], sig); err != nil {
			return fmt.Errorf("bad RSA signature: %w", err)
		}
	default:
		return fmt.Errorf("unsupported public key type %T", pub)
	}
	return nil
}
