package dphe

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"sync"

	"filippo.io/bigmod"

	"github.com/veil-privacy/veil/secagg/paillier"
)

// MinUsers is the smallest number of users whose sum may be produced or
// decrypted (Section 2.5: with N ≥ 3 a user cannot isolate another's update).
const MinUsers = 3

// MaxDim bounds the dimension of an update.
const MaxDim = 1 << 26

// DefaultFracBits is the default fixed-point scale 2^32.
const DefaultFracBits = 32

// DefaultMaxOpenRounds is how many rounds a key generator keeps open
// (set up but not yet decrypted) by default.
const DefaultMaxOpenRounds = 16

// Errors returned by the protocol.
var (
	ErrMalformed   = errors.New("dphe: malformed message")
	ErrForeignKey  = errors.New("dphe: message under a foreign key")
	ErrWrongRound  = errors.New("dphe: message for another round")
	ErrUnknownUser = errors.New("dphe: unknown user")
	ErrAuth        = errors.New("dphe: message authentication failed")
	ErrReplay      = errors.New("dphe: replayed message")
	ErrTooFewUsers = errors.New("dphe: too few users")
	ErrIncomplete  = errors.New("dphe: incomplete user contribution")
	// ErrAlreadyDecrypted is returned for a round that is finished: it was
	// decrypted, a decryption of it was refused after it had begun, or it
	// expired. A round is never decrypted twice.
	ErrAlreadyDecrypted = errors.New("dphe: round already decrypted or expired")
	ErrClosed           = errors.New("dphe: round closed")
	// ErrForgedAggregate is returned when an aggregate's plaintext is not
	// the sum of the messages its contributions name.
	ErrForgedAggregate = errors.New("dphe: aggregate is not the sum of the messages it names")
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
	// MaxOpenRounds bounds the rounds set up but not yet decrypted (0 means
	// DefaultMaxOpenRounds). Setting up one more expires the oldest.
	MaxOpenRounds int
	// Random is the CSPRNG for keys and each round's seed (from which the
	// round's permutations, MAC keys and checksum secrets are derived); nil
	// means crypto/rand. Tests may pass a seeded stream.
	Random io.Reader
	// BeforeDecrypt, if not nil, is called once an aggregate has passed
	// every check that precedes decryption and its round is closed in
	// memory, before anything is decrypted: a persistent key generator
	// records there, durably, that the round is finished, so that no
	// restart decrypts it again. An error decrypts nothing; the round
	// stays closed.
	BeforeDecrypt func(round uint64) error
	// Resume restores the rounds a key generator had open (see
	// KeyGenerator.Snapshot); nil starts with none.
	Resume *Snapshot
}

// RoundParams describes one aggregation round.
type RoundParams struct {
	// Round identifies the round; rounds must be set up in increasing order.
	Round uint64
	// Dim is the dimension D of an update.
	Dim int
	// Capacity is the encryption capacity M: values per message, 1 ≤ M ≤ D.
	Capacity int
	// Users lists the user identifiers, at least MinUsers, distinct.
	Users []uint32
	// Packing, if not nil, packs several fixed-point values per
	// plaintext: Dim must then be Packing.Blocks() (see Packing).
	Packing *Packing
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
	// TagKey authenticates this user's contributions to the key generator;
	// the aggregator never has it.
	TagKey [32]byte
	// ChecksumKey seeds the round's checksum coefficients, shared by the
	// round's users and the key generator, never the aggregator.
	ChecksumKey [32]byte
	// ChecksumOffset is this user's secret offset t in [0, n), known only
	// to the user and the key generator.
	ChecksumOffset *big.Int
	// Packing is the round's packing (nil: one value per plaintext).
	Packing *Packing
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
	maxOpen  int
	random   io.Reader
	before   func(round uint64) error

	mu      sync.Mutex
	open    map[uint64]*roundState // rounds set up and not yet finished
	started bool                   // a round has been set up
	last    uint64                 // the last round set up
}

// roundState is the key generator's secret state of one open round. It is
// dropped (and its secrets overwritten) when the round is finished.
type roundState struct {
	params      RoundParams
	seed        [32]byte // everything below is derived from it
	phi         []uint32
	users       map[uint32]*userSecrets
	checksumKey [32]byte
}

// userSecrets is what the key generator shares with one user for a round.
type userSecrets struct {
	tagKey [32]byte
	offset *big.Int
}

func (rs *roundState) zero() {
	clear(rs.seed[:])
	clear(rs.phi)
	clear(rs.checksumKey[:])
	for _, u := range rs.users {
		clear(u.tagKey[:])
		clear(u.offset.Bits())
	}
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
	maxOpen := opts.MaxOpenRounds
	if maxOpen == 0 {
		maxOpen = DefaultMaxOpenRounds
	}
	if maxOpen < 1 {
		return nil, fmt.Errorf("dphe: key generator: MaxOpenRounds %d is negative", maxOpen)
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
	g := &KeyGenerator{sk: sk, fp: fp, fracBits: fracBits, maxOpen: maxOpen, random: random, before: opts.BeforeDecrypt, open: map[uint64]*roundState{}}
	if opts.Resume != nil {
		if err := g.resume(opts.Resume); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// PublicKey returns the Paillier public key.
func (g *KeyGenerator) PublicKey() *paillier.PublicKey { return g.sk.Public() }

// OpenRounds returns how many rounds are set up and not yet finished; the
// key generator holds secrets for those only.
func (g *KeyGenerator) OpenRounds() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.open)
}

// NewRound draws a fresh 32-byte seed for a round, from which its
// permutations, MAC keys and checksum secrets are derived (deriveRound).
// Rounds must be set up in increasing order of Round: a finished round
// needs no memory to be refused again. If MaxOpenRounds rounds are already
// open, the oldest expires (it can no longer be decrypted).
func (g *KeyGenerator) NewRound(p RoundParams) (*RoundSetup, error) {
	params, err := g.checkParams(p)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started && p.Round <= g.last {
		return nil, fmt.Errorf("%w: round %d is not after round %d, the last one set up", ErrWrongRound, p.Round, g.last)
	}
	rs := &roundState{params: params}
	if _, err := io.ReadFull(g.random, rs.seed[:]); err != nil {
		return nil, fmt.Errorf("dphe: reading the round's seed: %w", err)
	}
	setup, err := g.derive(rs)
	if err != nil {
		return nil, err
	}
	g.admit(rs)
	return setup, nil
}

// checkParams validates round parameters and returns them with the users
// sorted.
func (g *KeyGenerator) checkParams(p RoundParams) (RoundParams, error) {
	if p.Dim < 1 || p.Dim > MaxDim {
		return p, fmt.Errorf("dphe: dimension %d outside [1, %d]", p.Dim, MaxDim)
	}
	if p.Capacity < 1 || p.Capacity > p.Dim {
		return p, fmt.Errorf("dphe: capacity %d outside [1, %d]", p.Capacity, p.Dim)
	}
	if len(p.Users) < MinUsers {
		return p, fmt.Errorf("%w: round with %d users, need at least %d", ErrTooFewUsers, len(p.Users), MinUsers)
	}
	users := slices.Clone(p.Users)
	slices.Sort(users)
	if len(slices.Compact(slices.Clone(users))) != len(users) {
		return p, fmt.Errorf("dphe: duplicate user identifiers in round %d", p.Round)
	}
	if p.Packing != nil {
		if err := p.Packing.Check(g.sk.Public(), g.fracBits); err != nil {
			return p, err
		}
		if p.Dim != p.Packing.Blocks() {
			return p, fmt.Errorf("dphe: a packed round of %d coordinates in blocks of %d has dimension %d, not %d", p.Packing.Coordinates, p.Packing.Lanes, p.Packing.Blocks(), p.Dim)
		}
		if len(users) > p.Packing.MaxUsers {
			return p, fmt.Errorf("dphe: round of %d users, but the packing's lanes hold the sum of at most %d", len(users), p.Packing.MaxUsers)
		}
		pk := *p.Packing
		p.Packing = &pk
	}
	p.Users = users
	return p, nil
}

// admit makes rs an open round, expiring the oldest beyond MaxOpenRounds.
// Call with g.mu held.
func (g *KeyGenerator) admit(rs *roundState) {
	for len(g.open) >= g.maxOpen {
		oldest := rs.params.Round
		for r := range g.open {
			oldest = min(oldest, r)
		}
		g.open[oldest].zero()
		delete(g.open, oldest)
	}
	g.open[rs.params.Round] = rs
	g.started, g.last = true, max(g.last, rs.params.Round)
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

// Decrypt decrypts an aggregate and undoes φ (Algorithm 1, step 6); it is
// DecryptWithProgress without progress reports.
func (g *KeyGenerator) Decrypt(a *Aggregate) (*Result, error) { return g.DecryptWithProgress(a, nil) }

// DecryptWithProgress decrypts an aggregate and undoes φ (Algorithm 1,
// step 6), reporting the decryptions to progress (nil means none).
//
// In order, cheapest first: it checks the aggregate's shape; that its round
// is open; that its contributions carry valid tags (under the keys the key
// generator shares with each user) from at least MinUsers distinct users
// of the round, each with all of its shards; and that every ciphertext is
// a unit. Failing any of these decrypts nothing and leaves the round open.
// Then it closes the round, so no round is decrypted twice, decrypts, and
// releases the sum only if the checksum proves it is the sum of exactly
// the named messages (ErrForgedAggregate otherwise).
func (g *KeyGenerator) DecryptWithProgress(a *Aggregate, progress paillier.Progress) (*Result, error) {
	pk := g.sk.Public()
	if a == nil {
		return nil, fmt.Errorf("%w: nil aggregate", ErrMalformed)
	}
	if a.KeyFingerprint != pk.Fingerprint() {
		return nil, fmt.Errorf("%w: aggregate fingerprint does not match the key generator's key", ErrForeignKey)
	}
	if err := a.checkShape(pk); err != nil {
		return nil, err
	}
	g.mu.Lock()
	rs, err := g.openRound(a.Round)
	if err == nil && len(a.Ciphertexts) != rs.params.Dim {
		err = fmt.Errorf("%w: aggregate has %d ciphertexts, round dimension is %d", ErrMalformed, len(a.Ciphertexts), rs.params.Dim)
	}
	var users []uint32
	if err == nil {
		users, err = rs.authenticate(a, pk.Fingerprint())
	}
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	n := len(a.Ciphertexts)
	if err := pk.ValidateAll(append(a.Ciphertexts[:n:n], a.Checksum)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	// Close the round before decrypting anything.
	g.mu.Lock()
	if g.open[a.Round] != rs {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: round %d", ErrAlreadyDecrypted, a.Round)
	}
	delete(g.open, a.Round)
	g.mu.Unlock()
	defer rs.zero()
	if g.before != nil {
		if err := g.before(a.Round); err != nil {
			return nil, fmt.Errorf("dphe: recording that round %d is finished (nothing decrypted): %w", a.Round, err)
		}
	}
	return g.decryptRound(a, rs, users, progress)
}

// openRound returns the state of an open round. Call with g.mu held.
func (g *KeyGenerator) openRound(round uint64) (*roundState, error) {
	if rs, ok := g.open[round]; ok {
		return rs, nil
	}
	if g.started && round <= g.last {
		return nil, fmt.Errorf("%w: round %d is not open", ErrAlreadyDecrypted, round)
	}
	return nil, fmt.Errorf("%w: round %d was never set up", ErrWrongRound, round)
}

// authenticate checks the contributions: ordered by user and shard, each
// user of the round with shards 0 … S−1 of one announced count S, every
// tag valid, at least MinUsers users. It returns the users.
func (rs *roundState) authenticate(a *Aggregate, fpr [32]byte) ([]uint32, error) {
	maxShards := maxShardsFor(rs.params.Dim, rs.params.Capacity)
	var users []uint32
	for i, c := range a.Contributions {
		us, ok := rs.users[c.UserID]
		if !ok {
			return nil, fmt.Errorf("%w: user %d is not in round %d", ErrUnknownUser, c.UserID, a.Round)
		}
		newUser := i == 0 || a.Contributions[i-1].UserID != c.UserID
		switch {
		case newUser && i > 0 && a.Contributions[i-1].UserID > c.UserID:
			return nil, fmt.Errorf("%w: contributions not ordered by user", ErrMalformed)
		case newUser && i > 0 && a.Contributions[i-1].Shard+1 != a.Contributions[i-1].Shards:
			return nil, fmt.Errorf("%w: user %d has %d of %d shards", ErrIncomplete, a.Contributions[i-1].UserID, a.Contributions[i-1].Shard+1, a.Contributions[i-1].Shards)
		case newUser && c.Shard != 0:
			return nil, fmt.Errorf("%w: user %d's contributions do not start at shard 0", ErrIncomplete, c.UserID)
		case !newUser && (c.Shard != a.Contributions[i-1].Shard+1 || c.Shards != a.Contributions[i-1].Shards):
			return nil, fmt.Errorf("%w: user %d's shards are not consecutive under one count", ErrMalformed, c.UserID)
		case c.Shards == 0 || int64(c.Shards) > int64(maxShards):
			return nil, fmt.Errorf("%w: user %d announces %d shards, at most %d possible", ErrMalformed, c.UserID, c.Shards, maxShards)
		}
		want := contributionTag(us.tagKey, fpr, a.Round, c.UserID, c.Shard, c.Shards, c.Digest)
		if !hmac.Equal(want[:], c.Tag[:]) {
			return nil, fmt.Errorf("%w: contribution of user %d, shard %d, round %d", ErrAuth, c.UserID, c.Shard, a.Round)
		}
		if newUser {
			users = append(users, c.UserID)
		}
	}
	if k := len(a.Contributions); k > 0 && a.Contributions[k-1].Shard+1 != a.Contributions[k-1].Shards {
		last := a.Contributions[k-1]
		return nil, fmt.Errorf("%w: user %d has %d of %d shards", ErrIncomplete, last.UserID, last.Shard+1, last.Shards)
	}
	if len(users) < MinUsers {
		return nil, fmt.Errorf("%w: aggregate of %d authenticated users, need at least %d", ErrTooFewUsers, len(users), MinUsers)
	}
	return users, nil
}

// checksumHolds reports whether Σ_{users} t_u + Σ_j α_j·S_j ≡ checksum
// (mod n), S_j = uniq[slot[φ(j)]] the decrypted sum at coordinate j. The
// plaintexts may be a forgery the key generator must not leak, so the
// arithmetic is constant-time (bigmod, fixed-size operands, every
// coordinate multiplied, zeros included) and the comparison too.
func (rs *roundState) checksumHolds(pk *paillier.PublicKey, users []uint32, uniq []*big.Int, slot []int, checksum *big.Int) (bool, error) {
	nMod, err := bigmod.NewModulus(pk.N().Bytes())
	if err != nil {
		return false, fmt.Errorf("dphe: checksum modulus: %w", err)
	}
	size := nMod.Size()
	buf := make([]byte, size)
	nat := func(x *big.Int) (*bigmod.Nat, error) {
		return bigmod.NewNat().SetBytes(x.FillBytes(buf), nMod)
	}
	// The distinct plaintexts as Nats, once.
	vals := make([]*bigmod.Nat, len(uniq))
	for i, m := range uniq {
		if vals[i], err = nat(m); err != nil {
			return false, fmt.Errorf("dphe: checksum: %w", err)
		}
	}
	acc := bigmod.NewNat().ExpandFor(nMod)
	for _, u := range users {
		t, err := nat(rs.users[u].offset)
		if err != nil {
			return false, fmt.Errorf("dphe: checksum: %w", err)
		}
		acc.Add(t, nMod)
	}
	coeffs := newCoefficients(rs.checksumKey)
	alpha, term := new(big.Int), bigmod.NewNat()
	for _, pos := range rs.phi {
		// α_j < 2^128 < n: a fixed-size Nat; term = α_j·S_j mod n.
		if _, err := term.SetBytes(coeffs.next(alpha).FillBytes(buf), nMod); err != nil {
			return false, fmt.Errorf("dphe: checksum: %w", err)
		}
		acc.Add(term.Mul(vals[slot[pos]], nMod), nMod)
	}
	want, err := nat(checksum)
	if err != nil {
		return false, fmt.Errorf("dphe: checksum: %w", err)
	}
	equal := acc.Equal(want) == 1
	for _, x := range append(vals, acc, term, want) {
		clear(x.Bits())
	}
	return equal, nil
}

// maxShardsFor is the most shards a user can need: ⌈D/M⌉.
func maxShardsFor(dim, capacity int) int { return (dim + capacity - 1) / capacity }

// decryptRound decrypts a closed round's authenticated aggregate, checks
// the checksum and decodes the sum.
func (g *KeyGenerator) decryptRound(a *Aggregate, rs *roundState, users []uint32, progress paillier.Progress) (*Result, error) {
	pk := g.sk.Public()
	// Positions no message covered all hold the same encryption of zero:
	// decrypt each distinct ciphertext once. The checksum comes last.
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
	plain, err := g.sk.DecryptVectorProgress(append(uniq, a.Checksum), progress)
	if err != nil {
		return nil, fmt.Errorf("dphe: decrypting aggregate of round %d: %w", a.Round, err)
	}
	defer func() {
		for _, m := range plain {
			clear(m.Bits())
		}
	}()
	ok, err := rs.checksumHolds(pk, users, plain[:len(uniq)], slot, plain[len(plain)-1])
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: round %d", ErrForgedAggregate, a.Round)
	}
	lanes, pack := 1, rs.params.Packing
	if pack != nil {
		lanes = pack.Lanes
	}
	vals := make([]float64, len(uniq)*lanes)
	for i, m := range plain[:len(uniq)] {
		if pack == nil {
			vals[i], err = g.fp.Decode(m)
		} else {
			err = pack.unpack(pk, g.fracBits, len(users), m, vals[i*lanes:(i+1)*lanes])
		}
		if err != nil {
			return nil, fmt.Errorf("dphe: decoding aggregate of round %d: %w", a.Round, err)
		}
	}
	sum := make([]float64, len(rs.phi)*lanes)
	for k, pos := range rs.phi {
		copy(sum[k*lanes:(k+1)*lanes], vals[slot[pos]*lanes:(slot[pos]+1)*lanes])
	}
	if pack != nil {
		sum = sum[:pack.Coordinates]
	}
	return &Result{Round: a.Round, Users: users, Sum: sum}, nil
}
