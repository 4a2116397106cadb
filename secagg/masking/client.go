package masking

import (
	"crypto"
	"crypto/ecdh"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"golang.org/x/crypto/chacha20poly1305"
)

// ClientConfig configures a client for one round.
type ClientConfig struct {
	// ID is the client's id in the roster.
	ID uint32
	// Signer is the client's long-term key (its mTLS certificate's key in
	// the federation); it signs the key advertisement.
	Signer crypto.Signer
	// Keys authenticates the neighbours' advertisements.
	Keys KeyDirectory
	// MinThreshold is the owner's policy: a round whose threshold is below
	// it is refused (0: only the rule of Params.Validate).
	MinThreshold int
}

type clientPhase int

const (
	phaseAdvertised clientPhase = iota + 1
	phaseShared
	phaseMasked
	phaseDone
)

type peerKeys struct{ enc, mask *ecdh.PublicKey }

// heldShares are one holder's shares of a client's two secrets.
type heldShares struct{ self, key fieldShare }

// Client is one client's side of a round: a state machine over messages,
// without any network. Each method moves it one step forward; a method
// that refuses its input returns an error and leaves the client as it was.
type Client struct {
	cfg    ClientConfig
	p      Params
	g      *Graph
	digest [32]byte // of p, signed in every advertisement
	phase  clientPhase

	advert  KeyAdvert
	encKey  *ecdh.PrivateKey
	maskKey *ecdh.PrivateKey
	peers   map[uint32]peerKeys // verified neighbours

	selfSeed [secretSize]byte
	held     map[uint32]heldShares // shares this client holds, by owner (itself included)
	masked   []uint32              // neighbours whose pairwise masks were added
}

// NewClient checks the round's parameters against the client's policy,
// draws its two X25519 key pairs from rand and returns the client and its
// signed key advertisement (step 1).
func NewClient(cfg ClientConfig, p Params, rand io.Reader) (*Client, *KeyAdvert, error) {
	p.Roster = slices.Clone(p.Roster)
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	if cfg.Signer == nil || cfg.Keys == nil {
		return nil, nil, errors.New("masking: a client needs a signer and a key directory")
	}
	if !p.inRoster(cfg.ID) {
		return nil, nil, fmt.Errorf("masking: client %d is not in the round's roster", cfg.ID)
	}
	if p.Threshold < cfg.MinThreshold {
		return nil, nil, fmt.Errorf("masking: the round's threshold %d is below this client's minimum %d: refused", p.Threshold, cfg.MinThreshold)
	}
	g, err := NewGraph(&p)
	if err != nil {
		return nil, nil, err
	}
	digest, err := p.Digest()
	if err != nil {
		return nil, nil, err
	}
	c := &Client{cfg: cfg, p: p, g: g, digest: digest}
	if c.encKey, err = newX25519Key(rand); err != nil {
		return nil, nil, fmt.Errorf("masking: %w", err)
	}
	if c.maskKey, err = newX25519Key(rand); err != nil {
		return nil, nil, fmt.Errorf("masking: %w", err)
	}
	a := KeyAdvert{RoundID: p.RoundID, From: cfg.ID, Params: digest}
	copy(a.EncKey[:], c.encKey.PublicKey().Bytes())
	copy(a.MaskKey[:], c.maskKey.PublicKey().Bytes())
	if a.Signature, err = signMessage(cfg.Signer, rand, a.signedBytes(&digest)); err != nil {
		return nil, nil, fmt.Errorf("masking: signing the key advertisement: %w", err)
	}
	c.advert = a
	c.phase = phaseAdvertised
	out := a
	out.Signature = slices.Clone(a.Signature)
	return c, &out, nil
}

// Graph returns the round's communication graph.
func (c *Client) Graph() *Graph { return c.g }

// ErrParamsMismatch is returned for a key advertisement made under other
// round parameters or another Params.Context than the receiver's: the
// coordinator gave the round's clients different configurations.
var ErrParamsMismatch = errors.New("masking: advertisement signed over different round parameters")

// verifyAdvert checks one advertisement's round, parameters, sender and
// signature and parses its keys. The signature is checked over digest,
// the receiver's own, whatever the advertisement's Params field says.
func verifyAdvert(a *KeyAdvert, round, digest *[32]byte, keys KeyDirectory) (peerKeys, error) {
	if a.RoundID != *round {
		return peerKeys{}, fmt.Errorf("the advertisement of client %d belongs to another round", a.From)
	}
	if a.Params != *digest {
		return peerKeys{}, fmt.Errorf("%w: client %d took part under round parameters with digest %x…, this party's are %x… (the coordinator gave the round's clients different configurations)",
			ErrParamsMismatch, a.From, a.Params[:8], digest[:8])
	}
	pub, err := keys.PublicKey(a.From)
	if err != nil {
		return peerKeys{}, err
	}
	if err := verifyMessage(pub, a.signedBytes(digest), a.Signature); err != nil {
		return peerKeys{}, fmt.Errorf("the advertisement of client %d is not signed by its key over this round's parameters (substituted keys, or different parameters?): %w", a.From, err)
	}
	enc, err := ecdh.X25519().NewPublicKey(a.EncKey[:])
	if err != nil {
		return peerKeys{}, fmt.Errorf("client %d's encryption key: %w", a.From, err)
	}
	mask, err := ecdh.X25519().NewPublicKey(a.MaskKey[:])
	if err != nil {
		return peerKeys{}, fmt.Errorf("client %d's mask key: %w", a.From, err)
	}
	return peerKeys{enc: enc, mask: mask}, nil
}

// ShareKeys takes the neighbours' advertisements relayed by the
// coordinator, verifies each signature against the key directory, draws
// the self-mask seed from rand, Shamir-shares it and the mask key among
// the verified neighbours and the client itself, and returns one encrypted
// share per neighbour (step 2). It refuses an advertisement from a
// non-neighbour, a duplicate, a bad signature, repeated keys, or fewer
// than t − 1 neighbours.
func (c *Client) ShareKeys(ads []KeyAdvert, rand io.Reader) ([]EncryptedShare, error) {
	if c.phase != phaseAdvertised {
		return nil, errors.New("masking: ShareKeys called out of order")
	}
	me := c.cfg.ID
	peers := make(map[uint32]peerKeys, len(ads))
	seen := map[[32]byte]uint32{}
	for _, k := range [][32]byte{c.advert.EncKey, c.advert.MaskKey} {
		seen[k] = me
	}
	for i := range ads {
		a := &ads[i]
		if a.From == me {
			if a.EncKey != c.advert.EncKey || a.MaskKey != c.advert.MaskKey || a.RoundID != c.p.RoundID || a.Params != c.digest {
				return nil, fmt.Errorf("masking: client %d: the relayed copy of its own advertisement was altered: refused", me)
			}
			continue
		}
		if !c.g.Adjacent(me, a.From) {
			return nil, fmt.Errorf("masking: client %d: advertisement from %d, not a neighbour in the round's graph: refused", me, a.From)
		}
		if _, dup := peers[a.From]; dup {
			return nil, fmt.Errorf("masking: client %d: two advertisements from client %d: refused", me, a.From)
		}
		pk, err := verifyAdvert(a, &c.p.RoundID, &c.digest, c.cfg.Keys)
		if err != nil {
			return nil, fmt.Errorf("masking: client %d: %w: refused", me, err)
		}
		for _, k := range [][32]byte{a.EncKey, a.MaskKey} {
			if o, dup := seen[k]; dup {
				return nil, fmt.Errorf("masking: client %d: client %d advertises a key already used by client %d: refused", me, a.From, o)
			}
			seen[k] = a.From
		}
		peers[a.From] = pk
	}
	if len(peers)+1 < c.p.Threshold {
		return nil, fmt.Errorf("masking: client %d: %d neighbours advertised keys, fewer than t − 1 = %d: the round cannot reach its threshold", me, len(peers), c.p.Threshold-1)
	}
	holders := append(sortedKeys(peers), me)
	slices.Sort(holders)

	var seed [secretSize]byte
	if _, err := io.ReadFull(rand, seed[:]); err != nil {
		return nil, fmt.Errorf("masking: reading randomness for the self-mask seed: %w", err)
	}
	var sk [secretSize]byte
	copy(sk[:], c.maskKey.Bytes())
	selfShares, err := shareSecret(&seed, holders, c.p.Threshold, rand)
	if err != nil {
		return nil, fmt.Errorf("masking: sharing the self-mask seed: %w", err)
	}
	keyShares, err := shareSecret(&sk, holders, c.p.Threshold, rand)
	clear(sk[:])
	if err != nil {
		return nil, fmt.Errorf("masking: sharing the mask key: %w", err)
	}
	out := make([]EncryptedShare, 0, len(peers))
	for _, j := range holders {
		if j == me {
			continue
		}
		s := EncryptedShare{RoundID: c.p.RoundID, From: me, To: j}
		key, err := shareKey(c.encKey, peers[j].enc, &c.p.RoundID, me, j)
		if err != nil {
			return nil, fmt.Errorf("masking: %w", err)
		}
		aead, err := chacha20poly1305.New(key)
		clear(key)
		if err != nil {
			return nil, fmt.Errorf("masking: %w", err)
		}
		pt := encodeSharePlain(me, j, selfShares[j], keyShares[j])
		var nonce [chacha20poly1305.NonceSize]byte
		aead.Seal(s.Ciphertext[:0], nonce[:], pt, shareAAD(&c.p.RoundID, me, j))
		clear(pt)
		out = append(out, s)
	}
	c.peers = peers
	c.selfSeed = seed
	clear(seed[:])
	c.held = map[uint32]heldShares{me: {self: selfShares[me], key: keyShares[me]}}
	c.phase = phaseShared
	return out, nil
}

func encodeSharePlain(from, to uint32, self, key fieldShare) []byte {
	b := make([]byte, 0, sharePlainSize)
	b = binary.BigEndian.AppendUint32(b, from)
	b = binary.BigEndian.AppendUint32(b, to)
	for _, v := range self {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	for _, v := range key {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b
}

func decodeSharePlain(b []byte) (from, to uint32, self, key fieldShare, err error) {
	if len(b) != sharePlainSize {
		return 0, 0, self, key, fmt.Errorf("share plaintext of %d bytes, want %d", len(b), sharePlainSize)
	}
	from, to = binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
	for i := range secretChunks {
		self[i] = binary.BigEndian.Uint64(b[8+8*i:])
		key[i] = binary.BigEndian.Uint64(b[8+8*secretChunks+8*i:])
		if self[i] >= fieldP || key[i] >= fieldP {
			return 0, 0, self, key, errors.New("a share is not an element of GF(2^61 − 1)")
		}
	}
	return from, to, self, key, nil
}

// CheckShares reports whether MaskInput would accept shares, without
// changing the client: a caller that must commit to something before it
// computes its input (a privacy ledger's charge) checks the shares first,
// so that a round refused here has cost it nothing.
func (c *Client) CheckShares(shares []EncryptedShare) error {
	if c.phase != phaseShared {
		return errors.New("masking: CheckShares called out of order")
	}
	got, err := c.openShares(shares)
	for _, h := range got {
		clear(h.self[:])
		clear(h.key[:])
	}
	return err
}

// openShares decrypts and checks the shares relayed in step 3: each
// addressed to this client by a verified neighbour, of this round, once,
// authenticated; and at least t − 1 of them.
func (c *Client) openShares(shares []EncryptedShare) (map[uint32]heldShares, error) {
	me := c.cfg.ID
	got := make(map[uint32]heldShares, len(shares))
	for i := range shares {
		s := &shares[i]
		if s.RoundID != c.p.RoundID {
			return nil, fmt.Errorf("masking: client %d: a share from client %d belongs to another round (replay): refused", me, s.From)
		}
		if s.To != me {
			return nil, fmt.Errorf("masking: client %d: a share addressed to client %d: refused", me, s.To)
		}
		pk, ok := c.peers[s.From]
		if !ok {
			return nil, fmt.Errorf("masking: client %d: a share from client %d, not a verified neighbour: refused", me, s.From)
		}
		if _, dup := got[s.From]; dup {
			return nil, fmt.Errorf("masking: client %d: a second share from client %d (replay): refused", me, s.From)
		}
		key, err := shareKey(c.encKey, pk.enc, &c.p.RoundID, s.From, me)
		if err != nil {
			return nil, fmt.Errorf("masking: %w", err)
		}
		aead, err := chacha20poly1305.New(key)
		clear(key)
		if err != nil {
			return nil, fmt.Errorf("masking: %w", err)
		}
		var nonce [chacha20poly1305.NonceSize]byte
		pt, err := aead.Open(nil, nonce[:], s.Ciphertext[:], shareAAD(&c.p.RoundID, s.From, me))
		if err != nil {
			return nil, fmt.Errorf("masking: client %d: the share from client %d fails authentication: refused", me, s.From)
		}
		from, to, self, k, err := decodeSharePlain(pt)
		clear(pt)
		if err != nil {
			return nil, fmt.Errorf("masking: client %d: the share from client %d: %w", me, s.From, err)
		}
		if from != s.From || to != me {
			return nil, fmt.Errorf("masking: client %d: the share from client %d names %d→%d inside: refused", me, s.From, from, to)
		}
		got[s.From] = heldShares{self: self, key: k}
	}
	if len(got)+1 < c.p.Threshold {
		return nil, fmt.Errorf("masking: client %d: shares from %d neighbours, fewer than t − 1 = %d: the round cannot reach its threshold", me, len(got), c.p.Threshold-1)
	}
	return got, nil
}

// MaskInput takes the encrypted shares the coordinator relays from the
// neighbours that completed step 2, decrypts and keeps them, and returns
// the input masked with the self mask and one pairwise mask per such
// neighbour, modulo 2^32 (step 3). It refuses a share not addressed to
// this client, from a non-neighbour, of another round, failing
// authentication, or received twice (a replay), and an input of the wrong
// length.
func (c *Client) MaskInput(shares []EncryptedShare, input []uint32) (*MaskedInput, error) {
	if c.phase != phaseShared {
		return nil, errors.New("masking: MaskInput called out of order")
	}
	me := c.cfg.ID
	if len(input) != c.p.Length {
		return nil, fmt.Errorf("masking: client %d: input of %d values, the round has %d", me, len(input), c.p.Length)
	}
	got, err := c.openShares(shares)
	if err != nil {
		return nil, err
	}
	out := &MaskedInput{RoundID: c.p.RoundID, From: me, Values: slices.Clone(input)}
	addMask(out.Values, &c.selfSeed, +1)
	masked := sortedKeys(got)
	for _, j := range masked {
		seed, err := pairSeed(c.maskKey, c.peers[j].mask, &c.p.RoundID, me, j)
		if err != nil {
			return nil, fmt.Errorf("masking: %w", err)
		}
		sign := 1
		if me > j {
			sign = -1
		}
		addMask(out.Values, &seed, sign)
		clear(seed[:])
	}
	for j, h := range got {
		c.held[j] = h
	}
	c.masked = masked
	clear(c.selfSeed[:])
	c.maskKey = nil
	c.phase = phaseMasked
	return out, nil
}

// Unmask answers the coordinator's unmasking request (step 4): for each
// neighbour (or itself) listed as a survivor, its share of that client's
// self-mask seed; for each neighbour listed as dropped, its share of that
// client's mask key. It answers once per round and refuses a request that
// lists a client as both survivor and dropped (which would reveal that
// client's input), lists this client as dropped, lists duplicates or ids
// outside the roster, or has fewer than t survivors.
func (c *Client) Unmask(req *UnmaskRequest) (*UnmaskResponse, error) {
	me := c.cfg.ID
	switch c.phase {
	case phaseMasked:
	case phaseDone:
		return nil, fmt.Errorf("masking: client %d: a second unmasking request in one round: refused", me)
	default:
		return nil, errors.New("masking: Unmask called out of order")
	}
	if req.RoundID != c.p.RoundID {
		return nil, fmt.Errorf("masking: client %d: an unmasking request of another round: refused", me)
	}
	status := make(map[uint32]bool, len(req.Survivors)+len(req.Dropped)) // true: survivor
	for _, l := range []struct {
		ids      []uint32
		survived bool
	}{{req.Survivors, true}, {req.Dropped, false}} {
		for _, id := range l.ids {
			if !c.p.inRoster(id) {
				return nil, fmt.Errorf("masking: client %d: the unmasking request names client %d, not in the roster: refused", me, id)
			}
			if prev, dup := status[id]; dup {
				if prev != l.survived {
					return nil, fmt.Errorf("masking: client %d: the unmasking request lists client %d as both survivor and dropped; answering would reveal its input: refused", me, id)
				}
				return nil, fmt.Errorf("masking: client %d: the unmasking request lists client %d twice: refused", me, id)
			}
			status[id] = l.survived
		}
	}
	if s, ok := status[me]; !ok || !s {
		return nil, fmt.Errorf("masking: client %d: the unmasking request does not list this client as a survivor: refused", me)
	}
	if len(req.Survivors) < c.p.Threshold {
		return nil, fmt.Errorf("masking: client %d: %d survivors, fewer than the threshold %d: refused", me, len(req.Survivors), c.p.Threshold)
	}
	resp := &UnmaskResponse{RoundID: c.p.RoundID, From: me}
	for _, id := range sortedKeys(c.held) {
		s, listed := status[id]
		if !listed {
			continue
		}
		h := c.held[id]
		if s {
			resp.SelfShares = append(resp.SelfShares, ShareOf{Owner: id, Value: h.self})
		} else {
			resp.KeyShares = append(resp.KeyShares, ShareOf{Owner: id, Value: h.key})
		}
	}
	c.phase = phaseDone
	c.held = nil
	return resp, nil
}

func sortedKeys[V any](m map[uint32]V) []uint32 {
	k := make([]uint32, 0, len(m))
	for id := range m {
		k = append(k, id)
	}
	slices.Sort(k)
	return k
}
