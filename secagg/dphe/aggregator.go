package dphe

import (
	"crypto/hmac"
	"fmt"
	"math/big"
	"slices"
	"sync"

	"github.com/veil-privacy/veil/secagg/paillier"
)

// AggregatorOptions configures an Aggregator.
type AggregatorOptions struct {
	// Encrypter configures the one encryption of zero (Enc0).
	Encrypter paillier.EncrypterOptions
}

// Aggregator collects users' messages for one round and produces the
// permuted encrypted sum (Algorithm 1, step 5). It is safe for concurrent use.
type Aggregator struct {
	keys *AggregatorKeys
	fpr  [32]byte
	inv  map[uint32][]uint32 // (φ⁽ⁿ⁾)⁻¹ per user
	enc  *paillier.Encrypter

	mu     sync.Mutex
	users  map[uint32]*userState
	closed bool
}

type userState struct {
	shards uint32
	msgs   map[uint32]*received
}

// received is an authenticated message and the digest of its body.
type received struct {
	msg    *Message
	digest [32]byte
}

// NewAggregator checks the keys and prepares a round.
func NewAggregator(keys *AggregatorKeys, opts AggregatorOptions) (*Aggregator, error) {
	if keys == nil || keys.PublicKey == nil {
		return nil, fmt.Errorf("dphe: aggregator: missing keys")
	}
	if keys.Dim < 1 || keys.Dim > MaxDim || keys.Capacity < 1 || keys.Capacity > keys.Dim {
		return nil, fmt.Errorf("dphe: aggregator: dimension %d / capacity %d invalid", keys.Dim, keys.Capacity)
	}
	if len(keys.Users) < MinUsers {
		return nil, fmt.Errorf("%w: aggregator keys for %d users, need at least %d", ErrTooFewUsers, len(keys.Users), MinUsers)
	}
	a := &Aggregator{keys: keys, fpr: keys.PublicKey.Fingerprint(), inv: map[uint32][]uint32{}, users: map[uint32]*userState{}}
	for id, uk := range keys.Users {
		if len(uk.PhiUser) != keys.Dim {
			return nil, fmt.Errorf("dphe: aggregator: φ⁽ⁿ⁾ of user %d has length %d, want %d", id, len(uk.PhiUser), keys.Dim)
		}
		inv, err := invertPerm(uk.PhiUser)
		if err != nil {
			return nil, fmt.Errorf("dphe: aggregator: user %d: %w", id, err)
		}
		a.inv[id] = inv
	}
	enc, err := paillier.NewEncrypter(keys.PublicKey, opts.Encrypter)
	if err != nil {
		return nil, fmt.Errorf("dphe: aggregator: %w", err)
	}
	a.enc = enc
	return a, nil
}

// Receive decodes, authenticates and stores one message. It rejects
// malformed, foreign-key, wrong-round, unknown-user, forged or tampered
// (bad MAC), replayed and inconsistent messages, leaving state unchanged.
// Structure is checked first, then the MAC, and only then the modular
// arithmetic of the coprimality test.
func (a *Aggregator) Receive(b []byte) error {
	m, err := decodeMessage(b, a.keys.PublicKey)
	if err != nil {
		return err
	}
	return a.receive(m)
}

// ReceiveFrom is Receive for a message that must be user's: the caller
// knows who sent it (the sender's certificate), and a message under
// another user's identifier is refused before anything else is checked.
func (a *Aggregator) ReceiveFrom(user uint32, b []byte) error {
	m, err := decodeMessage(b, a.keys.PublicKey)
	if err != nil {
		return err
	}
	if m.UserID != user {
		return fmt.Errorf("%w: a message of user %d sent by user %d", ErrAuth, m.UserID, user)
	}
	return a.receive(m)
}

// ReceiveMessage is Receive for an already decoded message; it makes the
// same checks in the same order.
func (a *Aggregator) ReceiveMessage(m *Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrMalformed)
	}
	return a.receive(m)
}

// receive checks and stores m.
func (a *Aggregator) receive(m *Message) error {
	pk := a.keys.PublicKey
	if m.KeyFingerprint != a.fpr {
		return fmt.Errorf("%w: fingerprint %x does not match the round key", ErrForeignKey, m.KeyFingerprint[:8])
	}
	if m.Round != a.keys.Round {
		return fmt.Errorf("%w: message for round %d, aggregating round %d", ErrWrongRound, m.Round, a.keys.Round)
	}
	uk, ok := a.keys.Users[m.UserID]
	if !ok {
		return fmt.Errorf("%w: user %d is not in round %d", ErrUnknownUser, m.UserID, a.keys.Round)
	}
	// Shape before the MAC: the MAC input is built from the fields, and a
	// missing or oversized ciphertext must be refused, not dereferenced.
	if int(m.Dim) != a.keys.Dim || len(m.Indices) != a.keys.Capacity || len(m.Ciphertexts) != a.keys.Capacity {
		return fmt.Errorf("%w: message of dimension %d with %d indices and %d ciphertexts, round has dimension %d and capacity %d",
			ErrMalformed, m.Dim, len(m.Indices), len(m.Ciphertexts), a.keys.Dim, a.keys.Capacity)
	}
	if m.Shards == 0 || m.Shard >= m.Shards || int64(m.Shards) > int64(maxShardsFor(a.keys.Dim, a.keys.Capacity)) {
		return fmt.Errorf("%w: shard %d of %d (at most %d shards in this round)", ErrMalformed, m.Shard, m.Shards, maxShardsFor(a.keys.Dim, a.keys.Capacity))
	}
	for i, ix := range m.Indices {
		if int(ix) >= a.keys.Dim || (i > 0 && ix <= m.Indices[i-1]) {
			return fmt.Errorf("%w: index %d at position %d out of range or out of order", ErrMalformed, ix, i)
		}
	}
	if err := m.checkShape(pk); err != nil {
		return fmt.Errorf("user %d shard %d: %w", m.UserID, m.Shard, err)
	}
	body := m.body(pk)
	mac := computeMAC(uk.MACKey, macInput(body, m.Tag))
	if !hmac.Equal(mac[:], m.MAC[:]) {
		return fmt.Errorf("%w: message from user %d, shard %d", ErrAuth, m.UserID, m.Shard)
	}
	if err := pk.ValidateAll(append(m.Ciphertexts[:len(m.Ciphertexts):len(m.Ciphertexts)], m.Checksum)); err != nil {
		return fmt.Errorf("%w: user %d shard %d: %w", ErrMalformed, m.UserID, m.Shard, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("%w: round %d already summed", ErrClosed, a.keys.Round)
	}
	st := a.users[m.UserID]
	if st == nil {
		st = &userState{shards: m.Shards, msgs: map[uint32]*received{}}
	}
	if st.shards != m.Shards {
		return fmt.Errorf("%w: user %d announced %d shards, message says %d", ErrMalformed, m.UserID, st.shards, m.Shards)
	}
	if _, dup := st.msgs[m.Shard]; dup {
		return fmt.Errorf("%w: user %d shard %d of round %d already received", ErrReplay, m.UserID, m.Shard, m.Round)
	}
	st.msgs[m.Shard] = &received{msg: m, digest: digestBody(body)}
	a.users[m.UserID] = st
	return nil
}

// Sum multiplies the messages of all users with complete contributions
// into φζ(w_sum), with their checksums and tags, and closes the round. It
// fails if any user's shards are incomplete or fewer than MinUsers users
// contributed.
func (a *Aggregator) Sum() (*Aggregate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("%w: round %d already summed", ErrClosed, a.keys.Round)
	}
	var users []uint32
	for id, st := range a.users {
		if uint32(len(st.msgs)) != st.shards {
			return nil, fmt.Errorf("%w: user %d sent %d of %d shards", ErrIncomplete, id, len(st.msgs), st.shards)
		}
		users = append(users, id)
	}
	if len(users) < MinUsers {
		return nil, fmt.Errorf("%w: %d users contributed, need at least %d", ErrTooFewUsers, len(users), MinUsers)
	}
	slices.Sort(users)
	var msgs []*received
	for _, id := range users {
		st := a.users[id]
		for s := uint32(0); s < st.shards; s++ {
			msgs = append(msgs, st.msgs[s])
		}
	}
	agg, err := a.combine(msgs)
	if err != nil {
		return nil, err
	}
	a.closed = true
	return agg, nil
}

// combine multiplies messages (ordered by user and shard) into an
// aggregate: Eq. 4–6 with (φ⁽ⁿ⁾)ᵀ Φ(K) = φK (Eq. 8).
func (a *Aggregator) combine(msgs []*received) (*Aggregate, error) {
	pk := a.keys.PublicKey
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%w: no messages to sum", ErrTooFewUsers)
	}
	enc0, err := a.enc.Encrypt(big.NewInt(0)) // Enc0, computed once (Eq. 5)
	if err != nil {
		return nil, fmt.Errorf("dphe: aggregator: encrypting zero: %w", err)
	}
	// Collect, per φ-position, the ciphertexts placed there; every message
	// that does not cover a position contributes Enc0 there.
	dim := a.keys.Dim
	placed := make([][]*paillier.Ciphertext, dim)
	agg := &Aggregate{KeyFingerprint: a.fpr, Round: a.keys.Round, Ciphertexts: make([]*paillier.Ciphertext, dim)}
	for _, r := range msgs {
		m := r.msg
		inv := a.inv[m.UserID]
		for i, ix := range m.Indices {
			j := inv[ix]
			placed[j] = append(placed[j], m.Ciphertexts[i])
		}
		if agg.Checksum == nil {
			agg.Checksum = m.Checksum
		} else {
			agg.Checksum = pk.Add(agg.Checksum, m.Checksum)
		}
		agg.Contributions = append(agg.Contributions, Contribution{UserID: m.UserID, Shard: m.Shard, Shards: m.Shards, Digest: r.digest, Tag: m.Tag})
	}
	enc0Pow := make([]*paillier.Ciphertext, len(msgs)+1) // enc0Pow[k] = Enc0^k
	enc0Pow[1] = enc0
	for k := 2; k <= len(msgs); k++ {
		enc0Pow[k] = pk.Add(enc0Pow[k-1], enc0)
	}
	parallelRange(dim, func(j int) {
		cs := placed[j]
		if len(cs) == 0 {
			agg.Ciphertexts[j] = enc0 // Enc0 at every position no message covers
			return
		}
		acc := cs[0]
		for _, c := range cs[1:] {
			acc = pk.Add(acc, c)
		}
		if missing := len(msgs) - len(cs); missing > 0 {
			acc = pk.Add(acc, enc0Pow[missing])
		}
		agg.Ciphertexts[j] = acc
	})
	return agg, nil
}
