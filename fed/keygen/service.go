// Package keygen is DPHE's key generator as its own party (veil fed
// keygen): a gRPC service (fed/keygenpb) behind mutual TLS with its own
// certificate, holding the Paillier private key and each open round's
// secrets in a crash-safe state folder.
//
// Who may do what, by the certificate of the caller (verified against the
// federation's authority, refused when revoked, failing closed like the
// coordinator's):
//
//   - the coordinator (a server certificate whose name is
//     Options.Coordinator) sets up rounds, naming the round's clients, and
//     receives the aggregator's keys (each user's φ⁽ⁿ⁾ and MAC key: never φ,
//     the tag keys or the checksum secrets); it sends each round's
//     aggregate once and receives the sum;
//   - a client certificate named in a round receives its own keys for that
//     round, and nobody else's;
//   - any certificate of the authority reads the public key.
//
// The key generator decrypts only what secagg/dphe's KeyGenerator accepts:
// the complete contributions of at least three distinct clients of the
// round, each message named by its digest and tagged under a key only that
// client and the key generator hold (so the coordinator proves which
// contributions it multiplied and cannot invent or drop any), once per
// round. The state file records that a round is finished before its
// decryption starts (dphe's BeforeDecrypt), so a replayed aggregate or a
// second decryption is refused also after kill -9 and a restart; an open
// round survives a restart with the same keys (its seed is kept). Secrets
// never appear in logs or errors.
package keygen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/keygenpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// DefaultFracBits is the fixed-point scale of a new key generator: 2^24,
// a resolution of 6e-8, which leaves more lanes per plaintext than
// dphe.DefaultFracBits.
const DefaultFracBits = 24

// Options configures a key generator.
type Options struct {
	// Dir is the state folder (created 0700 if missing; required).
	Dir string
	// Coordinator is the name of the coordinator's certificate: the only
	// caller that sets up rounds and asks for decryption (required).
	Coordinator string
	// Bits is the Paillier modulus size of a new key (0: 2048).
	Bits int
	// AllowInsecureTestKeySize lets tests use keys below 2048 bits.
	AllowInsecureTestKeySize bool
	// FracBits is a new key generator's fixed-point scale (0:
	// DefaultFracBits); an existing state keeps its own.
	FracBits int
	// MaxOpenRounds bounds the rounds set up and not decrypted (0: dphe's default).
	MaxOpenRounds int
	// Logger receives one line per round set up and decrypted (nil: none).
	Logger *slog.Logger
	// Random is for tests (nil: crypto/rand).
	Random io.Reader
}

// Service is the key generator's gRPC service.
type Service struct {
	keygenpb.UnimplementedKeyGeneratorServer
	kg    *dphe.KeyGenerator
	coord string
	log   *slog.Logger
	store *store
	pub   []byte // the public key's encoding

	mu    sync.Mutex // guards st and names, and orders state writes
	st    *state
	names map[uint64][]string // clients of each open round, sorted; user id = index + 1
}

// Open opens (or creates, with a new key) the key generator's state
// folder and returns the service. Close releases the folder.
func Open(o Options) (*Service, error) {
	if err := pki.CheckName(o.Coordinator); err != nil {
		return nil, fmt.Errorf("keygen: the coordinator's certificate name: %w", err)
	}
	st0, err := openStore(o.Dir)
	if err != nil {
		return nil, err
	}
	s, err := open(o, st0)
	if err != nil {
		st0.close()
		return nil, err
	}
	return s, nil
}

func open(o Options, stor *store) (*Service, error) {
	st, err := stor.load()
	if err != nil {
		return nil, err
	}
	var sk *paillier.PrivateKey
	if st == nil {
		frac := o.FracBits
		if frac == 0 {
			frac = DefaultFracBits
		}
		var kb []byte
		if sk, kb, err = newKey(o.Bits, o.AllowInsecureTestKeySize, o.Random); err != nil {
			return nil, err
		}
		st = &state{Version: stateVersion, Key: kb, FracBits: frac}
		if err := stor.save(st); err != nil {
			return nil, err
		}
	} else if sk, err = paillier.UnmarshalPrivateKey(st.Key, paillier.DecodeOptions{AllowInsecureTestKeySize: o.AllowInsecureTestKeySize}); err != nil {
		return nil, fmt.Errorf("keygen: the state's key: %w", err)
	}
	snap, names, err := st.snapshot()
	if err != nil {
		return nil, err
	}
	s := &Service{coord: o.Coordinator, log: o.Logger, store: stor, st: st, names: names}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.kg, err = dphe.NewKeyGenerator(dphe.KeyGeneratorOptions{Key: sk, FracBits: st.FracBits, MaxOpenRounds: o.MaxOpenRounds,
		Random: o.Random, BeforeDecrypt: s.finish, Resume: snap})
	if err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	if s.pub, err = sk.Public().MarshalBinary(); err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	return s, nil
}

// Close releases the state folder.
func (s *Service) Close() error { return s.store.close() }

// Key returns the Paillier public key.
func (s *Service) Key() *paillier.PublicKey { return s.kg.PublicKey() }

// saveLocked writes the key generator's current rounds. s.mu is held.
func (s *Service) saveLocked() error {
	snap := s.kg.Snapshot()
	for r := range s.names {
		if !slices.ContainsFunc(snap.Rounds, func(rr dphe.RoundRecord) bool { return rr.Params.Round == r }) {
			delete(s.names, r)
		}
	}
	s.st.setRounds(snap, s.names)
	return s.store.save(s.st)
}

// finish records durably that a round is finished; dphe calls it before
// decrypting.
func (s *Service) finish(round uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked()
}

// HighestCRLNumber implements pki.CRLNumbers from the state file.
func (s *Service) HighestCRLNumber() (*big.Int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.crlNumber()
}

// AcceptCRLNumber implements pki.CRLNumbers: the number is kept durably.
func (s *Service) AcceptCRLNumber(n *big.Int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.st.CRLNumber
	s.st.CRLNumber = n.String()
	if err := s.store.save(s.st); err != nil {
		s.st.CRLNumber = old
		return err
	}
	return nil
}

func checkVersion(v uint32) error {
	if v != keygenpb.ProtocolVersion {
		return status.Errorf(codes.FailedPrecondition, "key-generator protocol version %d, this key generator speaks %d", v, keygenpb.ProtocolVersion)
	}
	return nil
}

// requireCoordinator refuses every caller but the coordinator.
func (s *Service) requireCoordinator(ctx context.Context, what string) error {
	name, role, err := peerOf(ctx)
	if err != nil {
		return err
	}
	if role != pki.Server || name != s.coord {
		return status.Errorf(codes.PermissionDenied, "only the coordinator %q may %s; the caller is %s %q", s.coord, what, role, name)
	}
	return nil
}

// grpcError maps a library error to a status.
func grpcError(err error) error {
	switch {
	case errors.Is(err, dphe.ErrAlreadyDecrypted), errors.Is(err, dphe.ErrWrongRound), errors.Is(err, dphe.ErrClosed):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, dphe.ErrAuth), errors.Is(err, dphe.ErrForgedAggregate), errors.Is(err, dphe.ErrUnknownUser):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, dphe.ErrTooFewUsers), errors.Is(err, dphe.ErrIncomplete), errors.Is(err, dphe.ErrMalformed), errors.Is(err, dphe.ErrForeignKey):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
