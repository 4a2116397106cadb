package masking

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire formats. Every message is a tag byte, the 32-byte round id, then
// fixed-width big-endian fields; lists carry a 32-bit count checked
// against the bytes that remain before anything is allocated, and a
// decoder refuses trailing bytes, so each message has exactly one
// encoding (the fuzz tests check decode∘encode is the identity).

const (
	tagParams   byte = 0x51
	tagAdvert   byte = 0x52
	tagAdverts  byte = 0x53
	tagShare    byte = 0x54
	tagShares   byte = 0x55
	tagMasked   byte = 0x56
	tagRequest  byte = 0x57
	tagResponse byte = 0x58
)

// sharePlainSize is the plaintext of an encrypted share: from, to, the
// self-mask seed's share and the mask key's share.
const sharePlainSize = 4 + 4 + 2*8*secretChunks

// advertSize is an advertisement's encoding after the header, without its
// signature: sender, two keys, the parameters' digest, the signature's
// length.
const advertSize = 4 + 32 + 32 + 32 + 4

// ShareCiphertextSize is the size of an encrypted share (ChaCha20-Poly1305).
const ShareCiphertextSize = sharePlainSize + 16

// KeyAdvert is a client's signed advertisement of its two X25519 public
// keys for a round: one encrypts the shares it receives, the other agrees
// its pairwise masks.
type KeyAdvert struct {
	RoundID [32]byte
	From    uint32
	EncKey  [32]byte
	MaskKey [32]byte
	// Params is the digest of the round's parameters the sender took part
	// under (Params.Digest, its Context included). It is signed; a
	// receiver compares it with its own digest first, so that a
	// coordinator that gave the two clients different configurations is
	// named as such, and then checks the signature over its own digest,
	// so an altered Params field only turns the refusal into a bad
	// signature.
	Params    [32]byte
	Signature []byte
}

// signedBytes is what the advertisement's signature covers: the label,
// the digest of the round's parameters (so every honest party that
// accepts the advertisement has the same roster, graph, threshold,
// length and Context: a coordinator cannot give two clients different
// parameters or configurations), the round id, the sender and its keys.
func (a *KeyAdvert) signedBytes(params *[32]byte) []byte {
	b := append([]byte(labelAdvert), params[:]...)
	b = append(b, a.RoundID[:]...)
	b = binary.BigEndian.AppendUint32(b, a.From)
	b = append(b, a.EncKey[:]...)
	return append(b, a.MaskKey[:]...)
}

// EncryptedShare carries, from one client to a neighbour through the
// coordinator, that neighbour's shares of the sender's self-mask seed and
// mask key, encrypted and authenticated under a key only the two agree.
type EncryptedShare struct {
	RoundID    [32]byte
	From, To   uint32
	Ciphertext [ShareCiphertextSize]byte
}

// MaskedInput is a client's input plus its masks, modulo 2^32.
type MaskedInput struct {
	RoundID [32]byte
	From    uint32
	Values  []uint32
}

// UnmaskRequest is the coordinator's request to a surviving client: the
// clients whose masked inputs arrived (Survivors) and the clients that
// shared keys but whose inputs did not arrive (Dropped).
type UnmaskRequest struct {
	RoundID   [32]byte
	Survivors []uint32
	Dropped   []uint32
}

// ShareOf is one share of a secret of client Owner.
type ShareOf struct {
	Owner uint32
	Value [secretChunks]uint64
}

// UnmaskResponse is a client's answer: its shares of the self-mask seeds
// of surviving neighbours (and itself) and of the mask keys of dropped
// neighbours. A client never sends both kinds of share for one client.
type UnmaskResponse struct {
	RoundID    [32]byte
	From       uint32
	SelfShares []ShareOf
	KeyShares  []ShareOf
}

type writer struct{ b []byte }

func newWriter(tag byte, round *[32]byte, size int) *writer {
	w := &writer{b: make([]byte, 0, 33+size)}
	w.b = append(w.b, tag)
	w.b = append(w.b, round[:]...)
	return w
}
func (w *writer) u32(v uint32)   { w.b = binary.BigEndian.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64)   { w.b = binary.BigEndian.AppendUint64(w.b, v) }
func (w *writer) bytes(p []byte) { w.b = append(w.b, p...) }
func (w *writer) ids(v []uint32) {
	w.u32(uint32(len(v)))
	for _, x := range v {
		w.u32(x)
	}
}

type reader struct {
	b    []byte
	what string
	err  error
}

func newReader(b []byte, tag byte, what string, round *[32]byte) *reader {
	r := &reader{b: b, what: what}
	if len(b) < 33 {
		r.fail("%d bytes, shorter than the 33-byte header", len(b))
		return r
	}
	if b[0] != tag {
		r.fail("tag 0x%02x, want 0x%02x", b[0], tag)
		return r
	}
	copy(round[:], b[1:33])
	r.b = b[33:]
	return r
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("masking: malformed %s: %s", r.what, fmt.Sprintf(format, args...))
	}
}

func (r *reader) take(n int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.fail("truncated %s (%d bytes left, need %d)", field, len(r.b), n)
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u32(field string) uint32 {
	p := r.take(4, field)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

func (r *reader) u64(field string) uint64 {
	p := r.take(8, field)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

// count reads a list length and checks that the rest holds that many items
// of itemSize bytes (and at most limit items).
func (r *reader) count(field string, itemSize, limit int) int {
	c := r.u32(field + " count")
	if r.err != nil {
		return 0
	}
	if int64(c) > int64(limit) {
		r.fail("%s count %d exceeds the limit %d", field, c, limit)
		return 0
	}
	if int64(c)*int64(itemSize) > int64(len(r.b)) {
		r.fail("%s count %d needs %d bytes, %d left", field, c, int64(c)*int64(itemSize), len(r.b))
		return 0
	}
	return int(c)
}

func (r *reader) ids(field string, limit int) []uint32 {
	n := r.count(field, 4, limit)
	if r.err != nil {
		return nil
	}
	v := make([]uint32, n)
	for i := range v {
		v[i] = r.u32(field)
	}
	return v
}

func (r *reader) share(field string) [secretChunks]uint64 {
	var s [secretChunks]uint64
	for i := range s {
		s[i] = r.u64(field)
		if r.err == nil && s[i] >= fieldP {
			r.fail("%s holds %d, not an element of GF(2^61 − 1)", field, s[i])
		}
	}
	return s
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

// MarshalBinary encodes the parameters.
func (p *Params) MarshalBinary() ([]byte, error) {
	if len(p.Roster) > MaxClients {
		return nil, fmt.Errorf("masking: roster of %d exceeds %d", len(p.Roster), MaxClients)
	}
	w := newWriter(tagParams, &p.RoundID, 76+4*len(p.Roster))
	w.u32(uint32(p.Degree))
	w.u32(uint32(p.Threshold))
	w.u32(uint32(p.Length))
	w.bytes(p.GraphSeed[:])
	w.bytes(p.Context[:])
	w.ids(p.Roster)
	return w.b, nil
}

// UnmarshalBinary decodes parameters; it does not validate them (Validate
// does, and NewClient calls it).
func (p *Params) UnmarshalBinary(b []byte) error {
	var q Params
	r := newReader(b, tagParams, "round parameters", &q.RoundID)
	deg, thr, length := r.u32("degree"), r.u32("threshold"), r.u32("length")
	if r.err == nil && (deg > MaxClients || thr > MaxClients+1 || length > MaxLength) {
		r.fail("degree %d, threshold %d or length %d out of range", deg, thr, length)
	}
	copy(q.GraphSeed[:], r.take(32, "graph seed"))
	copy(q.Context[:], r.take(32, "context"))
	q.Roster = r.ids("roster", MaxClients)
	if err := r.done(); err != nil {
		return err
	}
	q.Degree, q.Threshold, q.Length = int(deg), int(thr), int(length)
	*p = q
	return nil
}

func (a *KeyAdvert) write(w *writer) {
	w.u32(a.From)
	w.bytes(a.EncKey[:])
	w.bytes(a.MaskKey[:])
	w.bytes(a.Params[:])
	w.u32(uint32(len(a.Signature)))
	w.bytes(a.Signature)
}

func (a *KeyAdvert) read(r *reader) {
	a.From = r.u32("sender")
	copy(a.EncKey[:], r.take(32, "encryption key"))
	copy(a.MaskKey[:], r.take(32, "mask key"))
	copy(a.Params[:], r.take(32, "parameters digest"))
	n := r.count("signature", 1, maxSignature)
	if r.err == nil {
		a.Signature = append([]byte(nil), r.take(n, "signature")...)
	}
}

// MarshalBinary encodes the advertisement.
func (a *KeyAdvert) MarshalBinary() ([]byte, error) {
	if len(a.Signature) > maxSignature {
		return nil, fmt.Errorf("masking: signature of %d bytes exceeds %d", len(a.Signature), maxSignature)
	}
	w := newWriter(tagAdvert, &a.RoundID, advertSize+len(a.Signature))
	a.write(w)
	return w.b, nil
}

// UnmarshalBinary decodes an advertisement (its signature is checked by
// the receiver, not here).
func (a *KeyAdvert) UnmarshalBinary(b []byte) error {
	var q KeyAdvert
	r := newReader(b, tagAdvert, "key advertisement", &q.RoundID)
	q.read(r)
	if err := r.done(); err != nil {
		return err
	}
	*a = q
	return nil
}

// EncodeAdverts encodes the advertisements the coordinator relays to one
// client; all must belong to the same round.
func EncodeAdverts(round [32]byte, ads []KeyAdvert) ([]byte, error) {
	w := newWriter(tagAdverts, &round, 4+len(ads)*(advertSize+72))
	w.u32(uint32(len(ads)))
	for i := range ads {
		if ads[i].RoundID != round {
			return nil, errors.New("masking: advertisements of different rounds in one bundle")
		}
		if len(ads[i].Signature) > maxSignature {
			return nil, fmt.Errorf("masking: signature of %d bytes exceeds %d", len(ads[i].Signature), maxSignature)
		}
		ads[i].write(w)
	}
	return w.b, nil
}

// DecodeAdverts decodes a bundle of advertisements.
func DecodeAdverts(b []byte) (round [32]byte, ads []KeyAdvert, err error) {
	r := newReader(b, tagAdverts, "advertisement bundle", &round)
	n := r.count("advertisement", advertSize, MaxClients)
	if r.err == nil {
		ads = make([]KeyAdvert, n)
		for i := range ads {
			ads[i].RoundID = round
			ads[i].read(r)
		}
	}
	if err := r.done(); err != nil {
		return round, nil, err
	}
	return round, ads, nil
}

func (s *EncryptedShare) write(w *writer) {
	w.u32(s.From)
	w.u32(s.To)
	w.bytes(s.Ciphertext[:])
}

func (s *EncryptedShare) read(r *reader) {
	s.From = r.u32("sender")
	s.To = r.u32("recipient")
	copy(s.Ciphertext[:], r.take(ShareCiphertextSize, "ciphertext"))
}

// MarshalBinary encodes the encrypted share.
func (s *EncryptedShare) MarshalBinary() ([]byte, error) {
	w := newWriter(tagShare, &s.RoundID, 8+ShareCiphertextSize)
	s.write(w)
	return w.b, nil
}

// UnmarshalBinary decodes an encrypted share.
func (s *EncryptedShare) UnmarshalBinary(b []byte) error {
	var q EncryptedShare
	r := newReader(b, tagShare, "encrypted share", &q.RoundID)
	q.read(r)
	if err := r.done(); err != nil {
		return err
	}
	*s = q
	return nil
}

// EncodeShares encodes a list of encrypted shares of one round (a
// client's shares for its neighbours, or those relayed to one client).
func EncodeShares(round [32]byte, shares []EncryptedShare) ([]byte, error) {
	w := newWriter(tagShares, &round, 4+len(shares)*(8+ShareCiphertextSize))
	w.u32(uint32(len(shares)))
	for i := range shares {
		if shares[i].RoundID != round {
			return nil, errors.New("masking: shares of different rounds in one bundle")
		}
		shares[i].write(w)
	}
	return w.b, nil
}

// DecodeShares decodes a list of encrypted shares.
func DecodeShares(b []byte) (round [32]byte, shares []EncryptedShare, err error) {
	r := newReader(b, tagShares, "share bundle", &round)
	n := r.count("share", 8+ShareCiphertextSize, MaxClients)
	if r.err == nil {
		shares = make([]EncryptedShare, n)
		for i := range shares {
			shares[i].RoundID = round
			shares[i].read(r)
		}
	}
	if err := r.done(); err != nil {
		return round, nil, err
	}
	return round, shares, nil
}

// MarshalBinary encodes the masked input.
func (m *MaskedInput) MarshalBinary() ([]byte, error) {
	if len(m.Values) > MaxLength {
		return nil, fmt.Errorf("masking: %d values exceed %d", len(m.Values), MaxLength)
	}
	w := newWriter(tagMasked, &m.RoundID, 8+4*len(m.Values))
	w.u32(m.From)
	w.u32(uint32(len(m.Values)))
	for _, v := range m.Values {
		w.u32(v)
	}
	return w.b, nil
}

// UnmarshalBinary decodes a masked input.
func (m *MaskedInput) UnmarshalBinary(b []byte) error {
	var q MaskedInput
	r := newReader(b, tagMasked, "masked input", &q.RoundID)
	q.From = r.u32("sender")
	q.Values = r.ids("values", MaxLength)
	if err := r.done(); err != nil {
		return err
	}
	*m = q
	return nil
}

// MarshalBinary encodes the unmasking request.
func (q *UnmaskRequest) MarshalBinary() ([]byte, error) {
	if len(q.Survivors) > MaxClients || len(q.Dropped) > MaxClients {
		return nil, errors.New("masking: unmasking request lists more clients than a round has")
	}
	w := newWriter(tagRequest, &q.RoundID, 8+4*(len(q.Survivors)+len(q.Dropped)))
	w.ids(q.Survivors)
	w.ids(q.Dropped)
	return w.b, nil
}

// UnmarshalBinary decodes an unmasking request.
func (q *UnmaskRequest) UnmarshalBinary(b []byte) error {
	var v UnmaskRequest
	r := newReader(b, tagRequest, "unmasking request", &v.RoundID)
	v.Survivors = r.ids("survivor", MaxClients)
	v.Dropped = r.ids("dropped client", MaxClients)
	if err := r.done(); err != nil {
		return err
	}
	*q = v
	return nil
}

const shareOfSize = 4 + 8*secretChunks

func writeShares(w *writer, s []ShareOf) {
	w.u32(uint32(len(s)))
	for _, x := range s {
		w.u32(x.Owner)
		for _, v := range x.Value {
			w.u64(v)
		}
	}
}

func readShares(r *reader, field string) []ShareOf {
	n := r.count(field, shareOfSize, MaxClients)
	if r.err != nil {
		return nil
	}
	s := make([]ShareOf, n)
	for i := range s {
		s[i].Owner = r.u32(field + " owner")
		s[i].Value = r.share(field)
	}
	return s
}

// MarshalBinary encodes the unmasking response.
func (u *UnmaskResponse) MarshalBinary() ([]byte, error) {
	if len(u.SelfShares) > MaxClients || len(u.KeyShares) > MaxClients {
		return nil, errors.New("masking: unmasking response holds more shares than a round has clients")
	}
	w := newWriter(tagResponse, &u.RoundID, 12+shareOfSize*(len(u.SelfShares)+len(u.KeyShares)))
	w.u32(u.From)
	writeShares(w, u.SelfShares)
	writeShares(w, u.KeyShares)
	return w.b, nil
}

// UnmarshalBinary decodes an unmasking response.
func (u *UnmaskResponse) UnmarshalBinary(b []byte) error {
	var v UnmaskResponse
	r := newReader(b, tagResponse, "unmasking response", &v.RoundID)
	v.From = r.u32("sender")
	v.SelfShares = readShares(r, "self-mask seed share")
	v.KeyShares = readShares(r, "mask key share")
	if err := r.done(); err != nil {
		return err
	}
	*u = v
	return nil
}
