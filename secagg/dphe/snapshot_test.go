package dphe

import (
	"errors"
	"reflect"
	"testing"
)

// TestSnapshotResumesOpenRoundsAndNotFinishedOnes: a key generator
// restored from a snapshot hands out the same keys for an open round and
// decrypts it; restored from the snapshot taken after that decryption,
// it refuses the round (no second decryption across a restart).
func TestSnapshotResumesOpenRoundsAndNotFinishedOnes(t *testing.T) {
	ids := []uint32{1, 2, 3}
	a, err := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t), FracBits: 24, Random: seeded(11)})
	if err != nil {
		t.Fatal(err)
	}
	setup, err := a.NewRound(RoundParams{Round: 5, Dim: 9, Capacity: 3, Users: ids})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t), FracBits: 24, Resume: a.Snapshot()})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		uk, err := b.UserKeys(5, id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(uk, setup.Users[id]) {
			t.Errorf("user %d's keys differ after the restart", id)
		}
	}
	ak, err := b.AggregatorKeys(5)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ak, setup.Aggregator) {
		t.Error("the aggregator's keys differ after the restart")
	}
	if _, err := b.NewRound(RoundParams{Round: 5, Dim: 9, Capacity: 3, Users: ids}); !errors.Is(err, ErrWrongRound) {
		t.Errorf("round 5 set up again after the restart: %v", err)
	}
	if _, err := b.NewRound(RoundParams{Round: 6, Dim: 9, Capacity: 3, Users: ids}); err != nil {
		t.Fatal(err)
	}
	agg := sumRound(t, setup, []float64{1, 0, 0, 2, 0, 0, 0, 0, 3})
	res, err := b.Decrypt(agg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sum[8] != 9 || res.Sum[0] != 3 {
		t.Errorf("sum %v", res.Sum)
	}
	c, err := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t), FracBits: 24, Resume: b.Snapshot()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decrypt(agg); !errors.Is(err, ErrAlreadyDecrypted) {
		t.Errorf("round 5 decrypted again after a restart: %v", err)
	}
	if _, err := c.UserKeys(5, 1); !errors.Is(err, ErrAlreadyDecrypted) {
		t.Errorf("keys of a finished round handed out: %v", err)
	}
	if _, err := c.UserKeys(6, 1); err != nil {
		t.Errorf("round 6, still open, lost across the restart: %v", err)
	}
}

// sumRound has every user of setup send update exactly and returns the
// aggregate.
func sumRound(t *testing.T, setup *RoundSetup, update []float64) *Aggregate {
	t.Helper()
	agg, err := NewAggregator(setup.Aggregator, AggregatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, uk := range setup.Users {
		u, err := NewUser(uk, UserOptions{Privacy: testPrivacy(t)})
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := u.encryptExact(update)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := agg.Receive(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, err := agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestBeforeDecryptFailureDecryptsNothing: when the key generator cannot
// record that a round is finished, it decrypts nothing, and the round
// stays closed.
func TestBeforeDecryptFailureDecryptsNothing(t *testing.T) {
	var calls []uint64
	fail := true
	kg, err := NewKeyGenerator(KeyGeneratorOptions{Key: testKey(t), FracBits: 24, BeforeDecrypt: func(r uint64) error {
		calls = append(calls, r)
		if fail {
			return errors.New("disk full")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	setup, err := kg.NewRound(RoundParams{Round: 1, Dim: 4, Capacity: 2, Users: []uint32{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	agg := sumRound(t, setup, []float64{1, 0, 2, 0})
	if res, err := kg.Decrypt(agg); err == nil || res != nil {
		t.Fatalf("decrypted although the round could not be recorded finished: %v", res)
	}
	fail = false
	if _, err := kg.Decrypt(agg); !errors.Is(err, ErrAlreadyDecrypted) {
		t.Errorf("second attempt: %v, want ErrAlreadyDecrypted", err)
	}
	if !reflect.DeepEqual(calls, []uint64{1}) {
		t.Errorf("BeforeDecrypt called for %v, want once for round 1", calls)
	}
}
