package masking

import (
	"bytes"
	"crypto/ecdh"
	"errors"
	"fmt"
	"slices"
)

// ErrTooFewSurvivors is returned when fewer than t clients' masked inputs
// arrived: such a round is never unmasked.
var ErrTooFewSurvivors = errors.New("masking: fewer survivors than the threshold: the round is not unmasked")

type serverPhase int

const (
	collectAdverts serverPhase = iota + 1
	collectShares
	collectMasked
	collectUnmask
	finished
)

// Server is the coordinator's side of a round, a state machine over
// messages without any network. It relays advertisements and shares,
// collects masked inputs, asks the survivors for shares and unmasks the
// sum of the survivors' inputs. Each step's first call of the next step's
// method closes the step: late messages are refused.
type Server struct {
	p      Params
	g      *Graph
	digest [32]byte
	keys   KeyDirectory
	phase  serverPhase

	adverts   map[uint32]KeyAdvert                 // U1
	shares    map[uint32]map[uint32]EncryptedShare // recipient → sender → share
	sharers   map[uint32]bool                      // U2
	masked    map[uint32][]uint32                  // U3
	request   *UnmaskRequest                       // sent to every survivor
	dropped   map[uint32]bool                      // U2 \ U3
	responses map[uint32]*UnmaskResponse           // by responder
}

// NewServer starts a round with the given parameters; keys authenticates
// the key advertisements (the coordinator checks them too, so a bad one
// is refused before it is relayed).
func NewServer(p Params, keys KeyDirectory) (*Server, error) {
	p.Roster = slices.Clone(p.Roster)
	g, err := NewGraph(&p)
	if err != nil {
		return nil, err
	}
	if keys == nil {
		return nil, errors.New("masking: a server needs a key directory")
	}
	digest, err := p.Digest()
	if err != nil {
		return nil, err
	}
	return &Server{
		p: p, g: g, digest: digest, keys: keys, phase: collectAdverts,
		adverts: map[uint32]KeyAdvert{}, shares: map[uint32]map[uint32]EncryptedShare{},
		sharers: map[uint32]bool{}, masked: map[uint32][]uint32{},
		dropped: map[uint32]bool{}, responses: map[uint32]*UnmaskResponse{},
	}, nil
}

// Graph returns the round's communication graph.
func (s *Server) Graph() *Graph { return s.g }

// ReceiveAdvert accepts a client's key advertisement (step 1).
func (s *Server) ReceiveAdvert(a *KeyAdvert) error {
	if s.phase != collectAdverts {
		return fmt.Errorf("masking: advertisement from client %d after the advertisement step closed: refused", a.From)
	}
	if !s.p.inRoster(a.From) {
		return fmt.Errorf("masking: advertisement from client %d, not in the roster: refused", a.From)
	}
	if _, dup := s.adverts[a.From]; dup {
		return fmt.Errorf("masking: a second advertisement from client %d: refused", a.From)
	}
	if _, err := verifyAdvert(a, &s.p.RoundID, &s.digest, s.keys); err != nil {
		return fmt.Errorf("masking: %w: refused", err)
	}
	c := *a
	c.Signature = slices.Clone(a.Signature)
	s.adverts[a.From] = c
	return nil
}

// AdvertsFor returns the advertisements of id's neighbours that arrived,
// to relay to id. The first call closes the advertisement step; it fails
// if fewer than t clients advertised.
func (s *Server) AdvertsFor(id uint32) ([]KeyAdvert, error) {
	if s.phase == collectAdverts {
		if len(s.adverts) < s.p.Threshold {
			return nil, fmt.Errorf("%w (%d advertised keys, threshold %d)", ErrTooFewSurvivors, len(s.adverts), s.p.Threshold)
		}
		s.phase = collectShares
	}
	if s.phase != collectShares {
		return nil, errors.New("masking: AdvertsFor called after the share step closed")
	}
	if _, ok := s.adverts[id]; !ok {
		return nil, fmt.Errorf("masking: client %d did not advertise keys", id)
	}
	var out []KeyAdvert
	for _, j := range s.g.adj[id] {
		if a, ok := s.adverts[j]; ok {
			a.Signature = slices.Clone(a.Signature)
			out = append(out, a)
		}
	}
	return out, nil
}

// ReceiveShares accepts a client's encrypted shares for its neighbours
// (step 2): exactly one for each neighbour that advertised keys.
func (s *Server) ReceiveShares(from uint32, shares []EncryptedShare) error {
	if s.phase != collectShares {
		return fmt.Errorf("masking: shares from client %d outside the share step: refused", from)
	}
	if _, ok := s.adverts[from]; !ok {
		return fmt.Errorf("masking: shares from client %d, which did not advertise keys: refused", from)
	}
	if s.sharers[from] {
		return fmt.Errorf("masking: a second set of shares from client %d (replay): refused", from)
	}
	to := map[uint32]bool{}
	for i := range shares {
		sh := &shares[i]
		if sh.RoundID != s.p.RoundID || sh.From != from {
			return fmt.Errorf("masking: client %d sent a share of another round or sender: refused", from)
		}
		if _, ok := s.adverts[sh.To]; !ok || !s.g.Adjacent(from, sh.To) {
			return fmt.Errorf("masking: client %d sent a share for %d, not an advertised neighbour: refused", from, sh.To)
		}
		if to[sh.To] {
			return fmt.Errorf("masking: client %d sent two shares for %d: refused", from, sh.To)
		}
		to[sh.To] = true
	}
	for _, j := range s.g.adj[from] {
		if _, ok := s.adverts[j]; ok && !to[j] {
			return fmt.Errorf("masking: client %d sent no share for its neighbour %d: refused", from, j)
		}
	}
	for i := range shares {
		sh := shares[i]
		if s.shares[sh.To] == nil {
			s.shares[sh.To] = map[uint32]EncryptedShare{}
		}
		s.shares[sh.To][from] = sh
	}
	s.sharers[from] = true
	return nil
}

// SharesFor returns the shares addressed to id by clients that completed
// step 2, to relay to id. The first call closes the share step; it fails
// if fewer than t clients shared their keys.
func (s *Server) SharesFor(id uint32) ([]EncryptedShare, error) {
	if s.phase == collectShares {
		if len(s.sharers) < s.p.Threshold {
			return nil, fmt.Errorf("%w (%d clients shared keys, threshold %d)", ErrTooFewSurvivors, len(s.sharers), s.p.Threshold)
		}
		s.phase = collectMasked
	}
	if s.phase != collectMasked {
		return nil, errors.New("masking: SharesFor called after the masked-input step closed")
	}
	if !s.sharers[id] {
		return nil, fmt.Errorf("masking: client %d did not share its keys", id)
	}
	var out []EncryptedShare
	for _, from := range sortedKeys(s.shares[id]) {
		if s.sharers[from] {
			out = append(out, s.shares[id][from])
		}
	}
	return out, nil
}

// ReceiveMasked accepts a client's masked input (step 3).
func (s *Server) ReceiveMasked(m *MaskedInput) error {
	if s.phase != collectMasked {
		return fmt.Errorf("masking: masked input from client %d outside the masked-input step: refused", m.From)
	}
	if m.RoundID != s.p.RoundID {
		return fmt.Errorf("masking: masked input from client %d of another round: refused", m.From)
	}
	if !s.sharers[m.From] {
		return fmt.Errorf("masking: masked input from client %d, which did not share its keys: refused", m.From)
	}
	if _, dup := s.masked[m.From]; dup {
		return fmt.Errorf("masking: a second masked input from client %d (replay): refused", m.From)
	}
	if len(m.Values) != s.p.Length {
		return fmt.Errorf("masking: masked input from client %d has %d values, the round has %d: refused", m.From, len(m.Values), s.p.Length)
	}
	s.masked[m.From] = slices.Clone(m.Values)
	return nil
}

// UnmaskRequest closes the masked-input step and returns the request to
// send to every survivor: the survivors and the clients that shared keys
// but sent no input. With fewer than t survivors it returns
// ErrTooFewSurvivors and the round ends without unmasking.
func (s *Server) UnmaskRequest() (*UnmaskRequest, error) {
	if s.phase == collectMasked {
		if len(s.masked) < s.p.Threshold {
			s.phase = finished
			return nil, fmt.Errorf("%w (%d masked inputs, threshold %d)", ErrTooFewSurvivors, len(s.masked), s.p.Threshold)
		}
		req := &UnmaskRequest{RoundID: s.p.RoundID, Survivors: sortedKeys(s.masked)}
		for _, id := range sortedKeys(s.sharers) {
			if _, ok := s.masked[id]; !ok {
				req.Dropped = append(req.Dropped, id)
				s.dropped[id] = true
			}
		}
		s.request = req
		s.phase = collectUnmask
	}
	if s.phase != collectUnmask {
		return nil, errors.New("masking: the round has ended")
	}
	return &UnmaskRequest{RoundID: s.request.RoundID, Survivors: slices.Clone(s.request.Survivors), Dropped: slices.Clone(s.request.Dropped)}, nil
}

// ReceiveUnmask accepts a survivor's shares (step 4). It refuses a second
// response from one client (replay), shares of a client the responder
// does not hold, and shares of the wrong kind.
func (s *Server) ReceiveUnmask(r *UnmaskResponse) error {
	if s.phase != collectUnmask {
		return fmt.Errorf("masking: unmasking response from client %d outside the unmasking step: refused", r.From)
	}
	if r.RoundID != s.p.RoundID {
		return fmt.Errorf("masking: unmasking response from client %d of another round (replay): refused", r.From)
	}
	if _, ok := s.masked[r.From]; !ok {
		return fmt.Errorf("masking: unmasking response from client %d, not a survivor: refused", r.From)
	}
	if _, dup := s.responses[r.From]; dup {
		return fmt.Errorf("masking: a second unmasking response from client %d (replay): refused", r.From)
	}
	owners := map[uint32]bool{}
	check := func(l []ShareOf, survivor bool) error {
		for _, sh := range l {
			if owners[sh.Owner] {
				return fmt.Errorf("masking: client %d sent two shares of client %d: refused", r.From, sh.Owner)
			}
			owners[sh.Owner] = true
			if sh.Owner != r.From && !s.g.Adjacent(r.From, sh.Owner) {
				return fmt.Errorf("masking: client %d sent a share of client %d, which it does not hold: refused", r.From, sh.Owner)
			}
			_, alive := s.masked[sh.Owner]
			if survivor && !alive || !survivor && !s.dropped[sh.Owner] {
				return fmt.Errorf("masking: client %d sent the wrong kind of share of client %d: refused", r.From, sh.Owner)
			}
			for _, v := range sh.Value {
				if v >= fieldP {
					return fmt.Errorf("masking: client %d sent a share outside the field: refused", r.From)
				}
			}
		}
		return nil
	}
	if err := check(r.SelfShares, true); err != nil {
		return err
	}
	if err := check(r.KeyShares, false); err != nil {
		return err
	}
	c := *r
	c.SelfShares, c.KeyShares = slices.Clone(r.SelfShares), slices.Clone(r.KeyShares)
	s.responses[r.From] = &c
	return nil
}

// Result is an unmasked round.
type Result struct {
	// Sum is Σ inputs of the survivors, modulo 2^32.
	Sum []uint32
	// Survivors are the clients whose inputs are in Sum.
	Survivors []uint32
}

// Sum reconstructs the survivors' self-mask seeds and the dropped clients'
// mask keys from the responses and returns the sum of the survivors'
// inputs. It fails, naming the client, when fewer than t holders answered
// for a secret, when shares are inconsistent, or when a reconstructed mask
// key does not match its advertisement.
func (s *Server) Sum() (*Result, error) {
	if s.phase != collectUnmask {
		return nil, errors.New("masking: Sum called before the unmasking step or after the round ended")
	}
	if len(s.masked) < s.p.Threshold {
		return nil, ErrTooFewSurvivors
	}
	sum := make([]uint32, s.p.Length)
	survivors := sortedKeys(s.masked)
	for _, id := range survivors {
		for i, v := range s.masked[id] {
			sum[i] += v
		}
	}
	collect := func(owner uint32, self bool) (map[uint32]fieldShare, []uint32) {
		m := map[uint32]fieldShare{}
		for _, h := range s.g.holders(owner) {
			r, ok := s.responses[h]
			if !ok {
				continue
			}
			l := r.KeyShares
			if self {
				l = r.SelfShares
			}
			for _, sh := range l {
				if sh.Owner == owner {
					m[h] = sh.Value
				}
			}
		}
		return m, sortedKeys(m)
	}
	for _, id := range survivors {
		m, ids := collect(id, true)
		seed, err := reconstruct(m, ids, s.p.Threshold)
		if err != nil {
			return nil, fmt.Errorf("masking: recovering client %d's self mask: %w", id, err)
		}
		addMask(sum, &seed, -1)
		clear(seed[:])
	}
	for _, j := range sortedKeys(s.dropped) {
		m, ids := collect(j, false)
		skb, err := reconstruct(m, ids, s.p.Threshold)
		if err != nil {
			return nil, fmt.Errorf("masking: recovering dropped client %d's mask key: %w", j, err)
		}
		sk, err := ecdh.X25519().NewPrivateKey(skb[:])
		clear(skb[:])
		if err != nil {
			return nil, fmt.Errorf("masking: dropped client %d's mask key: %w", j, err)
		}
		adv := s.adverts[j]
		if !bytes.Equal(sk.PublicKey().Bytes(), adv.MaskKey[:]) {
			return nil, fmt.Errorf("masking: the shares of dropped client %d's mask key do not match its advertisement", j)
		}
		for _, i := range s.g.adj[j] {
			if _, alive := s.masked[i]; !alive {
				continue
			}
			ai := s.adverts[i]
			pk, err := ecdh.X25519().NewPublicKey(ai.MaskKey[:])
			if err != nil {
				return nil, fmt.Errorf("masking: client %d's mask key: %w", i, err)
			}
			seed, err := pairSeed(sk, pk, &s.p.RoundID, j, i)
			if err != nil {
				return nil, fmt.Errorf("masking: %w", err)
			}
			// Survivor i added +PRG if i < j, −PRG otherwise: undo it.
			sign := -1
			if i > j {
				sign = 1
			}
			addMask(sum, &seed, sign)
			clear(seed[:])
		}
	}
	s.phase = finished
	return &Result{Sum: sum, Survivors: survivors}, nil
}
