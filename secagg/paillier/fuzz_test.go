package paillier

import (
	"bytes"
	"math/big"
	"testing"
)

func FuzzUnmarshalPublicKey(f *testing.F) {
	sk := testKey(f)
	pb, _ := sk.Public().MarshalBinary()
	f.Add(pb)
	f.Add(pb[:len(pb)-1])
	f.Add([]byte{EncodingVersion, tagPublic, 0, 0, 0, 1, 4})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pk, err := UnmarshalPublicKey(b, testDecode)
		if err != nil {
			return
		}
		again, _ := pk.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatal("accepted a non-canonical public key encoding")
		}
	})
}

func FuzzUnmarshalPrivateKey(f *testing.F) {
	sk := testKey(f)
	sb, _ := sk.MarshalBinary()
	f.Add(sb)
	f.Add(sb[:10])
	f.Add(append(sb, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := UnmarshalPrivateKey(b, testDecode)
		if err != nil {
			return
		}
		e, _ := NewEncrypter(k.Public(), EncrypterOptions{PoolSize: 1})
		c, err := e.Encrypt(big.NewInt(17))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := k.Decrypt(c); err != nil || m.Int64() != 17 {
			t.Fatalf("decoded key does not decrypt: %v %v", m, err)
		}
	})
}

func FuzzUnmarshalCiphertext(f *testing.F) {
	sk := testKey(f)
	pk := sk.Public()
	e, _ := NewEncrypter(pk, EncrypterOptions{PoolSize: 1})
	c, _ := e.Encrypt(big.NewInt(3))
	cb, _ := c.MarshalBinary()
	f.Add(cb)
	f.Add(cb[:5])
	f.Add(appendInt([]byte{EncodingVersion, tagCiphertext}, sk.p))
	f.Add(appendInt([]byte{EncodingVersion, tagCiphertext}, pk.NSquared()))
	f.Fuzz(func(t *testing.T, b []byte) {
		ct, err := pk.UnmarshalCiphertext(b)
		if err != nil {
			return
		}
		if err := pk.Validate(ct); err != nil {
			t.Fatalf("decoder accepted an invalid ciphertext: %v", err)
		}
		if _, err := sk.Decrypt(ct); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzParseFixed(f *testing.F) {
	sk := testKey(f)
	pk := sk.Public()
	e, _ := NewEncrypter(pk, EncrypterOptions{PoolSize: 1})
	c, _ := e.Encrypt(big.NewInt(3))
	f.Add(pk.AppendFixed(nil, c))
	f.Add(make([]byte, pk.CiphertextSize()))
	f.Add(bytes.Repeat([]byte{0xff}, pk.CiphertextSize()))
	f.Fuzz(func(t *testing.T, b []byte) {
		ct, err := pk.ParseFixed(b)
		if err != nil {
			return
		}
		if ct.c.Sign() <= 0 || ct.c.Cmp(pk.nSquared) >= 0 {
			t.Fatal("ParseFixed accepted a value outside [1, n²)")
		}
	})
}
