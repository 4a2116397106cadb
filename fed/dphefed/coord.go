package dphefed

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/veil-privacy/veil/fed/keygenpb"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// RoundRequest is what the coordinator asks the key generator for.
type RoundRequest struct {
	Round uint64
	// Coordinates is the update's dimension D.
	Coordinates int
	// Capacity is DPHE's M, positions per message (blocks when packed).
	Capacity int
	// Clients are the round's clients by certificate name (at least 3).
	Clients []string
	// Pack packs values of magnitude at most Bound, summed over at most
	// MaxUsers clients, several per plaintext (dphe.Packing).
	Pack     bool
	Bound    float64
	MaxUsers int
}

// Sum is a round's decrypted sum.
type Sum struct {
	Round uint64
	// Clients whose contributions the sum holds.
	Clients []string
	Sum     []float64
}

// Round is the coordinator's half of one DPHE round: it holds the
// aggregator's keys (each client's φ⁽ⁿ⁾ and MAC key) and the clients'
// ciphertexts, never a plaintext.
type Round struct {
	kg      *KeyGen
	pk      *paillier.PublicKey
	ids     map[string]uint32
	agg     *dphe.Aggregator
	round   uint64
	Packing *dphe.Packing
}

// StartRound sets up a round at the key generator and prepares the
// aggregator.
func StartRound(ctx context.Context, kg *KeyGen, r RoundRequest) (*Round, error) {
	req := &keygenpb.SetupRoundRequest{Version: keygenpb.ProtocolVersion, Round: r.Round, Coordinates: uint32(r.Coordinates),
		Capacity: uint32(r.Capacity), Clients: slices.Clone(r.Clients), Pack: r.Pack, Bound: r.Bound, MaxUsers: uint32(r.MaxUsers)}
	reply, err := kg.c.SetupRound(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("dphefed: setting up round %d: %w", r.Round, err)
	}
	return newRound(kg, r.Round, reply)
}

// ResumeRound rebuilds the coordinator's half of an open round after the
// coordinator restarted: the key generator sends the round's aggregator
// keys again, and the caller hands Receive the messages it had stored
// (each is checked again; ciphertexts only, so the coordinator's store
// holds no plaintext either).
func ResumeRound(ctx context.Context, kg *KeyGen, round uint64) (*Round, error) {
	reply, err := kg.c.RoundKeys(ctx, &keygenpb.UserKeysRequest{Version: keygenpb.ProtocolVersion, Round: round})
	if err != nil {
		return nil, fmt.Errorf("dphefed: keys of round %d: %w", round, err)
	}
	return newRound(kg, round, reply)
}

// newRound builds the coordinator's half from the key generator's reply.
func newRound(kg *KeyGen, round uint64, reply *keygenpb.AggregatorKeys) (*Round, error) {
	keys, ids, err := aggregatorKeysFromPB(reply, kg.publicKey)
	if err != nil {
		return nil, err
	}
	if keys.Round != round {
		return nil, fmt.Errorf("dphefed: asked for round %d, the key generator sent round %d's keys", round, keys.Round)
	}
	agg, err := dphe.NewAggregator(keys, dphe.AggregatorOptions{})
	if err != nil {
		return nil, fmt.Errorf("dphefed: round %d: %w", round, err)
	}
	var pack *dphe.Packing
	if p := reply.GetPacking(); p != nil {
		pack = &dphe.Packing{Coordinates: int(p.GetCoordinates()), Lanes: int(p.GetLanes()), Bound: p.GetBound(), MaxUsers: int(p.GetMaxUsers())}
	}
	return &Round{kg: kg, pk: keys.PublicKey, ids: ids, agg: agg, round: round, Packing: pack}, nil
}

// aggregatorKeysFromPB converts and checks the aggregator's keys.
func aggregatorKeysFromPB(r *keygenpb.AggregatorKeys, parseKey func([]byte) (*paillier.PublicKey, error)) (*dphe.AggregatorKeys, map[string]uint32, error) {
	if r.GetVersion() != keygenpb.ProtocolVersion {
		return nil, nil, fmt.Errorf("dphefed: key-generator protocol version %d, want %d", r.GetVersion(), keygenpb.ProtocolVersion)
	}
	pk, err := parseKey(r.GetPublicKey())
	if err != nil {
		return nil, nil, err
	}
	keys := &dphe.AggregatorKeys{PublicKey: pk, Round: r.GetRound(), Dim: int(r.GetDim()), Capacity: int(r.GetCapacity()), Users: map[uint32]dphe.AggregatorUserKeys{}}
	ids := map[string]uint32{}
	for _, u := range r.GetUsers() {
		if len(u.GetMacKey()) != 32 {
			return nil, nil, fmt.Errorf("dphefed: round %d: client %q's MAC key has %d bytes, want 32", r.GetRound(), u.GetClient(), len(u.GetMacKey()))
		}
		if _, dup := keys.Users[u.GetUserId()]; dup || ids[u.GetClient()] != 0 || u.GetUserId() == 0 {
			return nil, nil, fmt.Errorf("dphefed: round %d: client %q or user %d given twice or zero", r.GetRound(), u.GetClient(), u.GetUserId())
		}
		var mac [32]byte
		copy(mac[:], u.GetMacKey())
		keys.Users[u.GetUserId()] = dphe.AggregatorUserKeys{PhiUser: u.GetPhiUser(), MACKey: mac}
		ids[u.GetClient()] = u.GetUserId()
	}
	return keys, ids, nil
}

// Receive takes one message of a client's contribution, sent by client
// (the name on its certificate): it must be that client's, authentic, of
// this round, and not a replay.
func (r *Round) Receive(client string, msg []byte) error {
	id, ok := r.ids[client]
	if !ok {
		return fmt.Errorf("dphefed: %q is not a client of round %d", client, r.round)
	}
	if err := r.agg.ReceiveFrom(id, msg); err != nil {
		return fmt.Errorf("dphefed: round %d, client %q: %w", r.round, client, err)
	}
	return nil
}

// Aggregate multiplies the complete contributions received (at least
// three clients') into the round's aggregate and returns its encoding,
// what the key generator is sent. It closes the round to new messages.
func (r *Round) Aggregate() ([]byte, error) {
	a, err := r.agg.Sum()
	if err != nil {
		return nil, fmt.Errorf("dphefed: round %d: %w", r.round, err)
	}
	return a.Encode(r.pk)
}

// Finish aggregates and asks the key generator for the sum.
func (r *Round) Finish(ctx context.Context) (*Sum, error) {
	b, err := r.Aggregate()
	if err != nil {
		return nil, err
	}
	return r.kg.Decrypt(ctx, b)
}

// Decrypt sends an encoded aggregate to the key generator and returns the
// sum it decrypted.
func (k *KeyGen) Decrypt(ctx context.Context, aggregate []byte) (*Sum, error) {
	reply, err := k.c.Decrypt(ctx, &keygenpb.DecryptRequest{Version: keygenpb.ProtocolVersion, Aggregate: aggregate})
	if err != nil {
		return nil, fmt.Errorf("dphefed: decryption: %w", err)
	}
	if reply.GetVersion() != keygenpb.ProtocolVersion {
		return nil, errors.New("dphefed: the key generator's reply has another protocol version")
	}
	return &Sum{Round: reply.GetRound(), Clients: reply.GetClients(), Sum: reply.GetSum()}, nil
}
