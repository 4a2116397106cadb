package dphe

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/veil-privacy/veil/secagg/paillier"
)

// MinUsers is the smallest number of users whose sum may be produced or
// decrypted (Section 2.5: with N ≥ 3 a user cannot isolate another's update).
const MinUsers = 3

// MaxDim bounds the dimension of an update.
const MaxDim = 1 << 26

// DefaultFracBits is the default fixed-point scale 2^32.
const DefaultFracBits = 32

// Errors returned by the protocol.
var (
	ErrMalformed        = errors.New("dphe: malformed message")
	ErrForeignKey       = errors.New("dphe: message under a foreign key")
	ErrWrongRound       = errors.New("dphe: message for another round")
	ErrUnknownUser      = errors.New("dphe: unknown user")
	ErrAuth             = errors.New("dphe: message authentication failed")
	ErrReplay           = errors.New("dphe: replayed message")
	ErrTooFewUsers      = errors.New("dphe: too few users")
	ErrIncomplete       = errors.New("dphe: incomplete user contribution")
	ErrAlreadyDecrypted = errors.New("dphe: round already decrypted")
	ErrClosed           = errors.New("dphe: round closed")
)

// KeyGeneratorOptions configures a KeyGenerator.
type KeyGeneratorOptions struct {
	// Key is an existing private key; nil generates one of KeyBits bits.
	Key *paillier.PrivateKey
	// KeyBits is the modulus size when generating (0 means 2048).
	KeyBits int
	// AllowInsecureTestKeySize lets tests generate keys below
	// paillier.MinBits; see paillier.KeyOptions.
	AllowInsecureTestKeySize bool
	// FracBits is the fixed-point scale 2^FracBits (0 means DefaultFracBits).
	FracBits int
	// Random is the CSPRNG for keys, permutations and MAC keys; nil means
	// crypto/rand. Tests may pass a seeded stream.
	Random io.Reader
}

// RoundParams describes one aggregation round.
type RoundParams struct {
	// Round identifies the round; each round may be set up once.
	Round uint64
	// Dim is the dimension D of an update.
	Dim int
	// Capacity is the encryption capacity M: values per message, 1 ≤ M ≤ D.
	Capacity int
	// Users lists the user identifiers, at least MinUsers, distinct.
	Users []uint32
}

// UserKeys is what the key generator sends to one user for one round.
type UserKeys struct {
	PublicKey *paillier.PublicKey
	FracBits  int
	Round     uint64
	UserID    uint32
	Dim       int
	Capacity  int
	// Phi is the user-shared permutation φ.
	Phi []uint32
	// PhiUser is this user's user–aggregator permutation φ⁽ⁿ⁾.
	PhiUser []uint32
	// MACKey authenticates this user's messages to the aggregator.
	MACKey [32]byte
}

// AggregatorKeys is what the key generator sends to the aggregator.
type AggregatorKeys struct {
	PublicKey *paillier.PublicKey
	Round     uint64
	Dim       int
	Capacity  int
	// Users holds, per user, φ⁽ⁿ⁾ and the MAC key shared with that user.
	Users map[uint32]AggregatorUserKeys
}

// AggregatorUserKeys is the aggregator's share of one user's keys.
type AggregatorUserKeys struct {
	PhiUser []uint32
	MACKey  [32]byte
}

// RoundSetup is the output of KeyGenerator.NewRound.
type RoundSetup struct {
	Users      map[uint32]*UserKeys
	Aggregator *AggregatorKeys
}

// KeyGenerator is the party that issues keys and permutations and decrypts
// aggregates (Algorithm 1, steps 1, 2 and 6). It is safe for concurrent use.
type KeyGenerator struct {
	sk       *paillier.PrivateKey
	fp       *paillier.FixedPoint
	fracBits int
	random   io.Reader

	mu     sync.Mutex
	rounds map[uint64]*roundState
}

type roundState struct {
	params    RoundParams
	phi       []uint32
	decrypted bool
}

// NewKeyGenerator validates the options and returns a key generator.
func NewKeyGenerator(opts KeyGeneratorOptions) (*KeyGenerator, error) {
	random := opts.Random
	if random == nil {
		random = rand.Reader
	}
	fracBits := opts.FracBits
	if fracBits == 0 {
		fracBits = DefaultFracBits
	}
	sk := opts.Key
	if sk == nil {
		var err error
		if sk, err = paillier.GenerateKey(paillier.KeyOptions{Bits: opts.KeyBits, Random: random,
			AllowInsecureTestKeySize: opts.AllowInsecureTestKeySize}); err != nil {
			return nil, fmt.Errorf("dphe: key generator: %w", err)
		}
	}
	fp, err := paillier.NewFixedPoint(sk.Public(), fracBits)
	if err != nil {
		return nil, fmt.Errorf("dphe: key generator: %w", err)
	}
	return &KeyGenerator{sk: sk, fp: fp, fracBits: fracBits, random: random, rounds: map[uint64]*roundState{}}, nil
}

// PublicKey returns the Paillier public key.
func (g *KeyGenerator) PublicKey() *paillier.PublicKey { return g.sk.Public() }

// NewRound draws fresh permutations and MAC keys for a round.
func (g *KeyGenerator) NewRound(p RoundParams) (*RoundSetup, error) {
	if p.Dim < 1 || p.Dim > MaxDim {
		return nil, fmt.Errorf("dphe: dimension %d outside [1, %d]", p.Dim, MaxDim)
	}
	if p.Capacity < 1 || p.Capacity > p.Dim {
		return nil, fmt.Errorf("dphe: capacity %d outside [1, %d]", p.Capacity, p.Dim)
	}
	if len(p.Users) < MinUsers {
		return nil, fmt.Errorf("%w: round with %d users, need at least %d", ErrTooFewUsers, len(p.Users), MinUsers)
	}
	users := slices.Clone(p.Users)
	slices.Sort(users)
	if len(slices.Compact(slices.Clone(users))) != len(users) {
		return nil, fmt.Errorf("dphe: duplicate user identifiers in round %d", p.Round)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.rounds[p.Round]; ok {
		return nil, fmt.Errorf("dphe: round %d already set up", p.Round)
	}
	rng, err := newStream(g.random)
	if err != nil {
		return nil, err
	}
	phi := randomPerm(rng, p.Dim)
	setup := &RoundSetup{
		Users:      make(map[uint32]*UserKeys, len(users)),
		Aggregator: &AggregatorKeys{PublicKey: g.sk.Public(), Round: p.Round, Dim: p.Dim, Capacity: p.Capacity, Users: map[uint32]AggregatorUserKeys{}},
	}
	for _, id := range users {
		phiUser := randomPerm(rng, p.Dim)
		var mac [32]byte
		if _, err := io.ReadFull(g.random, mac[:]); err != nil {
			return nil, fmt.Errorf("dphe: reading MAC key: %w", err)
		}
		setup.Users[id] = &UserKeys{PublicKey: g.sk.Public(), FracBits: g.fracBits, Round: p.Round, UserID: id,
			Dim: p.Dim, Capacity: p.Capacity, Phi: phi, PhiUser: phiUser, MACKey: mac}
		setup.Aggregator.Users[id] = AggregatorUserKeys{PhiUser: phiUser, MACKey: mac}
	}
	params := p
	params.Users = users
	g.rounds[p.Round] = &roundState{params: params, phi: phi}
	return setup, nil
}

// Result is the decrypted, reordered sum of a round.
type Result struct {
	Round uint64
	// Users are the users whose updates the sum contains.
	Users []uint32
	// Sum is Σ_n w⁽ⁿ⁾ in the original coordinate order.
	Sum []float64
}

// Mean returns Sum divided by the number of users.
func (r *Result) Mean() []float64 {
	out := make([]float64, len(r.Sum))
	for i, s := range r.Sum {
		out[i] = s / float64(len(r.Users))
	}
	return out
}

// Decrypt decrypts an aggregate and undoes φ (Algorithm 1, step 6). It
// accepts only aggregates of at least MinUsers users of the round, under
// its key, and decrypts each round at most once.
func (g *KeyGenerator) Decrypt(a *Aggregate) (*Result, error) {
	if a == nil {
		return nil, fmt.Errorf("%w: nil aggregate", ErrMalformed)
	}
	if a.KeyFingerprint != g.sk.Public().Fingerprint() {
		return nil, fmt.Errorf("%w: aggregate fingerprint does not match the key generator's key", ErrForeignKey)
	}
	g.mu.Lock()
	rs, ok := g.rounds[a.Round]
	if !ok {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: round %d was never set up", ErrWrongRound, a.Round)
	}
	if rs.decrypted {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: round %d", ErrAlreadyDecrypted, a.Round)
	}
	if err := checkAggregateUsers(a.Users, rs.params.Users); err != nil {
		g.mu.Unlock()
		return nil, err
	}
	if len(a.Ciphertexts) != rs.params.Dim {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: aggregate has %d ciphertexts, round dimension is %d", ErrMalformed, len(a.Ciphertexts), rs.params.Dim)
	}
	rs.decrypted = true // a failed decryption below still consumes the round
	phi := rs.phi
	g.mu.Unlock()

	// Positions no message covered all hold the same encryption of zero:
	// decrypt each distinct ciphertext once.
	first := make(map[string]int, len(a.Ciphertexts))
	var uniq []*paillier.Ciphertext
	slot := make([]int, len(a.Ciphertexts))
	for j, c := range a.Ciphertexts {
		key := string(c.Value().Bytes())
		u, ok := first[key]
		if !ok {
			u = len(uniq)
			first[key] = u
			uniq = append(uniq, c)
		}
		slot[j] = u
	}
	plain, err := g.sk.DecryptVector(uniq)
	if err != nil {
		return nil, fmt.Errorf("dphe: decrypting aggregate of round %d: %w", a.Round, err)
	}
	vals := make([]float64, len(uniq))
	for i, m := range plain {
		if vals[i], err = g.fp.Decode(m); err != nil {
			return nil, fmt.Errorf("dphe: decoding aggregate of round %d: %w", a.Round, err)
		}
	}
	sum := make([]float64, len(phi))
	for k := range sum {
		sum[k] = vals[slot[phi[k]]]
	}
	return &Result{Round: a.Round, Users: slices.Clone(a.Users), Sum: sum}, nil
}

// checkAggregateUsers checks the aggregate's users: sorted, distinct, part
// of the round, at least MinUsers.
func checkAggregateUsers(got, round []uint32) error {
	if len(got) < MinUsers {
		return fmt.Errorf("%w: aggregate of %d users, need at least %d", ErrTooFewUsers, len(got), MinUsers)
	}
	for i, u := range got {
		if i > 0 && got[i-1] >= u {
			return fmt.Errorf("%w: aggregate users not strictly increasing", ErrMalformed)
		}
		if _, ok := slices.BinarySearch(round, u); !ok {
			return fmt.Errorf("%w: user %d is not in the round", ErrUnknownUser, u)
		}
	}
	return nil
}
