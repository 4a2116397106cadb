package dphe

import (
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/secagg/paillier"
)

var (
	keyOnce sync.Once
	keyVal  *paillier.PrivateKey
	keyErr  error
)

// testKey returns a shared 512-bit key (test binaries accept small keys).
func testKey(t testing.TB) *paillier.PrivateKey {
	t.Helper()
	keyOnce.Do(func() { keyVal, keyErr = smallKey() })
	if keyErr != nil {
		t.Fatal(keyErr)
	}
	return keyVal
}

// smallKey generates a 512-bit key, an insecure size the tests ask for by name.
func smallKey() (*paillier.PrivateKey, error) {
	return paillier.GenerateKey(paillier.KeyOptions{Bits: 512, AllowInsecureTestKeySize: true})
}

// seeded returns a deterministic ChaCha8 byte stream for reproducible tests.
func seeded(seed uint64) io.Reader {
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	return mrand.NewChaCha8(s)
}

type world struct {
	kg    *KeyGenerator
	setup *RoundSetup
	users map[uint32]*User
	agg   *Aggregator
}

func newWorld(t testing.TB, key *paillier.PrivateKey, round uint64, dim, capacity int, ids []uint32, random io.Reader) *world {
	t.Helper()
	kg, err := NewKeyGenerator(KeyGeneratorOptions{Key: key, FracBits: 24, Random: random})
	if err != nil {
		t.Fatal(err)
	}
	return newRoundWorld(t, kg, round, dim, capacity, ids)
}

func newRoundWorld(t testing.TB, kg *KeyGenerator, round uint64, dim, capacity int, ids []uint32) *world {
	t.Helper()
	setup, err := kg.NewRound(RoundParams{Round: round, Dim: dim, Capacity: capacity, Users: ids})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{kg: kg, setup: setup, users: map[uint32]*User{}}
	for _, id := range ids {
		u, err := NewUser(setup.Users[id], UserOptions{Encrypter: paillier.EncrypterOptions{Randomness: paillier.RandomnessShortExponent, ExponentBits: 256, PoolSize: 1}, Privacy: testPrivacy(t)})
		if err != nil {
			t.Fatal(err)
		}
		w.users[id] = u
	}
	if w.agg, err = NewAggregator(setup.Aggregator, AggregatorOptions{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// sparseUpdate draws an update with exactly nz non-zeros on the 2^-24 grid.
func sparseUpdate(rng *mrand.Rand, dim, nz int) []float64 {
	w := make([]float64, dim)
	for _, i := range rng.Perm(dim)[:nz] {
		w[i] = math.Ldexp(float64(rng.Int64N(1<<30)-1<<29), -24)
		if w[i] == 0 {
			w[i] = 1
		}
	}
	return w
}

func TestSumIsExact(t *testing.T) {
	key := testKey(t)
	rng := mrand.New(mrand.NewPCG(7, 8))
	cases := []struct {
		dim, capacity, users int
		density              float64
	}{
		{1, 1, 3, 1},
		{10, 3, 3, 0.2},
		{10, 3, 4, 0.9}, // shards: up to 9 non-zeros with M = 3
		{64, 7, 5, 0.1},
		{101, 101, 3, 0.5},
		{200, 20, 6, 0.1},
		{50, 5, 3, 0}, // all-zero updates still send one padded message
	}
	for ci, tc := range cases {
		t.Run(fmt.Sprintf("D%d_M%d_N%d_d%.1f", tc.dim, tc.capacity, tc.users, tc.density), func(t *testing.T) {
			ids := make([]uint32, tc.users)
			for i := range ids {
				ids[i] = uint32(100 + 3*i)
			}
			w := newWorld(t, key, uint64(ci), tc.dim, tc.capacity, ids, nil)
			want := make([]float64, tc.dim)
			for _, id := range ids {
				nz := int(math.Round(tc.density * float64(tc.dim)))
				upd := sparseUpdate(rng, tc.dim, nz)
				for i, x := range upd {
					want[i] += x
				}
				msgs, err := w.users[id].encryptExact(upd)
				if err != nil {
					t.Fatal(err)
				}
				if wantShards := max(1, (nz+tc.capacity-1)/tc.capacity); len(msgs) != wantShards {
					t.Fatalf("user %d sent %d messages, want %d", id, len(msgs), wantShards)
				}
				// Deliver shards in reverse order: order of shards is free.
				for i := len(msgs) - 1; i >= 0; i-- {
					if err := w.agg.Receive(msgs[i]); err != nil {
						t.Fatal(err)
					}
				}
			}
			agg, err := w.agg.Sum()
			if err != nil {
				t.Fatal(err)
			}
			res, err := w.kg.Decrypt(agg)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if res.Sum[i] != want[i] {
					t.Fatalf("coordinate %d: sum %v, want exactly %v", i, res.Sum[i], want[i])
				}
			}
			if got := res.Mean()[0]; got != want[0]/float64(tc.users) {
				t.Fatalf("mean[0] = %v", got)
			}
		})
	}
}

func TestFloat32Update(t *testing.T) {
	w := newWorld(t, testKey(t), 1, 4, 2, []uint32{1, 2, 3}, nil)
	updates := [][]float32{{0.5, 0, 0, -0.25}, {0, 1.5, 0, 0}, {0, 0, 0, 2}}
	for i, id := range []uint32{1, 2, 3} {
		msgs, err := w.users[id].encryptExact32(updates[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := w.agg.Receive(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	agg, _ := w.agg.Sum()
	res, err := w.kg.Decrypt(agg)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.5, 1.5, 0, 1.75}
	for i := range want {
		if res.Sum[i] != want[i] {
			t.Fatalf("sum = %v, want %v", res.Sum, want)
		}
	}
}

// chiSquare returns Pearson's statistic for homogeneity of two histograms.
func chiSquare(a, b map[string]int) (float64, int) {
	keys := map[string]bool{}
	na, nb := 0, 0
	for k, v := range a {
		keys[k] = true
		na += v
	}
	for k, v := range b {
		keys[k] = true
		nb += v
	}
	stat := 0.0
	for k := range keys {
		tot := float64(a[k] + b[k])
		ea := tot * float64(na) / float64(na+nb)
		eb := tot * float64(nb) / float64(na+nb)
		stat += (float64(a[k])-ea)*(float64(a[k])-ea)/ea + (float64(b[k])-eb)*(float64(b[k])-eb)/eb
	}
	return stat, len(keys) - 1
}

// TestAggregatorViewIndependentOfSupport shows the aggregator's view of a
// message (its positions after undoing φ⁽ⁿ⁾, and its size) has the same
// distribution for two different supports of the same size, while the same
// statistic detects the support at once when φ is not applied.
func TestAggregatorViewIndependentOfSupport(t *testing.T) {
	const dim, capacity, trials = 6, 3, 1500
	key := testKey(t)
	supports := [][]int{{0, 1}, {3, 5}}
	kg, err := NewKeyGenerator(KeyGeneratorOptions{Key: key, FracBits: 24, Random: seeded(42)})
	if err != nil {
		t.Fatal(err)
	}
	hist := []map[string]int{{}, {}}
	leaky := []map[string]int{{}, {}}
	sizes := map[int]bool{}
	round := uint64(0)
	for s, sup := range supports {
		for trial := 0; trial < trials; trial++ {
			round++
			setup, err := kg.NewRound(RoundParams{Round: round, Dim: dim, Capacity: capacity, Users: []uint32{1, 2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			u, err := NewUser(setup.Users[1], UserOptions{Random: seeded(round), Encrypter: paillier.EncrypterOptions{PoolSize: 1}, Privacy: testPrivacy(t)})
			if err != nil {
				t.Fatal(err)
			}
			upd := make([]float64, dim)
			for _, i := range sup {
				upd[i] = 1 // binary weights: all information is in the support
			}
			msgs, err := u.encryptExactMessages(upd)
			if err != nil || len(msgs) != 1 {
				t.Fatalf("%v, %d messages", err, len(msgs))
			}
			enc, _ := msgs[0].Encode(key.Public())
			sizes[len(enc)] = true
			// The aggregator knows φ⁽ⁿ⁾: its view is φ(support ∪ padding), in order.
			inv, _ := invertPerm(setup.Aggregator.Users[1].PhiUser)
			view := ""
			for _, ix := range msgs[0].Indices {
				view += fmt.Sprint(inv[ix], ",")
			}
			hist[s][view]++
			// Control: without φ the aggregator would see support ∪ padding itself.
			phiInv, _ := invertPerm(setup.Users[1].Phi)
			pos := make([]int, 0, capacity)
			for _, ix := range msgs[0].Indices {
				pos = append(pos, int(phiInv[inv[ix]]))
			}
			key := fmt.Sprint(sortedInts(pos))
			leaky[s][key]++
		}
	}
	stat, df := chiSquare(hist[0], hist[1])
	// df = 119 ordered-set cells at most; the 0.999 quantile of χ²(119) is about 173.
	if stat > 173 {
		t.Fatalf("aggregator view depends on the support: χ² = %.1f with %d degrees of freedom", stat, df)
	}
	lstat, ldf := chiSquare(leaky[0], leaky[1])
	if lstat < 1000 {
		t.Fatalf("control failed: un-permuted view not distinguishable (χ² = %.1f, df %d)", lstat, ldf)
	}
	if len(sizes) != 1 {
		t.Fatalf("message sizes differ between supports: %v", sizes)
	}
	t.Logf("permuted view χ² = %.1f (df %d); control χ² = %.1f (df %d)", stat, df, lstat, ldf)
}

func sortedInts(x []int) []int {
	for i := 1; i < len(x); i++ {
		for j := i; j > 0 && x[j] < x[j-1]; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
	return x
}

func TestMessageSizeHidesNonZeroCount(t *testing.T) {
	w := newWorld(t, testKey(t), 1, 20, 5, []uint32{1, 2, 3}, nil)
	sizes := map[int]bool{}
	for i, nz := range []int{0, 1, 5} {
		upd := make([]float64, 20)
		for j := 0; j < nz; j++ {
			upd[j*3] = float64(j + 1)
		}
		msgs, err := w.users[uint32(i+1)].encryptExact(upd)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%v, %d messages", err, len(msgs))
		}
		sizes[len(msgs[0])] = true
	}
	if len(sizes) != 1 {
		t.Fatalf("message size depends on the number of non-zeros: %v", sizes)
	}
}

// TestKeyGeneratorSeesOnlySums: two rounds whose users split the same sum
// differently give the key generator identical plaintext output; it refuses
// aggregates of fewer than three users and decrypts a round once; no
// aggregate ciphertext equals any user's ciphertext.
func TestKeyGeneratorSeesOnlySums(t *testing.T) {
	key := testKey(t)
	kg, _ := NewKeyGenerator(KeyGeneratorOptions{Key: key, FracBits: 24})
	ids := []uint32{1, 2, 3}
	splits := [][][]float64{
		{{1, 0, 0, 2}, {0, 3, 0, 0}, {0, 0, 0, 1}},
		{{0, 1, 0, 0}, {1, 2, 0, 1}, {0, 0, 0, 2}},
	}
	var outs [][]float64
	for r, split := range splits {
		w := newRoundWorld(t, kg, uint64(10+r), 4, 2, ids)
		userCts := map[string]bool{}
		for i, id := range ids {
			msgs, err := w.users[id].encryptExactMessages(split[i])
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				for _, c := range m.Ciphertexts {
					userCts[c.Value().String()] = true
				}
				if err := w.agg.ReceiveMessage(m); err != nil {
					t.Fatal(err)
				}
			}
		}
		agg, err := w.agg.Sum()
		if err != nil {
			t.Fatal(err)
		}
		for j, c := range agg.Ciphertexts {
			if userCts[c.Value().String()] {
				t.Fatalf("aggregate position %d carries a user's ciphertext verbatim", j)
			}
		}
		short := *agg
		short.Contributions = nil
		for _, c := range agg.Contributions {
			if c.UserID != ids[2] {
				short.Contributions = append(short.Contributions, c)
			}
		}
		if _, err := kg.Decrypt(&short); !errors.Is(err, ErrTooFewUsers) {
			t.Fatalf("two-user aggregate: %v, want ErrTooFewUsers", err)
		}
		res, err := kg.Decrypt(agg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kg.Decrypt(agg); !errors.Is(err, ErrAlreadyDecrypted) {
			t.Fatalf("second decryption: %v, want ErrAlreadyDecrypted", err)
		}
		outs = append(outs, res.Sum)
	}
	for i := range outs[0] {
		if outs[0][i] != outs[1][i] {
			t.Fatalf("key generator output differs for equal sums: %v vs %v", outs[0], outs[1])
		}
	}
}

func TestAggregatorRefusesFewerThanThreeUsers(t *testing.T) {
	w := newWorld(t, testKey(t), 1, 8, 2, []uint32{1, 2, 3}, nil)
	for _, id := range []uint32{1, 2} {
		msgs, _ := w.users[id].encryptExact(make([]float64, 8))
		for _, m := range msgs {
			if err := w.agg.Receive(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := w.agg.Sum(); !errors.Is(err, ErrTooFewUsers) {
		t.Fatalf("Sum with two users: %v, want ErrTooFewUsers", err)
	}
	if _, err := w.kg.NewRound(RoundParams{Round: 99, Dim: 4, Capacity: 1, Users: []uint32{1, 2}}); !errors.Is(err, ErrTooFewUsers) {
		t.Fatalf("NewRound with two users: %v", err)
	}
}

func TestRejectsBadMessages(t *testing.T) {
	key := testKey(t)
	ids := []uint32{1, 2, 3}
	// An earlier round of the same key generator, then the round under test.
	old := newWorld(t, key, 4, 12, 3, ids, nil)
	w := newRoundWorld(t, old.kg, 5, 12, 3, ids)
	upd := []float64{1, 0, 2, 0, 0, 3, 0, 4, 0, 0, 0, 5} // 5 non-zeros → 2 shards
	msgs, err := w.users[1].encryptExact(upd)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("%v, %d messages", err, len(msgs))
	}
	good := msgs[0]
	pk := key.Public()
	size := pk.CiphertextSize()
	count := 3
	idxOff := msgHeaderLen
	ctOff := idxOff + 4*count

	mutate := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	// Another key generator's world: same user id, foreign key.
	otherKey, err := smallKey()
	if err != nil {
		t.Fatal(err)
	}
	ow := newWorld(t, otherKey, 5, 12, 3, ids, nil)
	foreign, _ := ow.users[1].encryptExact(upd)
	// The old round of the same key generator.
	oldMsgs, _ := old.users[1].encryptExact(upd)

	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"truncated", good[:len(good)-1], ErrMalformed},
		{"truncated header", good[:20], ErrMalformed},
		{"padded", append(append([]byte(nil), good...), 0), ErrMalformed},
		{"bad version", mutate(func(b []byte) []byte { b[4] = 1; return b }), ErrMalformed},
		{"reordered indices", mutate(func(b []byte) []byte {
			copy(b[idxOff:idxOff+4], good[idxOff+4:idxOff+8])
			copy(b[idxOff+4:idxOff+8], good[idxOff:idxOff+4])
			return b
		}), ErrMalformed},
		{"reordered ciphertexts", mutate(func(b []byte) []byte {
			copy(b[ctOff:ctOff+size], good[ctOff+size:ctOff+2*size])
			copy(b[ctOff+size:ctOff+2*size], good[ctOff:ctOff+size])
			return b
		}), ErrAuth},
		{"ciphertext not coprime to n, unauthenticated", mutate(func(b []byte) []byte {
			pk.N().FillBytes(b[ctOff : ctOff+size])
			return b
		}), ErrAuth},
		{"ciphertext not coprime to n, authenticated", mutate(func(b []byte) []byte {
			pk.N().FillBytes(b[ctOff : ctOff+size])
			return remac(b, w.setup.Users[1].MACKey)
		}), paillier.ErrInvalidCiphertext},
		{"ciphertext zero", mutate(func(b []byte) []byte {
			clear(b[ctOff : ctOff+size])
			return b
		}), paillier.ErrInvalidCiphertext},
		{"shard index changed", mutate(func(b []byte) []byte { b[37+8+4+3] ^= 1; return b }), ErrAuth},
		{"user changed", mutate(func(b []byte) []byte { b[37+8+3] = 2; return b }), ErrAuth},
		{"foreign key", foreign[0], ErrForeignKey},
		{"old round", oldMsgs[0], ErrWrongRound},
		{"unknown user", mutate(func(b []byte) []byte { b[37+8+3] = 9; return b }), ErrUnknownUser},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := w.agg.Receive(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// Rejections left no state: the genuine message is accepted, then a replay is not.
	if err := w.agg.Receive(good); err != nil {
		t.Fatal(err)
	}
	if err := w.agg.Receive(good); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay: %v, want ErrReplay", err)
	}
	// Users 2 and 3 complete; user 1 lacks its second shard.
	for _, id := range []uint32{2, 3} {
		ms, _ := w.users[id].encryptExact(make([]float64, 12))
		for _, m := range ms {
			if err := w.agg.Receive(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := w.agg.Sum(); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Sum with a missing shard: %v, want ErrIncomplete", err)
	}
	if err := w.agg.Receive(msgs[1]); err != nil {
		t.Fatal(err)
	}
	agg, err := w.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.agg.Receive(msgs[1]); !errors.Is(err, ErrClosed) {
		t.Fatalf("message after Sum: %v, want ErrClosed", err)
	}
	// The aggregate round-trips through its encoding and decrypts correctly.
	enc, err := agg.Encode(pk)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeAggregate(enc, pk)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.kg.Decrypt(dec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range upd {
		if res.Sum[i] != upd[i] {
			t.Fatalf("sum %v, want %v", res.Sum, upd)
		}
	}
	// A foreign aggregate is refused by the key generator.
	if _, err := ow.kg.Decrypt(agg); !errors.Is(err, ErrForeignKey) {
		t.Fatalf("foreign aggregate: %v", err)
	}
	// A user cannot encrypt twice in a round.
	if _, err := w.users[1].encryptExact(upd); err == nil {
		t.Fatal("second Encrypt in a round accepted")
	}
}

// remac recomputes the aggregator MAC of an encoded message, as its user
// (who holds the key) could.
func remac(b []byte, key [32]byte) []byte {
	mac := computeMAC(key, b[:len(b)-32])
	copy(b[len(b)-32:], mac[:])
	return b
}

func TestPermutationsAreIndexArrays(t *testing.T) {
	rng, err := newStream(seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	const d, trials = 4, 24000
	counts := map[string]int{}
	for i := 0; i < trials; i++ {
		p := randomPerm(rng, d)
		if _, err := invertPerm(p); err != nil {
			t.Fatal(err)
		}
		counts[fmt.Sprint(p)]++
	}
	if len(counts) != 24 {
		t.Fatalf("%d of 24 permutations of 4 seen", len(counts))
	}
	stat := 0.0
	for _, c := range counts {
		stat += (float64(c) - 1000) * (float64(c) - 1000) / 1000
	}
	if stat > 49.7 { // 0.999 quantile of χ²(23)
		t.Fatalf("permutations not uniform: χ² = %.1f", stat)
	}
	if _, err := invertPerm([]uint32{0, 0, 1}); err == nil {
		t.Fatal("non-permutation accepted")
	}
}

func TestOptionValidation(t *testing.T) {
	kg, _ := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t)})
	for _, p := range []RoundParams{
		{Dim: 0, Capacity: 1, Users: []uint32{1, 2, 3}},
		{Dim: 5, Capacity: 6, Users: []uint32{1, 2, 3}},
		{Dim: 5, Capacity: 2, Users: []uint32{1, 1, 3}},
	} {
		if _, err := kg.NewRound(p); err == nil {
			t.Errorf("round %+v accepted", p)
		}
	}
	if _, err := kg.NewRound(RoundParams{Round: 1, Dim: 5, Capacity: 2, Users: []uint32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := kg.NewRound(RoundParams{Round: 1, Dim: 5, Capacity: 2, Users: []uint32{1, 2, 3}}); err == nil {
		t.Error("round set up twice")
	}
	if _, err := NewKeyGenerator(KeyGeneratorOptions{KeyBits: 128}); !errors.Is(err, paillier.ErrKeyTooSmall) {
		t.Errorf("128-bit key generator: %v", err)
	}
}

func TestKeysNeverPrinted(t *testing.T) {
	kg, _ := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t)})
	setup, err := kg.NewRound(RoundParams{Round: 1, Dim: 40, Capacity: 4, Users: []uint32{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	uk := setup.Users[1]
	phi := fmt.Sprint(uk.Phi)
	secrets := []string{fmt.Sprintf("%x", uk.MACKey[:]), fmt.Sprintf("%x", uk.TagKey[:]), fmt.Sprintf("%x", uk.ChecksumKey[:]),
		uk.ChecksumOffset.String(), uk.ChecksumOffset.Text(16), phi[1 : len(phi)-1]}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{uk, setup.Aggregator, setup} {
			out := fmt.Sprintf(format, v)
			for _, s := range secrets {
				if strings.Contains(out, s) {
					t.Fatalf("%s of %T printed a secret: %s", format, v, out)
				}
			}
		}
	}
	uk.Zero()
	if uk.MACKey != [32]byte{} || uk.TagKey != [32]byte{} || uk.ChecksumKey != [32]byte{} || uk.ChecksumOffset.Sign() != 0 ||
		uk.Phi[5] != 0 || uk.Phi[7] != 0 {
		t.Fatal("Zero left secrets in place")
	}
	// The user's copy is its own: zeroing it leaves the key generator's φ intact.
	if kg.open[1].phi[5] == 0 && kg.open[1].phi[7] == 0 {
		t.Fatal("UserKeys.Zero cleared the key generator's φ")
	}
}
