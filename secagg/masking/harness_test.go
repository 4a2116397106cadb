package masking

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
)

// stage is how far a client gets in a round before it drops out.
type stage int

const (
	dropBeforeAdvert stage = iota // never advertises
	dropAfterAdvert               // advertises, sends no shares
	dropAfterShares               // shares keys, sends no input
	dropAfterInput                // sends its masked input, never answers the unmasking request
	complete                      // takes every step
)

// testRand returns a deterministic randomness stream for tests.
func testRand(seed uint64) io.Reader {
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	s[2], s[3] = byte(seed>>16), byte(seed>>24)
	return rand.NewChaCha8(s)
}

type fixture struct {
	p       Params
	signers map[uint32]ed25519.PrivateKey
	keys    StaticKeys
}

func newFixture(t testing.TB, n, k, thr, length int, seed uint64) *fixture {
	t.Helper()
	f := &fixture{signers: map[uint32]ed25519.PrivateKey{}, keys: StaticKeys{}}
	r := testRand(seed)
	f.p = Params{Degree: k, Threshold: thr, Length: length}
	io.ReadFull(r, f.p.RoundID[:])
	io.ReadFull(r, f.p.GraphSeed[:])
	for i := range n {
		id := uint32(10 + 3*i) // ids need not be dense
		f.p.Roster = append(f.p.Roster, id)
		var s [32]byte
		io.ReadFull(r, s[:])
		sk := ed25519.NewKeyFromSeed(s[:])
		f.signers[id] = sk
		f.keys[id] = sk.Public()
	}
	if err := f.p.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) config(id uint32) ClientConfig {
	return ClientConfig{ID: id, Signer: f.signers[id], Keys: f.keys}
}

// outcome records what happened in a simulated round.
type outcome struct {
	u1, u2, u3, responders []uint32
	inputs                 map[uint32][]uint32
	result                 *Result
	err                    error
}

// run plays a whole round, honestly, with the given dropouts. Clients
// that refuse a step (e.g. too few neighbours) count as dropped there.
func (f *fixture) run(t testing.TB, stages map[uint32]stage, r io.Reader) *outcome {
	t.Helper()
	o := &outcome{inputs: map[uint32][]uint32{}}
	srv, err := NewServer(f.p, f.keys)
	if err != nil {
		t.Fatal(err)
	}
	clients := map[uint32]*Client{}
	for _, id := range f.p.Roster {
		if stages[id] < dropAfterAdvert {
			continue
		}
		c, ad, err := NewClient(f.config(id), f.p, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ReceiveAdvert(ad); err != nil {
			t.Fatalf("honest advertisement refused: %v", err)
		}
		clients[id] = c
		o.u1 = append(o.u1, id)
	}
	for _, id := range o.u1 {
		if stages[id] < dropAfterShares {
			continue
		}
		ads, err := srv.AdvertsFor(id)
		if err != nil {
			o.err = err
			return o
		}
		sh, err := clients[id].ShareKeys(ads, r)
		if err != nil {
			continue // the client refuses to go on: a dropout
		}
		if err := srv.ReceiveShares(id, sh); err != nil {
			t.Fatalf("honest shares refused: %v", err)
		}
		o.u2 = append(o.u2, id)
	}
	for _, id := range o.u2 {
		if stages[id] < dropAfterInput {
			continue
		}
		sh, err := srv.SharesFor(id)
		if err != nil {
			o.err = err
			return o
		}
		in := make([]uint32, f.p.Length)
		for i := range in {
			in[i] = rand.Uint32()
		}
		m, err := clients[id].MaskInput(sh, in)
		if err != nil {
			continue
		}
		if err := srv.ReceiveMasked(m); err != nil {
			t.Fatalf("honest masked input refused: %v", err)
		}
		o.inputs[id] = in
		o.u3 = append(o.u3, id)
	}
	req, err := srv.UnmaskRequest()
	if err != nil {
		o.err = err
		return o
	}
	for _, id := range o.u3 {
		if stages[id] < complete {
			continue
		}
		resp, err := clients[id].Unmask(req)
		if err != nil {
			t.Fatalf("honest client %d refused an honest request: %v", id, err)
		}
		if err := srv.ReceiveUnmask(resp); err != nil {
			t.Fatalf("honest response refused: %v", err)
		}
		o.responders = append(o.responders, id)
	}
	o.result, o.err = srv.Sum()
	return o
}

// shouldSucceed is the oracle: a round unmasks exactly when at least t
// inputs arrived and every secret the server needs (the survivors' seeds,
// the dropped clients' keys) has at least t responding holders.
func (f *fixture) shouldSucceed(g *Graph, o *outcome) bool {
	t := f.p.Threshold
	if len(o.u1) < t || len(o.u2) < t || len(o.u3) < t {
		return false
	}
	enough := func(owner uint32) bool {
		c := 0
		for _, h := range g.holders(owner) {
			if slices.Contains(o.responders, h) {
				c++
			}
		}
		return c >= t
	}
	for _, id := range o.u2 {
		if !enough(id) {
			return false
		}
	}
	return true
}

// check verifies an outcome against the oracle and the exact sum.
func (f *fixture) check(g *Graph, o *outcome) error {
	want := f.shouldSucceed(g, o)
	if !want {
		if o.err == nil {
			return fmt.Errorf("the round unmasked though the oracle says it cannot (u3=%v responders=%v)", o.u3, o.responders)
		}
		if len(o.u3) < f.p.Threshold && o.result != nil {
			return errors.New("a result with fewer than t survivors")
		}
		return nil
	}
	if o.err != nil {
		return fmt.Errorf("the round failed: %v (u1=%v u2=%v u3=%v responders=%v)", o.err, o.u1, o.u2, o.u3, o.responders)
	}
	if !slices.Equal(o.result.Survivors, o.u3) {
		return fmt.Errorf("survivors %v, want %v", o.result.Survivors, o.u3)
	}
	sum := make([]uint32, f.p.Length)
	for _, id := range o.u3 {
		for i, v := range o.inputs[id] {
			sum[i] += v
		}
	}
	if !slices.Equal(sum, o.result.Sum) {
		return fmt.Errorf("unmasked sum differs from the survivors' sum (u2=%v u3=%v)", o.u2, o.u3)
	}
	return nil
}
