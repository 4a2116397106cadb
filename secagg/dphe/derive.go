package dphe

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"slices"
)

// roundContext separates the derivation of a round's secrets from every
// other use of HMAC.
var roundContext = []byte("veil/dphe/round/v1\x00")

// subkey derives the round secret named label (and, for a user's secrets,
// the user) from the round's seed: HMAC-SHA256(seed, context ‖ label ‖ user).
func subkey(seed [32]byte, label string, user uint32) [32]byte {
	h := hmac.New(sha256.New, seed[:])
	h.Write(roundContext)
	h.Write([]byte(label))
	h.Write(binary.BigEndian.AppendUint32(nil, user))
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// permFrom returns the uniformly random permutation of [0, d) that the
// ChaCha8 stream keyed by key shuffles.
func permFrom(key [32]byte, d int) []uint32 {
	return randomPerm(mrand.New(mrand.NewChaCha8(key)), d)
}

// offsetFrom returns a value in [0, n) from the ChaCha8 stream keyed by
// key: 128 bits more than n has, reduced modulo n (statistical distance
// from uniform below 2^-128).
func offsetFrom(key [32]byte, n *big.Int) *big.Int {
	b := make([]byte, (n.BitLen()+128+7)/8)
	_, _ = mrand.NewChaCha8(key).Read(b)
	x := new(big.Int).SetBytes(b)
	clear(b)
	return x.Mod(x, n)
}

// derive fills rs's secrets from rs.seed and returns the round's keys for
// every user and the aggregator. The same seed gives the same keys, so a
// key generator that keeps the seed (Snapshot) can hand out the same keys
// after a restart.
func (g *KeyGenerator) derive(rs *roundState) (*RoundSetup, error) {
	p := rs.params
	pk := g.sk.Public()
	rs.phi = permFrom(subkey(rs.seed, "phi", 0), p.Dim)
	rs.checksumKey = subkey(rs.seed, "checksum", 0)
	rs.users = make(map[uint32]*userSecrets, len(p.Users))
	setup := &RoundSetup{
		Users:      make(map[uint32]*UserKeys, len(p.Users)),
		Aggregator: &AggregatorKeys{PublicKey: pk, Round: p.Round, Dim: p.Dim, Capacity: p.Capacity, Users: map[uint32]AggregatorUserKeys{}},
	}
	for _, id := range p.Users {
		uk := g.userKeys(rs, id)
		rs.users[id] = &userSecrets{tagKey: uk.TagKey, offset: new(big.Int).Set(uk.ChecksumOffset)}
		setup.Users[id] = uk
		setup.Aggregator.Users[id] = AggregatorUserKeys{PhiUser: slices.Clone(uk.PhiUser), MACKey: uk.MACKey}
	}
	return setup, nil
}

// userKeys derives one user's keys of a round whose φ and checksum key
// are derived.
func (g *KeyGenerator) userKeys(rs *roundState, id uint32) *UserKeys {
	p := rs.params
	pk := g.sk.Public()
	var pack *Packing
	if p.Packing != nil {
		cp := *p.Packing
		pack = &cp
	}
	return &UserKeys{PublicKey: pk, FracBits: g.fracBits, Round: p.Round, UserID: id, Dim: p.Dim, Capacity: p.Capacity,
		Phi: slices.Clone(rs.phi), PhiUser: permFrom(subkey(rs.seed, "user-perm", id), p.Dim),
		MACKey: subkey(rs.seed, "user-mac", id), TagKey: subkey(rs.seed, "user-tag", id),
		ChecksumKey: rs.checksumKey, ChecksumOffset: offsetFrom(subkey(rs.seed, "user-offset", id), pk.N()), Packing: pack}
}

// UserKeys returns one user's keys for an open round, the same keys
// NewRound returned for it.
func (g *KeyGenerator) UserKeys(round uint64, user uint32) (*UserKeys, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rs, err := g.openRound(round)
	if err != nil {
		return nil, err
	}
	if _, ok := rs.users[user]; !ok {
		return nil, fmt.Errorf("%w: user %d is not in round %d", ErrUnknownUser, user, round)
	}
	return g.userKeys(rs, user), nil
}

// AggregatorKeys returns the aggregator's keys for an open round, the
// same keys NewRound returned.
func (g *KeyGenerator) AggregatorKeys(round uint64) (*AggregatorKeys, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rs, err := g.openRound(round)
	if err != nil {
		return nil, err
	}
	p := rs.params
	a := &AggregatorKeys{PublicKey: g.sk.Public(), Round: p.Round, Dim: p.Dim, Capacity: p.Capacity, Users: map[uint32]AggregatorUserKeys{}}
	for _, id := range p.Users {
		a.Users[id] = AggregatorUserKeys{PhiUser: permFrom(subkey(rs.seed, "user-perm", id), p.Dim), MACKey: subkey(rs.seed, "user-mac", id)}
	}
	return a, nil
}

// Params returns the parameters of an open round.
func (g *KeyGenerator) Params(round uint64) (RoundParams, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rs, err := g.openRound(round)
	if err != nil {
		return RoundParams{}, err
	}
	p := rs.params
	p.Users = slices.Clone(p.Users)
	if p.Packing != nil {
		cp := *p.Packing
		p.Packing = &cp
	}
	return p, nil
}

// Snapshot is what a key generator must keep to resume after a restart:
// the last round set up and, per open round, its parameters and seed.
// The seeds are secret (they derive every key of their round): keep a
// snapshot where only the key generator can read it.
type Snapshot struct {
	// Started is whether a round was ever set up; Last is the last one.
	Started bool
	Last    uint64
	// Rounds are the open rounds, oldest first.
	Rounds []RoundRecord
}

// RoundRecord is one open round: its parameters and its seed.
type RoundRecord struct {
	Params RoundParams
	Seed   [32]byte
}

// Snapshot returns the key generator's state. Finished rounds are not in
// it: a restored key generator refuses them because they are not after
// Last and not open.
func (g *KeyGenerator) Snapshot() *Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := &Snapshot{Started: g.started, Last: g.last}
	for _, rs := range g.open {
		p := rs.params
		p.Users = slices.Clone(p.Users)
		s.Rounds = append(s.Rounds, RoundRecord{Params: p, Seed: rs.seed})
	}
	slices.SortFunc(s.Rounds, func(a, b RoundRecord) int { return cmp.Compare(a.Params.Round, b.Params.Round) })
	return s
}

// resume restores a snapshot's open rounds into a new key generator.
func (g *KeyGenerator) resume(s *Snapshot) error {
	if len(s.Rounds) > g.maxOpen {
		return fmt.Errorf("dphe: snapshot holds %d open rounds, more than %d", len(s.Rounds), g.maxOpen)
	}
	for i, r := range s.Rounds {
		if !s.Started || r.Params.Round > s.Last || (i > 0 && r.Params.Round <= s.Rounds[i-1].Params.Round) {
			return fmt.Errorf("dphe: snapshot's round %d is out of order or after its last round %d", r.Params.Round, s.Last)
		}
		params, err := g.checkParams(r.Params)
		if err != nil {
			return fmt.Errorf("dphe: snapshot's round %d: %w", r.Params.Round, err)
		}
		rs := &roundState{params: params, seed: r.Seed}
		if _, err := g.derive(rs); err != nil {
			return err
		}
		g.admit(rs)
	}
	g.started, g.last = s.Started, s.Last
	return nil
}
