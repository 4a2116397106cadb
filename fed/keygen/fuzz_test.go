package keygen

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/keygenpb"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// FuzzState: a state file's rounds, however damaged, restore or are
// refused with an error, never a panic.
func FuzzState(f *testing.F) {
	sk, err := paillier.GenerateKey(paillier.KeyOptions{Bits: 512, AllowInsecureTestKeySize: true})
	if err != nil {
		f.Fatal(err)
	}
	good := state{Version: stateVersion, FracBits: 24, Started: true, Last: 3, Rounds: []roundEntry{{Round: 3, Dim: 4, Capacity: 2, Users: []uint32{1, 2, 3},
		Clients: []string{"a", "b", "c"}, Seed: make([]byte, 32), Packing: &dphe.Packing{Coordinates: 10, Lanes: 3, Bound: 1, MaxUsers: 4}}}}
	b, _ := json.Marshal(good)
	f.Add(b)
	f.Add([]byte(`{"version":1,"rounds":[{"round":1,"seed":"AA=="}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var st state
		if json.Unmarshal(b, &st) != nil {
			return
		}
		snap, _, err := st.snapshot()
		if err != nil {
			return
		}
		_, _ = dphe.NewKeyGenerator(dphe.KeyGeneratorOptions{Key: sk, FracBits: 24, Resume: snap})
	})
}

// FuzzSetupRequest: whatever the coordinator asks for, the key generator's
// validation errs or returns parameters dphe accepts or refuses, never a
// panic.
func FuzzSetupRequest(f *testing.F) {
	sk, err := paillier.GenerateKey(paillier.KeyOptions{Bits: 512, AllowInsecureTestKeySize: true})
	if err != nil {
		f.Fatal(err)
	}
	kg, err := dphe.NewKeyGenerator(dphe.KeyGeneratorOptions{Key: sk, FracBits: 24})
	if err != nil {
		f.Fatal(err)
	}
	s := &Service{kg: kg, st: &state{FracBits: 24}}
	b, _ := proto.Marshal(&keygenpb.SetupRoundRequest{Version: 1, Round: 1, Coordinates: 50, Capacity: 2, Clients: []string{"a", "b", "c"}, Pack: true, Bound: 2, MaxUsers: 8})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var req keygenpb.SetupRoundRequest
		if proto.Unmarshal(b, &req) != nil || req.GetCoordinates() > 1<<16 {
			return
		}
		p, _, err := s.roundParams(&req)
		if err != nil {
			return
		}
		_, _ = kg.NewRound(p)
	})
}
