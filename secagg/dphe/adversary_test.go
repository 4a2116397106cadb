package dphe

import (
	"errors"
	"math/big"
	mrand "math/rand/v2"
	"slices"
	"testing"

	"github.com/veil-privacy/veil/secagg/paillier"
)

// These tests play a malicious aggregator (and, for the nil cases, any
// sender of bytes) against the key generator: every attack must be refused.

// played is one round in which every user has encrypted an update and the
// (honest) aggregator holds all messages.
type played struct {
	*world
	ids     []uint32
	updates map[uint32][]float64
	msgs    map[uint32][]*received // each user's authenticated messages, by shard
}

// playRound sets up round on kg, lets every user encrypt a random sparse
// update and delivers every message to the aggregator.
func playRound(t *testing.T, kg *KeyGenerator, round uint64, ids []uint32, dim, capacity, nz int) *played {
	t.Helper()
	w := newRoundWorld(t, kg, round, dim, capacity, ids)
	p := &played{world: w, ids: ids, updates: map[uint32][]float64{}, msgs: map[uint32][]*received{}}
	rng := mrand.New(mrand.NewPCG(round, 99))
	pk := kg.PublicKey()
	for _, id := range ids {
		upd := sparseUpdate(rng, dim, nz)
		p.updates[id] = upd
		msgs, err := w.users[id].encryptExactMessages(upd)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := w.agg.ReceiveMessage(m); err != nil {
				t.Fatal(err)
			}
			p.msgs[id] = append(p.msgs[id], &received{msg: m, digest: digestBody(m.body(pk))})
		}
	}
	return p
}

// forge lets the aggregator multiply any chosen messages into an aggregate.
func (p *played) forge(t *testing.T, users ...uint32) *Aggregate {
	t.Helper()
	var rs []*received
	for _, u := range users {
		rs = append(rs, p.msgs[u]...)
	}
	agg, err := p.agg.combine(rs)
	if err != nil {
		t.Fatal(err)
	}
	return agg
}

// contributionsOf returns the genuine contributions of the users.
func (p *played) contributionsOf(users ...uint32) []Contribution {
	var out []Contribution
	for _, u := range users {
		for _, r := range p.msgs[u] {
			out = append(out, Contribution{UserID: u, Shard: r.msg.Shard, Shards: r.msg.Shards, Digest: r.digest, Tag: r.msg.Tag})
		}
	}
	return out
}

// checksumOf multiplies the users' checksum ciphertexts.
func (p *played) checksumOf(users ...uint32) *paillier.Ciphertext {
	pk := p.kg.PublicKey()
	var acc *paillier.Ciphertext
	for _, u := range users {
		for _, r := range p.msgs[u] {
			if acc == nil {
				acc = r.msg.Checksum
			} else {
				acc = pk.Add(acc, r.msg.Checksum)
			}
		}
	}
	return acc
}

// wantSum checks a decrypted result against the users' updates.
func (p *played) wantSum(t *testing.T, res *Result, users ...uint32) {
	t.Helper()
	for i := range res.Sum {
		want := 0.0
		for _, u := range users {
			want += p.updates[u][i]
		}
		if res.Sum[i] != want {
			t.Fatalf("coordinate %d: %v, want %v", i, res.Sum[i], want)
		}
	}
	if !slices.Equal(res.Users, users) {
		t.Fatalf("result users %v, want %v", res.Users, users)
	}
}

func newTestKeyGenerator(t *testing.T, maxOpen int) *KeyGenerator {
	t.Helper()
	kg, err := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t), FracBits: 24, MaxOpenRounds: maxOpen})
	if err != nil {
		t.Fatal(err)
	}
	return kg
}

// noPanic runs f and fails the test if it panics.
func noPanic(t *testing.T, what string, f func() error) error {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s panicked: %v", what, r)
			}
		}()
		err = f()
	}()
	return err
}

// TestKeyGeneratorRefusesOneUsersUpdate: the attack of issue 12 item 3, an
// aggregate made of one user's ciphertexts presented as the sum of three,
// in every variant a malicious aggregator holding all messages can build.
func TestKeyGeneratorRefusesOneUsersUpdate(t *testing.T) {
	kg := newTestKeyGenerator(t, 0)
	ids := []uint32{1, 2, 3}
	const dim, capacity, nz = 24, 4, 6 // two shards per user
	attacks := []struct {
		name  string
		build func(p *played) *Aggregate
		want  error
	}{
		{"user 1's messages, all three users' tags and checksums", func(p *played) *Aggregate {
			a := p.forge(t, 1)
			a.Contributions, a.Checksum = p.contributionsOf(1, 2, 3), p.checksumOf(1, 2, 3)
			return a
		}, ErrForgedAggregate},
		{"user 1's messages and checksum, all three users' tags", func(p *played) *Aggregate {
			a := p.forge(t, 1)
			a.Contributions = p.contributionsOf(1, 2, 3)
			return a
		}, ErrForgedAggregate},
		{"user 1's messages labelled with users 2 and 3 by made-up tags", func(p *played) *Aggregate {
			a := p.forge(t, 1)
			a.Contributions = append(p.contributionsOf(1),
				Contribution{UserID: 2, Shard: 0, Shards: 1}, Contribution{UserID: 3, Shard: 0, Shards: 1})
			return a
		}, ErrAuth},
		{"users 2 and 3 cancelled homomorphically (sum minus their messages)", func(p *played) *Aggregate {
			a := p.forge(t, 1, 2, 3)
			minus := p.forge(t, 2, 3)
			pk := p.kg.PublicKey()
			for j := range a.Ciphertexts {
				neg, err := pk.Neg(minus.Ciphertexts[j])
				if err != nil {
					t.Fatal(err)
				}
				a.Ciphertexts[j] = pk.Add(a.Ciphertexts[j], neg)
			}
			return a
		}, ErrForgedAggregate},
		{"one coordinate of the honest sum shifted", func(p *played) *Aggregate {
			a := p.forge(t, 1, 2, 3)
			pk := p.kg.PublicKey()
			a.Ciphertexts[5] = pk.AddPlain(a.Ciphertexts[5], big.NewInt(1))
			return a
		}, ErrForgedAggregate},
		{"two φ-positions of the honest sum swapped", func(p *played) *Aggregate {
			a := p.forge(t, 1, 2, 3)
			// Two coordinates whose sums differ, at their φ-positions (the
			// test reads φ from the key generator; an attacker would guess).
			phi := p.kg.open[p.setup.Aggregator.Round].phi
			sum := func(i int) float64 { return p.updates[1][i] + p.updates[2][i] + p.updates[3][i] }
			for i := 1; i < len(phi); i++ {
				if sum(i) != sum(0) {
					a.Ciphertexts[phi[0]], a.Ciphertexts[phi[i]] = a.Ciphertexts[phi[i]], a.Ciphertexts[phi[0]]
					return a
				}
			}
			t.Fatal("every coordinate has the same sum")
			return nil
		}, ErrForgedAggregate},
		{"user 1 counted twice in place of user 3", func(p *played) *Aggregate {
			a := p.forge(t, 1, 1, 2)
			a.Contributions, a.Checksum = p.contributionsOf(1, 2, 3), p.checksumOf(1, 2, 3)
			return a
		}, ErrForgedAggregate},
	}
	round := uint64(0)
	for _, at := range attacks {
		t.Run(at.name, func(t *testing.T) {
			round++
			p := playRound(t, kg, round, ids, dim, capacity, nz)
			res, err := kg.Decrypt(at.build(p))
			if !errors.Is(err, at.want) {
				t.Fatalf("forged aggregate: result %v, error %v; want %v", res != nil, err, at.want)
			}
			if res != nil {
				t.Fatal("a refused aggregate returned a result")
			}
		})
	}
	// Control: the honest aggregate of a fresh round decrypts to the sum.
	round++
	p := playRound(t, kg, round, ids, dim, capacity, nz)
	agg, err := p.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	res, err := kg.Decrypt(agg)
	if err != nil {
		t.Fatal(err)
	}
	p.wantSum(t, res, 1, 2, 3)
}

// TestKeyGeneratorRefusesReplayedRound: round r's aggregate presented as
// round r′ is refused, and refusing it costs neither round.
func TestKeyGeneratorRefusesReplayedRound(t *testing.T) {
	kg := newTestKeyGenerator(t, 0)
	ids := []uint32{4, 5, 6}
	p10 := playRound(t, kg, 10, ids, 16, 4, 3)
	p11 := playRound(t, kg, 11, ids, 16, 4, 3)
	a10, err := p10.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	replay := *a10
	replay.Round = 11
	if _, err := kg.Decrypt(&replay); !errors.Is(err, ErrAuth) {
		t.Fatalf("round 10's aggregate as round 11: %v, want ErrAuth", err)
	}
	// The refusal decrypted nothing: both rounds are still open and decrypt.
	res, err := kg.Decrypt(a10)
	if err != nil {
		t.Fatal(err)
	}
	p10.wantSum(t, res, ids...)
	a11, err := p11.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	if res, err = kg.Decrypt(a11); err != nil {
		t.Fatal(err)
	}
	p11.wantSum(t, res, ids...)
	// And round 11's aggregate cannot be replayed into round 10 afterwards.
	back := *a11
	back.Round = 10
	if _, err := kg.Decrypt(&back); !errors.Is(err, ErrAlreadyDecrypted) {
		t.Fatalf("round 11's aggregate as round 10: %v, want ErrAlreadyDecrypted", err)
	}
}

// TestKeyGeneratorDecryptsEachRoundOnce: a second decryption of a round is
// refused, whether of the same aggregate or of another subset of its users
// (which would let the two sums be subtracted), also after the round's
// state has been pruned and after later rounds have expired older ones;
// the key generator holds state for at most MaxOpenRounds rounds.
func TestKeyGeneratorDecryptsEachRoundOnce(t *testing.T) {
	const maxOpen = 3
	kg := newTestKeyGenerator(t, maxOpen)
	ids := []uint32{1, 2, 3, 4}
	p := playRound(t, kg, 1, ids, 12, 3, 3)
	all, err := p.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	three := p.forge(t, 1, 2, 3)
	three.Contributions, three.Checksum = p.contributionsOf(1, 2, 3), p.checksumOf(1, 2, 3)
	res, err := kg.Decrypt(all)
	if err != nil {
		t.Fatal(err)
	}
	p.wantSum(t, res, ids...)
	if got := kg.OpenRounds(); got != 0 {
		t.Fatalf("%d rounds still held after the only one was decrypted", got)
	}
	for name, a := range map[string]*Aggregate{"same aggregate": all, "users 1, 2, 3 only": three} {
		if _, err := kg.Decrypt(a); !errors.Is(err, ErrAlreadyDecrypted) {
			t.Fatalf("second decryption (%s): %v, want ErrAlreadyDecrypted", name, err)
		}
	}
	if _, err := kg.NewRound(RoundParams{Round: 1, Dim: 12, Capacity: 3, Users: ids}); !errors.Is(err, ErrWrongRound) {
		t.Fatalf("setting round 1 up again: %v, want ErrWrongRound", err)
	}
	// Rounds 2 … 40 set up and never decrypted: at most maxOpen are held,
	// the expired ones are refused, the open ones still work.
	var last *played
	for r := uint64(2); r <= 40; r++ {
		if r == 40 {
			last = playRound(t, kg, r, ids, 12, 3, 3)
			continue
		}
		if _, err := kg.NewRound(RoundParams{Round: r, Dim: 12, Capacity: 3, Users: ids}); err != nil {
			t.Fatal(err)
		}
		if got := kg.OpenRounds(); got > maxOpen {
			t.Fatalf("%d open rounds after round %d, bound is %d", got, r, maxOpen)
		}
	}
	if _, err := kg.Decrypt(all); !errors.Is(err, ErrAlreadyDecrypted) {
		t.Fatalf("round 1 after pruning: %v", err)
	}
	a40, err := last.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	if res, err = kg.Decrypt(a40); err != nil {
		t.Fatal(err)
	}
	last.wantSum(t, res, ids...)
}

// TestKeyGeneratorRefusesForgedTags: contributions whose tags, digests,
// shard counts or users do not match what the users authenticated are
// refused before any decryption, leaving the round open.
func TestKeyGeneratorRefusesForgedTags(t *testing.T) {
	kg := newTestKeyGenerator(t, 0)
	ids := []uint32{1, 2, 3}
	p := playRound(t, kg, 1, ids, 20, 3, 5) // two shards per user
	honest, err := p.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	tamper := func(f func(cs []Contribution) []Contribution) *Aggregate {
		a := *honest
		a.Contributions = f(slices.Clone(honest.Contributions))
		return &a
	}
	cases := []struct {
		name string
		a    *Aggregate
		want error
	}{
		{"tag bit flipped", tamper(func(cs []Contribution) []Contribution { cs[2].Tag[7] ^= 1; return cs }), ErrAuth},
		{"digest changed", tamper(func(cs []Contribution) []Contribution { cs[0].Digest[0] ^= 1; return cs }), ErrAuth},
		{"shard count raised", tamper(func(cs []Contribution) []Contribution {
			cs[0].Shards, cs[1].Shards = 3, 3
			return append(cs[:2], append([]Contribution{{UserID: 1, Shard: 2, Shards: 3}}, cs[2:]...)...)
		}), ErrAuth},
		{"a user's second shard dropped", tamper(func(cs []Contribution) []Contribution { return append(cs[:1], cs[2:]...) }), ErrIncomplete},
		{"user relabelled", tamper(func(cs []Contribution) []Contribution { cs[4].UserID, cs[5].UserID = 7, 7; return cs }), ErrUnknownUser},
		{"a user listed twice", tamper(func(cs []Contribution) []Contribution { return append(cs, cs[0], cs[1]) }), ErrMalformed},
		{"only two users", tamper(func(cs []Contribution) []Contribution { return cs[:4] }), ErrTooFewUsers},
		{"no contributions", tamper(func([]Contribution) []Contribution { return nil }), ErrTooFewUsers},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kg.Decrypt(tc.a); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if kg.OpenRounds() != 1 {
				t.Fatal("a refused forgery closed the round")
			}
		})
	}
	res, err := kg.Decrypt(honest)
	if err != nil {
		t.Fatal(err)
	}
	p.wantSum(t, res, ids...)
}

// TestNilAndShortCiphertextsRefused: missing, zero-value, out-of-range and
// missing-length ciphertexts are refused with an error by the aggregator,
// the encoders and the key generator, never with a panic.
func TestNilAndShortCiphertextsRefused(t *testing.T) {
	kg := newTestKeyGenerator(t, 0)
	ids := []uint32{1, 2, 3}
	p := playRound(t, kg, 1, ids, 10, 3, 2)
	pk := kg.PublicKey()
	// A second aggregator of the same round, to which nothing was delivered.
	fresh, err := NewAggregator(p.setup.Aggregator, AggregatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	genuine := p.msgs[1][0].msg
	msg := func(f func(m *Message)) *Message {
		m := *genuine
		m.Indices = slices.Clone(genuine.Indices)
		m.Ciphertexts = slices.Clone(genuine.Ciphertexts)
		f(&m)
		return &m
	}
	messages := []struct {
		name string
		m    *Message
		// shape says the message cannot even be encoded (Encode refuses it).
		shape bool
	}{
		{"nil ciphertext", msg(func(m *Message) { m.Ciphertexts[1] = nil }), true},
		{"zero-value ciphertext", msg(func(m *Message) { m.Ciphertexts[0] = &paillier.Ciphertext{} }), true},
		{"nil checksum", msg(func(m *Message) { m.Checksum = nil }), true},
		{"fewer ciphertexts", msg(func(m *Message) { m.Ciphertexts = m.Ciphertexts[:2] }), true},
		{"more ciphertexts", msg(func(m *Message) { m.Ciphertexts = append(m.Ciphertexts, m.Ciphertexts[0]) }), true},
		{"fewer indices", msg(func(m *Message) { m.Indices = m.Indices[:1] }), true},
		{"no ciphertexts, no indices", msg(func(m *Message) { m.Indices, m.Ciphertexts = nil, nil }), false},
		{"shard count beyond ⌈D/M⌉", msg(func(m *Message) { m.Shards = 1 << 30 }), false},
	}
	for _, tc := range messages {
		if err := noPanic(t, "ReceiveMessage("+tc.name+")", func() error { return fresh.ReceiveMessage(tc.m) }); !errors.Is(err, ErrMalformed) {
			t.Errorf("aggregator, %s: %v, want ErrMalformed", tc.name, err)
		}
		_, err := noPanic2(t, "Encode("+tc.name+")", func() ([]byte, error) { return tc.m.Encode(pk) })
		if tc.shape && !errors.Is(err, ErrMalformed) {
			t.Errorf("Encode, %s: %v, want ErrMalformed", tc.name, err)
		}
	}
	if err := noPanic(t, "ReceiveMessage(nil)", func() error { return fresh.ReceiveMessage(nil) }); !errors.Is(err, ErrMalformed) {
		t.Errorf("nil message: %v", err)
	}
	// The genuine message is still accepted: the refusals left no state.
	if err := fresh.ReceiveMessage(genuine); err != nil {
		t.Fatal(err)
	}

	honest, err := p.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	agg := func(f func(a *Aggregate)) *Aggregate {
		a := *honest
		a.Ciphertexts = slices.Clone(honest.Ciphertexts)
		f(&a)
		return &a
	}
	aggregates := []struct {
		name  string
		a     *Aggregate
		shape bool
	}{
		{"nil aggregate", nil, false},
		{"nil ciphertext", agg(func(a *Aggregate) { a.Ciphertexts[3] = nil }), true},
		{"zero-value ciphertext", agg(func(a *Aggregate) { a.Ciphertexts[0] = &paillier.Ciphertext{} }), true},
		{"nil checksum", agg(func(a *Aggregate) { a.Checksum = nil }), true},
		{"short", agg(func(a *Aggregate) { a.Ciphertexts = a.Ciphertexts[:len(a.Ciphertexts)-1] }), false},
		{"empty", agg(func(a *Aggregate) { a.Ciphertexts = nil }), false},
	}
	for _, tc := range aggregates {
		if _, err := noPanic2(t, "Decrypt("+tc.name+")", func() (*Result, error) { return kg.Decrypt(tc.a) }); !errors.Is(err, ErrMalformed) {
			t.Errorf("key generator, %s: %v, want ErrMalformed", tc.name, err)
		}
		if tc.shape {
			if _, err := noPanic2(t, "Aggregate.Encode("+tc.name+")", func() ([]byte, error) { return tc.a.Encode(pk) }); !errors.Is(err, ErrMalformed) {
				t.Errorf("Aggregate.Encode, %s: %v, want ErrMalformed", tc.name, err)
			}
		}
	}
	if kg.OpenRounds() != 1 {
		t.Fatal("a malformed aggregate closed the round")
	}
	res, err := kg.Decrypt(honest)
	if err != nil {
		t.Fatal(err)
	}
	p.wantSum(t, res, ids...)
}

// noPanic2 is noPanic for functions with a result.
func noPanic2[T any](t *testing.T, what string, f func() (T, error)) (T, error) {
	t.Helper()
	var v T
	err := noPanic(t, what, func() error {
		var err error
		v, err = f()
		return err
	})
	return v, err
}

// TestChecksumDoesNotDependOnShardSplit: the same update split into a
// different number of shards (capacity) checks out, since the shares of
// the offset always add up to it.
func TestChecksumDoesNotDependOnShardSplit(t *testing.T) {
	kg := newTestKeyGenerator(t, 0)
	for i, capacity := range []int{1, 2, 5, 30} {
		p := playRound(t, kg, uint64(i+1), []uint32{1, 2, 3}, 30, capacity, 5)
		a, err := p.agg.Sum()
		if err != nil {
			t.Fatal(err)
		}
		res, err := kg.Decrypt(a)
		if err != nil {
			t.Fatalf("capacity %d: %v", capacity, err)
		}
		p.wantSum(t, res, 1, 2, 3)
		if want := len(a.Contributions); want != 3*((5+capacity-1)/capacity) {
			t.Fatalf("capacity %d: %d contributions", capacity, want)
		}
	}
}
