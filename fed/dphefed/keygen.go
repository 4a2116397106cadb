// Package dphefed runs DPHE (secagg/dphe) in a federation: a client's half
// (Contribute: fetch the round's keys from the key generator, release the
// update with the client's own DP noise and selection, encrypt) and the
// coordinator's half (Round: set up the round at the key generator,
// multiply the clients' ciphertexts without decrypting anything, send the
// product to the key generator and receive the sum), both over the key
// generator's gRPC service (fed/keygen) with mutual TLS.
//
// The coordinator's half never holds a plaintext individual update: it
// receives ciphertexts and doubly-permuted positions, multiplies them,
// and receives only the sum of at least three clients' noisy
// contributions. The transport between clients and coordinator is the
// caller's (the coordinator's rounds); this package is the library both
// sides call.
package dphefed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/big"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/fed/keygenpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// DialOptions configures a connection to the key generator.
type DialOptions struct {
	// Addr is the key generator's host:port (required).
	Addr string
	// Identity is the caller's certificate (required).
	Identity *pki.Identity
	// Name is the key generator's certificate name (required): the
	// connection is refused unless the server presents a certificate of
	// the authority with this name, so the coordinator, whose certificate
	// the same authority signed, cannot pose as the key generator.
	Name string
	// ServerName is the host name checked in the key generator's
	// certificate (default: the host of Addr).
	ServerName string
	// MaxMessageBytes bounds replies (0: 64 MiB).
	MaxMessageBytes int
	// AllowInsecureTestKeySize accepts the key generator's keys below 2048
	// bits (tests only).
	AllowInsecureTestKeySize bool
}

// KeyGen is a connection to the key generator.
type KeyGen struct {
	conn     *grpc.ClientConn
	c        keygenpb.KeyGeneratorClient
	insecure bool
}

// Dial connects to the key generator (the connection is made lazily by gRPC).
func Dial(o DialOptions) (*KeyGen, error) {
	if o.Addr == "" || o.Identity == nil {
		return nil, errors.New("dphefed: dialing the key generator needs its address and the caller's certificate")
	}
	if err := pki.CheckName(o.Name); err != nil {
		return nil, fmt.Errorf("dphefed: the key generator's certificate name: %w", err)
	}
	host := o.ServerName
	if host == "" {
		h, _, err := net.SplitHostPort(o.Addr)
		if err != nil {
			return nil, fmt.Errorf("dphefed: the key generator's address: %w", err)
		}
		host = h
	}
	cfg := pki.ClientTLS(o.Identity, host)
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != o.Name {
			return fmt.Errorf("dphefed: the server at %s is not the key generator %q", o.Addr, o.Name)
		}
		if pki.RoleOf(cs.PeerCertificates[0]) != pki.Server {
			return fmt.Errorf("dphefed: %q's certificate is not a server's", o.Name)
		}
		return nil
	}
	max := o.MaxMessageBytes
	if max <= 0 {
		max = 64 << 20
	}
	conn, err := grpc.NewClient(o.Addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(max), grpc.MaxCallSendMsgSize(max)))
	if err != nil {
		return nil, fmt.Errorf("dphefed: dialing the key generator at %s: %w", o.Addr, err)
	}
	return &KeyGen{conn: conn, c: keygenpb.NewKeyGeneratorClient(conn), insecure: o.AllowInsecureTestKeySize}, nil
}

// Close closes the connection.
func (k *KeyGen) Close() error { return k.conn.Close() }

// publicKey parses a key the key generator sent.
func (k *KeyGen) publicKey(b []byte) (*paillier.PublicKey, error) {
	pk, err := paillier.UnmarshalPublicKey(b, paillier.DecodeOptions{AllowInsecureTestKeySize: k.insecure})
	if err != nil {
		return nil, fmt.Errorf("dphefed: the key generator's public key: %w", err)
	}
	return pk, nil
}

// PublicKey returns the key generator's Paillier public key and
// fixed-point scale.
func (k *KeyGen) PublicKey(ctx context.Context) (*paillier.PublicKey, int, error) {
	r, err := k.c.PublicKey(ctx, &keygenpb.PublicKeyRequest{Version: keygenpb.ProtocolVersion})
	if err != nil {
		return nil, 0, fmt.Errorf("dphefed: %w", err)
	}
	pk, err := k.publicKey(r.GetPublicKey())
	return pk, int(r.GetFracBits()), err
}

// UserKeys returns the caller's keys for a round, checked: the round asked
// for, the key's own public key, permutations and packing valid (the
// permutations are checked again by dphe.NewUser).
func (k *KeyGen) UserKeys(ctx context.Context, round uint64) (*dphe.UserKeys, error) {
	r, err := k.c.ClientKeys(ctx, &keygenpb.UserKeysRequest{Version: keygenpb.ProtocolVersion, Round: round})
	if err != nil {
		return nil, fmt.Errorf("dphefed: keys of round %d: %w", round, err)
	}
	if r.GetRound() != round {
		return nil, fmt.Errorf("dphefed: asked for round %d's keys, got round %d's", round, r.GetRound())
	}
	return userKeysFromPB(r, k.publicKey)
}

// userKeysFromPB converts and checks a UserKeys reply.
func userKeysFromPB(r *keygenpb.UserKeys, parseKey func([]byte) (*paillier.PublicKey, error)) (*dphe.UserKeys, error) {
	if r.GetVersion() != keygenpb.ProtocolVersion {
		return nil, fmt.Errorf("dphefed: key-generator protocol version %d, want %d", r.GetVersion(), keygenpb.ProtocolVersion)
	}
	pk, err := parseKey(r.GetPublicKey())
	if err != nil {
		return nil, err
	}
	uk := &dphe.UserKeys{PublicKey: pk, FracBits: int(r.GetFracBits()), Round: r.GetRound(), UserID: r.GetUserId(),
		Dim: int(r.GetDim()), Capacity: int(r.GetCapacity()), Phi: r.GetPhi(), PhiUser: r.GetPhiUser(),
		ChecksumOffset: new(big.Int).SetBytes(r.GetChecksumOffset())}
	for _, kv := range []struct {
		dst  *[32]byte
		src  []byte
		what string
	}{{&uk.MACKey, r.GetMacKey(), "MAC key"}, {&uk.TagKey, r.GetTagKey(), "tag key"}, {&uk.ChecksumKey, r.GetChecksumKey(), "checksum key"}} {
		if len(kv.src) != 32 {
			return nil, fmt.Errorf("dphefed: round %d: %s of %d bytes, want 32", r.GetRound(), kv.what, len(kv.src))
		}
		copy(kv.dst[:], kv.src)
	}
	if uk.FracBits < 0 || uk.FracBits > paillier.MaxFracBits {
		return nil, fmt.Errorf("dphefed: round %d: fixed-point scale 2^%d out of range", r.GetRound(), uk.FracBits)
	}
	if p := r.GetPacking(); p != nil {
		uk.Packing = &dphe.Packing{Coordinates: int(p.GetCoordinates()), Lanes: int(p.GetLanes()), Bound: p.GetBound(), MaxUsers: int(p.GetMaxUsers())}
	}
	return uk, nil
}
