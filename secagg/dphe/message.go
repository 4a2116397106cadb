package dphe

import (
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"fmt"

	"github.com/veil-privacy/veil/internal/digest"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// MessageVersion is the version of the binary encodings of Message and
// Aggregate. Version 2 added the checksum ciphertext and the key
// generator's tag to messages, and the contributions and the checksum to
// aggregates.
const MessageVersion = 2

var (
	messageMagic   = [4]byte{'D', 'P', 'H', 'M'}
	aggregateMagic = [4]byte{'D', 'P', 'H', 'A'}
	// tagContext separates contribution tags from every other use of HMAC.
	tagContext = []byte("veil/dphe/contribution/v2\x00")
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
	// Checksum encrypts this shard's share of the user's checksum, which
	// lets the key generator check that an aggregate is the sum of the
	// messages it claims to contain (see the package documentation).
	Checksum *paillier.Ciphertext
	// Tag is HMAC-SHA256 under the user–key-generator key of the round,
	// the user, the shard and the SHA-256 of the body; the aggregator
	// forwards it to the key generator.
	Tag [32]byte
	// MAC is HMAC-SHA256 of the encoding before it (body and Tag) under the
	// user–aggregator key.
	MAC [32]byte
}

// header sizes
const (
	msgHeaderLen     = 4 + 1 + 32 + 8 + 4 + 4 + 4 + 4 + 4 + 4
	aggHeaderLen     = 4 + 1 + 32 + 8 + 4 + 4
	contributionLen  = 4 + 4 + 4 + 32 + 32
	messageTailBytes = 32 + 32 // Tag and MAC
)

// checkShape reports whether the message can be encoded under pk: as many
// indices as ciphertexts, no nil ciphertext, and every ciphertext in
// [1, n²). It reads no more than the values' sizes and does no modular
// arithmetic, so it runs before authentication.
func (m *Message) checkShape(pk *paillier.PublicKey) error {
	if len(m.Indices) != len(m.Ciphertexts) {
		return fmt.Errorf("%w: %d indices but %d ciphertexts", ErrMalformed, len(m.Indices), len(m.Ciphertexts))
	}
	for i, c := range m.Ciphertexts {
		if err := inRange(pk, c); err != nil {
			return fmt.Errorf("%w: ciphertext %d: %w", ErrMalformed, i, err)
		}
	}
	if err := inRange(pk, m.Checksum); err != nil {
		return fmt.Errorf("%w: checksum: %w", ErrMalformed, err)
	}
	return nil
}

// inRange checks that c is present and lies in [1, n²), without the
// coprimality test (which ValidateAll batches).
func inRange(pk *paillier.PublicKey, c *paillier.Ciphertext) error { return pk.CheckRange(c) }

// body encodes everything the tag's digest covers. The message must have
// passed checkShape.
func (m *Message) body(pk *paillier.PublicKey) []byte {
	size := pk.CiphertextSize()
	b := make([]byte, 0, msgHeaderLen+len(m.Indices)*(4+size)+size+messageTailBytes)
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
	return pk.AppendFixed(b, m.Checksum)
}

// macInput is the body followed by the tag: what the aggregator's MAC covers.
func macInput(body []byte, tag [32]byte) []byte { return append(body, tag[:]...) }

func computeMAC(key [32]byte, data []byte) [32]byte {
	h := hmac.New(digest.New, key[:])
	h.Write(data)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// contributionTag is the tag a user gives the key generator for one
// message: HMAC-SHA256 under their shared key of a context string, the key
// fingerprint, round, user, shard, shard count and the SHA-256 of the body.
func contributionTag(key [32]byte, fpr [32]byte, round uint64, user, shard, shards uint32, digest [32]byte) [32]byte {
	b := make([]byte, 0, len(tagContext)+32+8+12+32)
	b = append(b, tagContext...)
	b = append(b, fpr[:]...)
	b = binary.BigEndian.AppendUint64(b, round)
	b = binary.BigEndian.AppendUint32(b, user)
	b = binary.BigEndian.AppendUint32(b, shard)
	b = binary.BigEndian.AppendUint32(b, shards)
	b = append(b, digest[:]...)
	return computeMAC(key, b)
}

// Encode returns the message's binary encoding (body, tag, MAC).
func (m *Message) Encode(pk *paillier.PublicKey) ([]byte, error) {
	if err := m.checkShape(pk); err != nil {
		return nil, err
	}
	b := macInput(m.body(pk), m.Tag)
	return append(b, m.MAC[:]...), nil
}

// DecodeMessage parses a message's encoding. It checks structure and that
// every ciphertext lies in [1, n²) and is coprime to n; authentication and
// replay are checked by Aggregator.Receive.
func DecodeMessage(b []byte, pk *paillier.PublicKey) (*Message, error) {
	m, err := decodeMessage(b, pk)
	if err != nil {
		return nil, err
	}
	if err := pk.ValidateAll(append(m.Ciphertexts[:len(m.Ciphertexts):len(m.Ciphertexts)], m.Checksum)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return m, nil
}

// decodeMessage is DecodeMessage without the coprimality test, so that
// Aggregator.Receive can authenticate before that work.
func decodeMessage(b []byte, pk *paillier.PublicKey) (*Message, error) {
	if len(b) < msgHeaderLen+messageTailBytes {
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
	want := uint64(count)*(4+uint64(size)) + uint64(size) + messageTailBytes
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
		c, err := pk.ParseFixed(r[:size])
		if err != nil {
			return nil, fmt.Errorf("%w: ciphertext %d: %w", ErrMalformed, i, err)
		}
		m.Ciphertexts[i] = c
		r = r[size:]
	}
	c, err := pk.ParseFixed(r[:size])
	if err != nil {
		return nil, fmt.Errorf("%w: checksum: %w", ErrMalformed, err)
	}
	m.Checksum = c
	r = r[size:]
	copy(m.Tag[:], r[:32])
	copy(m.MAC[:], r[32:64])
	return m, nil
}

// Contribution names one message an aggregate contains, with the tag its
// user gave the key generator and the SHA-256 of the message body the tag
// covers. Contributions reveal no plaintext: the key generator never sees
// the messages themselves.
type Contribution struct {
	UserID        uint32
	Shard, Shards uint32
	Digest        [32]byte
	Tag           [32]byte
}

// Aggregate is the permuted encrypted sum φζ(w_sum) the aggregator sends
// to the key generator (Algorithm 1, step 6), with what the key generator
// needs to check it.
type Aggregate struct {
	KeyFingerprint [32]byte
	Round          uint64
	// Contributions lists every message the sum contains, ordered by user
	// and then shard.
	Contributions []Contribution
	// Checksum is the product of the messages' checksum ciphertexts.
	Checksum *paillier.Ciphertext
	// Ciphertexts[j] encrypts the sum at φ-position j.
	Ciphertexts []*paillier.Ciphertext
}

// Users returns the distinct users of the contributions, in order.
func (a *Aggregate) Users() []uint32 {
	var out []uint32
	for _, c := range a.Contributions {
		if len(out) == 0 || out[len(out)-1] != c.UserID {
			out = append(out, c.UserID)
		}
	}
	return out
}

// checkShape checks that every ciphertext is present and in [1, n²).
func (a *Aggregate) checkShape(pk *paillier.PublicKey) error {
	for i, c := range a.Ciphertexts {
		if err := inRange(pk, c); err != nil {
			return fmt.Errorf("%w: aggregate ciphertext %d: %w", ErrMalformed, i, err)
		}
	}
	if err := inRange(pk, a.Checksum); err != nil {
		return fmt.Errorf("%w: aggregate checksum: %w", ErrMalformed, err)
	}
	return nil
}

// Encode returns the aggregate's binary encoding.
func (a *Aggregate) Encode(pk *paillier.PublicKey) ([]byte, error) {
	if err := a.checkShape(pk); err != nil {
		return nil, err
	}
	size := pk.CiphertextSize()
	b := make([]byte, 0, aggHeaderLen+contributionLen*len(a.Contributions)+4+(len(a.Ciphertexts)+1)*size)
	b = append(b, aggregateMagic[:]...)
	b = append(b, MessageVersion)
	b = append(b, a.KeyFingerprint[:]...)
	b = binary.BigEndian.AppendUint64(b, a.Round)
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.Ciphertexts)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.Contributions)))
	for _, c := range a.Contributions {
		b = binary.BigEndian.AppendUint32(b, c.UserID)
		b = binary.BigEndian.AppendUint32(b, c.Shard)
		b = binary.BigEndian.AppendUint32(b, c.Shards)
		b = append(b, c.Digest[:]...)
		b = append(b, c.Tag[:]...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	b = pk.AppendFixed(b, a.Checksum)
	for _, c := range a.Ciphertexts {
		b = pk.AppendFixed(b, c)
	}
	return b, nil
}

// DecodeAggregate parses an aggregate's encoding and validates every
// ciphertext against the key (range and coprimality). Whether the
// contributions are authentic is for KeyGenerator.Decrypt to check.
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
	nc := binary.BigEndian.Uint32(r[12:])
	r = r[16:]
	if dim == 0 || dim > MaxDim {
		return nil, fmt.Errorf("%w: aggregate dimension %d", ErrMalformed, dim)
	}
	if uint64(len(r)) < contributionLen*uint64(nc)+4 {
		return nil, fmt.Errorf("%w: aggregate contribution list truncated", ErrMalformed)
	}
	a.Contributions = make([]Contribution, nc)
	for i := range a.Contributions {
		c := &a.Contributions[i]
		c.UserID = binary.BigEndian.Uint32(r)
		c.Shard = binary.BigEndian.Uint32(r[4:])
		c.Shards = binary.BigEndian.Uint32(r[8:])
		copy(c.Digest[:], r[12:44])
		copy(c.Tag[:], r[44:76])
		r = r[contributionLen:]
	}
	size := binary.BigEndian.Uint32(r)
	r = r[4:]
	if int(size) != pk.CiphertextSize() {
		return nil, fmt.Errorf("%w: ciphertext width %d, key needs %d", ErrMalformed, size, pk.CiphertextSize())
	}
	if want := (uint64(dim) + 1) * uint64(size); uint64(len(r)) != want {
		return nil, fmt.Errorf("%w: aggregate body of %d bytes, want %d (truncated or padded)", ErrMalformed, len(r), want)
	}
	parse := func(what string) (*paillier.Ciphertext, error) {
		c, err := pk.ParseFixed(r[:size])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, what, err)
		}
		r = r[size:]
		return c, nil
	}
	var err error
	if a.Checksum, err = parse("checksum"); err != nil {
		return nil, err
	}
	a.Ciphertexts = make([]*paillier.Ciphertext, dim)
	for i := range a.Ciphertexts {
		if a.Ciphertexts[i], err = parse(fmt.Sprintf("ciphertext %d", i)); err != nil {
			return nil, err
		}
	}
	if err := pk.ValidateAll(append(a.Ciphertexts[:dim:dim], a.Checksum)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return a, nil
}

// digestBody returns the SHA-256 of a message body.
func digestBody(body []byte) [32]byte { return digest.Sum256(body) }
