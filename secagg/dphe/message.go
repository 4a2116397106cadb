package dphe

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/veil-privacy/veil/secagg/paillier"
)

// MessageVersion is the version of the binary encodings of Message and Aggregate.
const MessageVersion = 1

var (
	messageMagic   = [4]byte{'D', 'P', 'H', 'M'}
	aggregateMagic = [4]byte{'D', 'P', 'H', 'A'}
)

// Message is one shard of one user's encrypted update (Algorithm 1, step 4).
type Message struct {
	KeyFingerprint [32]byte
	Round          uint64
	UserID         uint32
	// Shard is this message's index among Shards messages of the user.
	Shard, Shards uint32
	Dim           uint32
	// Indices are the doubly-permuted positions φ⁽ⁿ⁾(φ(k)), strictly increasing.
	Indices []uint32
	// Ciphertexts[i] encrypts the value at Indices[i].
	Ciphertexts []*paillier.Ciphertext
	// MAC is HMAC-SHA256 of the encoding before it, under the user–aggregator key.
	MAC [32]byte
}

// header sizes
const (
	msgHeaderLen = 4 + 1 + 32 + 8 + 4 + 4 + 4 + 4 + 4 + 4
	aggHeaderLen = 4 + 1 + 32 + 8 + 4 + 4
)

// body encodes everything the MAC covers.
func (m *Message) body(pk *paillier.PublicKey) []byte {
	size := pk.CiphertextSize()
	b := make([]byte, 0, msgHeaderLen+len(m.Indices)*(4+size)+32)
	b = append(b, messageMagic[:]...)
	b = append(b, MessageVersion)
	b = append(b, m.KeyFingerprint[:]...)
	b = binary.BigEndian.AppendUint64(b, m.Round)
	b = binary.BigEndian.AppendUint32(b, m.UserID)
	b = binary.BigEndian.AppendUint32(b, m.Shard)
	b = binary.BigEndian.AppendUint32(b, m.Shards)
	b = binary.BigEndian.AppendUint32(b, m.Dim)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Indices)))
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	for _, ix := range m.Indices {
		b = binary.BigEndian.AppendUint32(b, ix)
	}
	for _, c := range m.Ciphertexts {
		b = pk.AppendFixed(b, c)
	}
	return b
}

func computeMAC(key [32]byte, body []byte) [32]byte {
	h := hmac.New(sha256.New, key[:])
	h.Write(body)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Encode returns the message's binary encoding (body followed by the MAC).
func (m *Message) Encode(pk *paillier.PublicKey) ([]byte, error) {
	if len(m.Indices) != len(m.Ciphertexts) {
		return nil, fmt.Errorf("%w: %d indices but %d ciphertexts", ErrMalformed, len(m.Indices), len(m.Ciphertexts))
	}
	b := m.body(pk)
	return append(b, m.MAC[:]...), nil
}

// DecodeMessage parses a message's encoding. It checks structure and that
// every ciphertext lies in [1, n²) and is coprime to n; authentication and
// replay are checked by Aggregator.Receive.
func DecodeMessage(b []byte, pk *paillier.PublicKey) (*Message, error) {
	if len(b) < msgHeaderLen+32 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than a message header", ErrMalformed, len(b))
	}
	if !bytes.Equal(b[:4], messageMagic[:]) {
		return nil, fmt.Errorf("%w: not a DPHE message (bad magic)", ErrMalformed)
	}
	if b[4] != MessageVersion {
		return nil, fmt.Errorf("%w: message version %d, want %d", ErrMalformed, b[4], MessageVersion)
	}
	m := &Message{}
	copy(m.KeyFingerprint[:], b[5:37])
	if m.KeyFingerprint != pk.Fingerprint() {
		return nil, fmt.Errorf("%w: fingerprint %x does not match the round key", ErrForeignKey, m.KeyFingerprint[:8])
	}
	r := b[37:]
	m.Round = binary.BigEndian.Uint64(r)
	m.UserID = binary.BigEndian.Uint32(r[8:])
	m.Shard = binary.BigEndian.Uint32(r[12:])
	m.Shards = binary.BigEndian.Uint32(r[16:])
	m.Dim = binary.BigEndian.Uint32(r[20:])
	count := binary.BigEndian.Uint32(r[24:])
	size := binary.BigEndian.Uint32(r[28:])
	r = r[32:]
	if m.Dim == 0 || m.Dim > MaxDim || count == 0 || count > m.Dim {
		return nil, fmt.Errorf("%w: dimension %d and count %d are inconsistent", ErrMalformed, m.Dim, count)
	}
	if m.Shards == 0 || m.Shard >= m.Shards {
		return nil, fmt.Errorf("%w: shard %d of %d", ErrMalformed, m.Shard, m.Shards)
	}
	if int(size) != pk.CiphertextSize() {
		return nil, fmt.Errorf("%w: ciphertext width %d, key needs %d", ErrMalformed, size, pk.CiphertextSize())
	}
	want := uint64(count)*(4+uint64(size)) + 32
	if uint64(len(r)) != want {
		return nil, fmt.Errorf("%w: body of %d bytes, want %d (truncated or padded)", ErrMalformed, len(r), want)
	}
	m.Indices = make([]uint32, count)
	for i := range m.Indices {
		m.Indices[i] = binary.BigEndian.Uint32(r[4*i:])
		if m.Indices[i] >= m.Dim || (i > 0 && m.Indices[i] <= m.Indices[i-1]) {
			return nil, fmt.Errorf("%w: index %d at position %d out of range or out of order", ErrMalformed, m.Indices[i], i)
		}
	}
	r = r[4*count:]
	m.Ciphertexts = make([]*paillier.Ciphertext, count)
	for i := range m.Ciphertexts {
		c, err := pk.ParseFixed(r[int(size)*i : int(size)*(i+1)])
		if err != nil {
			return nil, fmt.Errorf("%w: ciphertext %d: %w", ErrMalformed, i, err)
		}
		m.Ciphertexts[i] = c
	}
	if err := pk.ValidateAll(m.Ciphertexts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	copy(m.MAC[:], r[int(size)*int(count):])
	return m, nil
}

// Aggregate is the permuted encrypted sum φζ(w_sum) the aggregator sends
// to the key generator (Algorithm 1, step 6).
type Aggregate struct {
	KeyFingerprint [32]byte
	Round          uint64
	// Users are the users whose complete updates the sum contains, increasing.
	Users []uint32
	// Ciphertexts[j] encrypts the sum at φ-position j.
	Ciphertexts []*paillier.Ciphertext
}

// Encode returns the aggregate's binary encoding.
func (a *Aggregate) Encode(pk *paillier.PublicKey) []byte {
	size := pk.CiphertextSize()
	b := make([]byte, 0, aggHeaderLen+4*len(a.Users)+4+len(a.Ciphertexts)*size)
	b = append(b, aggregateMagic[:]...)
	b = append(b, MessageVersion)
	b = append(b, a.KeyFingerprint[:]...)
	b = binary.BigEndian.AppendUint64(b, a.Round)
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.Ciphertexts)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.Users)))
	for _, u := range a.Users {
		b = binary.BigEndian.AppendUint32(b, u)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	for _, c := range a.Ciphertexts {
		b = pk.AppendFixed(b, c)
	}
	return b
}

// DecodeAggregate parses an aggregate's encoding and validates every
// ciphertext against the key (range and coprimality).
func DecodeAggregate(b []byte, pk *paillier.PublicKey) (*Aggregate, error) {
	if len(b) < aggHeaderLen {
		return nil, fmt.Errorf("%w: %d bytes is shorter than an aggregate header", ErrMalformed, len(b))
	}
	if !bytes.Equal(b[:4], aggregateMagic[:]) {
		return nil, fmt.Errorf("%w: not a DPHE aggregate (bad magic)", ErrMalformed)
	}
	if b[4] != MessageVersion {
		return nil, fmt.Errorf("%w: aggregate version %d, want %d", ErrMalformed, b[4], MessageVersion)
	}
	a := &Aggregate{}
	copy(a.KeyFingerprint[:], b[5:37])
	if a.KeyFingerprint != pk.Fingerprint() {
		return nil, fmt.Errorf("%w: aggregate fingerprint %x does not match the key", ErrForeignKey, a.KeyFingerprint[:8])
	}
	r := b[37:]
	a.Round = binary.BigEndian.Uint64(r)
	dim := binary.BigEndian.Uint32(r[8:])
	nu := binary.BigEndian.Uint32(r[12:])
	r = r[16:]
	if dim == 0 || dim > MaxDim {
		return nil, fmt.Errorf("%w: aggregate dimension %d", ErrMalformed, dim)
	}
	if uint64(len(r)) < 4*uint64(nu)+4 {
		return nil, fmt.Errorf("%w: aggregate user list truncated", ErrMalformed)
	}
	a.Users = make([]uint32, nu)
	for i := range a.Users {
		a.Users[i] = binary.BigEndian.Uint32(r[4*i:])
	}
	r = r[4*nu:]
	size := binary.BigEndian.Uint32(r)
	r = r[4:]
	if int(size) != pk.CiphertextSize() {
		return nil, fmt.Errorf("%w: ciphertext width %d, key needs %d", ErrMalformed, size, pk.CiphertextSize())
	}
	if uint64(len(r)) != uint64(dim)*uint64(size) {
		return nil, fmt.Errorf("%w: aggregate body of %d bytes, want %d (truncated or padded)", ErrMalformed, len(r), uint64(dim)*uint64(size))
	}
	a.Ciphertexts = make([]*paillier.Ciphertext, dim)
	for i := range a.Ciphertexts {
		c, err := pk.ParseFixed(r[int(size)*i : int(size)*(i+1)])
		if err != nil {
			return nil, fmt.Errorf("%w: ciphertext %d: %w", ErrMalformed, i, err)
		}
		a.Ciphertexts[i] = c
	}
	if err := pk.ValidateAll(a.Ciphertexts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return a, nil
}
