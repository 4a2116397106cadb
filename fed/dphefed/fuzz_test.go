package dphefed

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/keygenpb"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// fuzzKey is a fixed 512-bit public key for the fuzz targets.
func fuzzKey(f *testing.F) (*paillier.PublicKey, []byte) {
	sk, err := paillier.GenerateKey(paillier.KeyOptions{Bits: 512, AllowInsecureTestKeySize: true})
	if err != nil {
		f.Fatal(err)
	}
	b, err := sk.Public().MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	return sk.Public(), b
}

func parser(pub []byte) func([]byte) (*paillier.PublicKey, error) {
	return func(b []byte) (*paillier.PublicKey, error) {
		return paillier.UnmarshalPublicKey(b, paillier.DecodeOptions{AllowInsecureTestKeySize: true})
	}
}

// FuzzUserKeys: whatever a key generator sends a client, converting it and
// building a user from it errs or succeeds, never panics.
func FuzzUserKeys(f *testing.F) {
	_, pub := fuzzKey(f)
	seed := &keygenpb.UserKeys{Version: keygenpb.ProtocolVersion, Round: 1, UserId: 1, Dim: 3, Capacity: 2, FracBits: 24,
		Phi: []uint32{2, 0, 1}, PhiUser: []uint32{1, 2, 0}, MacKey: make([]byte, 32), TagKey: make([]byte, 32), ChecksumKey: make([]byte, 32),
		ChecksumOffset: []byte{5}, PublicKey: pub, Packing: &keygenpb.Packing{Coordinates: 7, Lanes: 3, Bound: 1, MaxUsers: 4}}
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		f.Fatal(err)
	}
	if err := l.SetBudget("u", dp.Budget{Epsilon: 1e300, Delta: 1e-5}); err != nil {
		f.Fatal(err)
	}
	priv := &dphe.Privacy{Clip: 1, NoiseMultiplier: 1, Ledger: l, Principal: "u"}
	b, _ := proto.Marshal(seed)
	f.Add(b)
	seed.Packing = nil
	b, _ = proto.Marshal(seed)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m keygenpb.UserKeys
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		uk, err := userKeysFromPB(&m, parser(pub))
		if err != nil || uk.PublicKey.Bits() > 1024 { // larger keys are valid but slow to use
			return
		}
		if u, err := dphe.NewUser(uk, dphe.UserOptions{Privacy: priv}); err == nil && uk.Dim <= 64 && uk.Coordinates() <= 64 {
			_, _ = u.Encrypt(make([]float64, uk.Coordinates())) // must not panic either
		}
	})
}

// FuzzAggregatorKeys: the coordinator's conversion of the key generator's
// reply errs or succeeds, never panics, and so does the aggregator built
// from it.
func FuzzAggregatorKeys(f *testing.F) {
	_, pub := fuzzKey(f)
	seed := &keygenpb.AggregatorKeys{Version: keygenpb.ProtocolVersion, Round: 1, Dim: 3, Capacity: 2, PublicKey: pub}
	for i, c := range []string{"a", "b", "c"} {
		seed.Users = append(seed.Users, &keygenpb.AggregatorUser{Client: c, UserId: uint32(i + 1), PhiUser: []uint32{1, 2, 0}, MacKey: make([]byte, 32)})
	}
	b, _ := proto.Marshal(seed)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m keygenpb.AggregatorKeys
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		keys, _, err := aggregatorKeysFromPB(&m, parser(pub))
		if err != nil || keys.PublicKey.Bits() > 1024 {
			return
		}
		_, _ = dphe.NewAggregator(keys, dphe.AggregatorOptions{})
	})
}
