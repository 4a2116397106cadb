package dphe

import (
	"errors"
	"math"
	"math/big"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// packedWorld sets up a packed round of coords coordinates for ids.
func packedWorld(t *testing.T, kg *KeyGenerator, round uint64, coords int, bound float64, maxUsers int, ids []uint32, priv func() *Privacy) (*world, *Packing) {
	t.Helper()
	pack, err := NewPacking(kg.PublicKey(), kg.fracBits, coords, bound, maxUsers)
	if err != nil {
		t.Fatal(err)
	}
	setup, err := kg.NewRound(RoundParams{Round: round, Dim: pack.Blocks(), Capacity: pack.Blocks(), Users: ids, Packing: pack})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{kg: kg, setup: setup, users: map[uint32]*User{}}
	for _, id := range ids {
		u, err := NewUser(setup.Users[id], UserOptions{Encrypter: paillier.EncrypterOptions{Randomness: paillier.RandomnessShortExponent, ExponentBits: 256, PoolSize: 1}, Privacy: priv()})
		if err != nil {
			t.Fatal(err)
		}
		w.users[id] = u
	}
	if w.agg, err = NewAggregator(setup.Aggregator, AggregatorOptions{}); err != nil {
		t.Fatal(err)
	}
	return w, pack
}

// TestPackedRoundSumsExactly: with several values per plaintext, the key
// generator's sum is the users' sum lane by lane, negative values and a
// short last block included, on the fixed-point grid.
func TestPackedRoundSumsExactly(t *testing.T) {
	kg, err := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t), FracBits: 16, Random: seeded(7)})
	if err != nil {
		t.Fatal(err)
	}
	const coords = 50
	ids := []uint32{4, 9, 11, 12}
	w, pack := packedWorld(t, kg, 1, coords, 2, 8, ids, func() *Privacy { return testPrivacy(t) })
	if pack.Lanes < 3 || pack.Coordinates%pack.Lanes == 0 {
		t.Fatalf("test wants several lanes and a short last block: %d lanes over %d", pack.Lanes, coords)
	}
	want := make([]float64, coords)
	for i, id := range ids {
		upd := make([]float64, coords)
		for j := range upd {
			if (j+i)%3 != 0 {
				upd[j] = math.Ldexp(float64((j*7+i*13)%61-30), -5) // on the grid, |x| < 1
			}
			want[j] += upd[j]
		}
		msgs, err := w.users[id].encryptExact(upd)
		w.receiveAll(t, msgs, err)
	}
	agg, err := w.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	res, err := kg.Decrypt(agg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sum) != coords {
		t.Fatalf("sum of %d coordinates, want %d", len(res.Sum), coords)
	}
	for j := range want {
		if res.Sum[j] != want[j] {
			t.Errorf("coordinate %d: %v, want %v", j, res.Sum[j], want[j])
		}
	}
}

// TestPackingNeverOverflowsAtTheBound: MaxUsers users all at +Bound, all
// at −Bound, or alternating, in every lane, sum and decode exactly; one
// lane bit fewer, as a wrong width would give, does not (so the test
// catches an off-by-one), and a round of more than MaxUsers users is
// refused.
func TestPackingNeverOverflowsAtTheBound(t *testing.T) {
	pk := testKey(t).Public()
	const frac = 16
	for _, maxUsers := range []int{3, 8, 100} {
		pack, err := NewPacking(pk, frac, 40, 3.5, maxUsers)
		if err != nil {
			t.Fatal(err)
		}
		w, _ := pack.LaneBits(frac)
		if pack.Lanes*w > pk.Bits()-3 {
			t.Fatalf("%d lanes of %d bits exceed the key", pack.Lanes, w)
		}
		for _, pattern := range []func(u, l int) float64{
			func(u, l int) float64 { return 3.5 },
			func(u, l int) float64 { return -3.5 },
			func(u, l int) float64 { return []float64{3.5, -3.5}[l%2] },
			func(u, l int) float64 { return 1e9 * float64(1-2*((u+l)%2)) }, // clamped to ±Bound
		} {
			sum := new(big.Int)
			want := make([]float64, pack.Lanes)
			vals := make([]float64, pack.Lanes)
			for u := 0; u < maxUsers; u++ {
				for l := range vals {
					vals[l] = pattern(u, l)
					want[l] += max(-3.5, min(3.5, vals[l]))
				}
				m, err := pack.pack(pk, frac, vals)
				if err != nil {
					t.Fatal(err)
				}
				sum.Add(sum, m).Mod(sum, pk.N())
			}
			got := make([]float64, pack.Lanes)
			if err := pack.unpack(pk, frac, maxUsers, sum, got); err != nil {
				t.Fatalf("%d users at the bound: %v", maxUsers, err)
			}
			for l := range got {
				if got[l] != want[l] {
					t.Fatalf("%d users, lane %d: %v, want %v", maxUsers, l, got[l], want[l])
				}
			}
		}
	}
	// A lane one bit narrower than LaneBits loses the sum at the bound.
	pack, err := NewPacking(pk, frac, 40, 3.5, 8)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := pack.LaneBits(frac)
	q := new(big.Int).SetUint64(pack.laneQ(frac) * 8) // 8 users at +Bound in lane 0
	if q.BitLen()+1 != w || q.Cmp(new(big.Int).Lsh(big.NewInt(1), uint(w-2))) < 0 {
		t.Fatalf("lane sum %v does not need all %d bits", q, w)
	}
	kg, err := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t), FracBits: frac})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint32, 9)
	for i := range ids {
		ids[i] = uint32(i + 1)
	}
	if _, err := kg.NewRound(RoundParams{Round: 1, Dim: pack.Blocks(), Capacity: 1, Users: ids, Packing: pack}); err == nil {
		t.Error("a round of 9 users under a packing for 8 was accepted")
	}
	over := *pack
	over.Lanes++
	if err := over.Check(pk, frac); err == nil {
		t.Errorf("%d lanes of %d bits accepted on a %d-bit key", over.Lanes, w, pk.Bits())
	}
}

// TestUnpackRefusesOverflowedLanes: a sum whose lane exceeds the bound of
// the round's users (a user who encoded beyond ±Bound) is an error, not a
// wrong sum.
func TestUnpackRefusesOverflowedLanes(t *testing.T) {
	pk := testKey(t).Public()
	pack, err := NewPacking(pk, 16, 10, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	big3 := new(big.Int).SetUint64(pack.laneQ(16)*3 + 1) // lane 0 beyond 3 users' bound
	if err := pack.unpack(pk, 16, 3, big3, make([]float64, pack.Lanes)); !errors.Is(err, paillier.ErrOverflow) {
		t.Errorf("overflowed lane: %v, want ErrOverflow", err)
	}
	w, _ := pack.LaneBits(16)
	above := new(big.Int).Lsh(big.NewInt(1), uint(w*pack.Lanes)) // bits above the last lane
	if err := pack.unpack(pk, 16, 3, above, make([]float64, pack.Lanes)); !errors.Is(err, paillier.ErrOverflow) {
		t.Errorf("bits above the last lane: %v, want ErrOverflow", err)
	}
}

// TestSelectionSendsOnlySelectedBlocks: with Privacy.Select a user sends
// at most Count blocks, charges the selection and the values' Gaussian
// release (two events) before encrypting, and the decrypted sum is zero
// outside the selected blocks.
func TestSelectionSendsOnlySelectedBlocks(t *testing.T) {
	kg, err := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t), FracBits: 16, Random: seeded(8)})
	if err != nil {
		t.Fatal(err)
	}
	const coords, count = 400, 3
	var privs []*Privacy
	mk := func() *Privacy {
		p := newTestPrivacy(t, 1, 0.5, 1e6, byte(len(privs)+1))
		p.Select = &Selection{Epsilon: 50, Delta: 1e-5, Threshold: 0.2, Count: count}
		privs = append(privs, p)
		return p
	}
	ids := []uint32{1, 2, 3}
	w, pack := packedWorld(t, kg, 1, coords, 4, 8, ids, mk)
	for i, id := range ids {
		upd := make([]float64, coords)
		upd[i*pack.Lanes] = 1 // one block carries the whole norm
		msgs, err := w.users[id].Encrypt(upd)
		w.receiveAll(t, msgs, err)
		evs, err := privs[i].Ledger.(*dp.Ledger).Events("user data")
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 {
			t.Errorf("user %d charged %d events, want the selection and the values' release", id, len(evs))
		}
	}
	agg, err := w.agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	res, err := kg.Decrypt(agg)
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[int]bool{}
	for j, x := range res.Sum {
		if x != 0 {
			blocks[j/pack.Lanes] = true
		}
	}
	if len(blocks) == 0 || len(blocks) > count*len(ids) {
		t.Errorf("non-zero blocks %v: want between 1 and %d", blocks, count*len(ids))
	}
}

// TestSelectionEventsAreCharged checks the selection's charge against
// svt's proven cost and the Gaussian release on Count·Lanes coordinates.
func TestSelectionEventsAreCharged(t *testing.T) {
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("u", dp.Budget{Epsilon: 10, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	p := Privacy{Clip: 1, NoiseMultiplier: 1, Ledger: l, Principal: "u", Select: &Selection{Epsilon: 1, Delta: 1e-5, Threshold: 0.1, Count: 4}}
	evs, err := ContributionEvents(p, 100, 10)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := dp.GaussianGrid(1, 40)
	mu, _ := g.GaussianMultiplier(1)
	if len(evs) != 2 || evs[1].NoiseMultiplier != mu {
		t.Fatalf("events %+v: want the selection and a Gaussian of multiplier %v", evs, mu)
	}
	p.Threshold = 1
	if _, err := ContributionEvents(p, 100, 10); err == nil {
		t.Error("a selection with a threshold was accepted")
	}
	p.Threshold = 0
	p.Select.Count = 11
	if _, err := ContributionEvents(p, 100, 10); err == nil {
		t.Error("selecting 11 of 10 blocks was accepted")
	}
}

// receiveAll hands a user's messages (and the error of making them) to
// the aggregator, failing the test on any error.
func (w *world) receiveAll(t *testing.T, msgs [][]byte, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := w.agg.Receive(m); err != nil {
			t.Fatal(err)
		}
	}
}
