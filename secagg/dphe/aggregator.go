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
	msgs   map[uint32]*Message
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
func (a *Aggregator) Receive(b []byte) error {
	m, err := DecodeMessage(b, a.keys.PublicKey)
	if err != nil {
		return err
	}
	return a.receive(m, true)
}

// ReceiveMessage is Receive for an already decoded message.
func (a *Aggregator) ReceiveMessage(m *Message) error { return a.receive(m, false) }

// receive checks and stores m; validated says DecodeMessage already checked
// its ciphertexts.
func (a *Aggregator) receive(m *Message, validated bool) error {
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
	mac := computeMAC(uk.MACKey, m.body(a.keys.PublicKey))
	if !hmac.Equal(mac[:], m.MAC[:]) {
		return fmt.Errorf("%w: message from user %d, shard %d", ErrAuth, m.UserID, m.Shard)
	}
	if int(m.Dim) != a.keys.Dim || len(m.Indices) != a.keys.Capacity || len(m.Ciphertexts) != a.keys.Capacity {
		return fmt.Errorf("%w: message of dimension %d with %d entries, round has dimension %d and capacity %d",
			ErrMalformed, m.Dim, len(m.Indices), a.keys.Dim, a.keys.Capacity)
	}
	for i, ix := range m.Indices {
		if int(ix) >= a.keys.Dim || (i > 0 && ix <= m.Indices[i-1]) {
			return fmt.Errorf("%w: index %d at position %d out of range or out of order", ErrMalformed, ix, i)
		}
	}
	if !validated {
		if err := a.keys.PublicKey.ValidateAll(m.Ciphertexts); err != nil {
			return fmt.Errorf("%w: user %d shard %d: %w", ErrMalformed, m.UserID, m.Shard, err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("%w: round %d already summed", ErrClosed, a.keys.Round)
	}
	st := a.users[m.UserID]
	if st == nil {
		st = &userState{shards: m.Shards, msgs: map[uint32]*Message{}}
	}
	if st.shards != m.Shards {
		return fmt.Errorf("%w: user %d announced %d shards, message says %d", ErrMalformed, m.UserID, st.shards, m.Shards)
	}
	if _, dup := st.msgs[m.Shard]; dup {
		return fmt.Errorf("%w: user %d shard %d of round %d already received", ErrReplay, m.UserID, m.Shard, m.Round)
	}
	st.msgs[m.Shard] = m
	a.users[m.UserID] = st
	return nil
}

// Sum multiplies the messages of all users with complete contributions
// into φζ(w_sum) and closes the round. It fails if any user's shards are
// incomplete or fewer than MinUsers users contributed.
func (a *Aggregator) Sum() (*Aggregate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("%w: round %d already summed", ErrClosed, a.keys.Round)
	}
	var users []uint32
	var msgs []*Message
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
	for _, id := range users {
		st := a.users[id]
		for s := uint32(0); s < st.shards; s++ {
			msgs = append(msgs, st.msgs[s])
		}
	}
	pk := a.keys.PublicKey
	enc0, err := a.enc.Encrypt(big.NewInt(0)) // Enc0, computed once (Eq. 5)
	if err != nil {
		return nil, fmt.Errorf("dphe: aggregator: encrypting zero: %w", err)
	}
	// Eq. 4–6 with (φ⁽ⁿ⁾)ᵀ Φ(K) = φK (Eq. 8): collect, per φ-position, the
	// ciphertexts placed there; every message that does not cover a
	// position contributes Enc0 there.
	dim := a.keys.Dim
	placed := make([][]*paillier.Ciphertext, dim)
	for _, m := range msgs {
		inv := a.inv[m.UserID]
		for i, ix := range m.Indices {
			j := inv[ix]
			placed[j] = append(placed[j], m.Ciphertexts[i])
		}
	}
	enc0Pow := make([]*paillier.Ciphertext, len(msgs)+1) // enc0Pow[k] = Enc0^k
	enc0Pow[1] = enc0
	for k := 2; k <= len(msgs); k++ {
		enc0Pow[k] = pk.Add(enc0Pow[k-1], enc0)
	}
	out := make([]*paillier.Ciphertext, dim)
	parallelRange(dim, func(j int) {
		cs := placed[j]
		if len(cs) == 0 {
			out[j] = enc0 // Enc0 at every position no message covers
			return
		}
		acc := cs[0]
		for _, c := range cs[1:] {
			acc = pk.Add(acc, c)
		}
		if missing := len(msgs) - len(cs); missing > 0 {
			acc = pk.Add(acc, enc0Pow[missing])
		}
		out[j] = acc
	})
	a.closed = true
	return &Aggregate{KeyFingerprint: a.fpr, Round: a.keys.Round, Users: users, Ciphertexts: out}, nil
}
