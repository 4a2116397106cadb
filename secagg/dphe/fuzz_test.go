package dphe

import (
	"math"
	"math/big"
	"testing"
)

func FuzzDecodeMessage(f *testing.F) {
	key := testKey(f)
	w := newWorld(f, key, 1, 6, 2, []uint32{1, 2, 3}, nil)
	msgs, err := w.users[1].encryptExact([]float64{1, 0, 0, 2, 0, 3})
	if err != nil {
		f.Fatal(err)
	}
	for _, m := range msgs {
		f.Add(m)
		f.Add(m[:len(m)/2])
	}
	f.Add([]byte("DPHM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b, key.Public())
		if err != nil {
			return
		}
		enc, err := m.Encode(key.Public())
		if err != nil {
			t.Fatal(err)
		}
		if string(enc) != string(b) {
			t.Fatal("decoded message does not re-encode to its input")
		}
		// The aggregator must never panic, whatever it accepts or rejects.
		_ = w.agg.ReceiveMessage(m)
	})
}

func FuzzDecodeAggregate(f *testing.F) {
	key := testKey(f)
	w := newWorld(f, key, 1, 4, 2, []uint32{1, 2, 3}, nil)
	for _, id := range []uint32{1, 2, 3} {
		msgs, _ := w.users[id].encryptExact([]float64{1, 0, 0, 2})
		for _, m := range msgs {
			if err := w.agg.Receive(m); err != nil {
				f.Fatal(err)
			}
		}
	}
	agg, err := w.agg.Sum()
	if err != nil {
		f.Fatal(err)
	}
	b, err := agg.Encode(key.Public())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:60])
	f.Add([]byte("DPHA\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAggregate(b, key.Public())
		if err != nil {
			return
		}
		again, err := a.Encode(key.Public())
		if err != nil || string(again) != string(b) {
			t.Fatalf("decoded aggregate does not re-encode to its input: %v", err)
		}
		// The key generator must never panic, whatever it accepts or refuses.
		_, _ = w.kg.Decrypt(a)
	})
}

// FuzzUnpack: decoding any plaintext of a packed sum errs or gives values
// within the bound of the round's users, never a panic.
func FuzzUnpack(f *testing.F) {
	pk := testKey(f).Public()
	pack, err := NewPacking(pk, 16, 40, 2, 8)
	if err != nil {
		f.Fatal(err)
	}
	m, _ := pack.pack(pk, 16, []float64{1, -2, 0.5})
	f.Add(m.Bytes(), uint8(3))
	f.Add([]byte{0xff, 0xff}, uint8(8))
	f.Fuzz(func(t *testing.T, b []byte, users uint8) {
		if users == 0 || int(users) > pack.MaxUsers {
			return
		}
		x := new(big.Int).SetBytes(b)
		if x.Cmp(pk.N()) >= 0 {
			return
		}
		out := make([]float64, pack.Lanes)
		if pack.unpack(pk, 16, int(users), x, out) != nil {
			return
		}
		for l, v := range out {
			if math.Abs(v) > float64(users)*2+1e-9 {
				t.Fatalf("lane %d = %v beyond %d users' bound", l, v, users)
			}
		}
	})
}
