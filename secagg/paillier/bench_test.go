package paillier

import (
	"math/big"
	"sync"
	"testing"
)

var benchKeyOnce sync.Once
var benchKey *PrivateKey

func key2048(b *testing.B) *PrivateKey {
	benchKeyOnce.Do(func() {
		k, err := GenerateKey(KeyOptions{})
		if err != nil {
			b.Fatal(err)
		}
		benchKey = k
	})
	return benchKey
}

func BenchmarkEncrypt2048(b *testing.B) {
	sk := key2048(b)
	for _, kind := range []RandomnessKind{RandomnessFull, RandomnessShortExponent} {
		b.Run(kind.String(), func(b *testing.B) {
			e, err := NewEncrypter(sk.Public(), EncrypterOptions{Randomness: kind, PoolSize: 1})
			if err != nil {
				b.Fatal(err)
			}
			m := big.NewInt(12345)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := e.Encrypt(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncryptPrecomputed2048(b *testing.B) {
	sk := key2048(b)
	e, _ := NewEncrypter(sk.Public(), EncrypterOptions{Randomness: RandomnessShortExponent, PoolSize: b.N})
	if err := e.Precompute(b.N); err != nil {
		b.Fatal(err)
	}
	m := big.NewInt(12345)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Encrypt(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecrypt2048(b *testing.B) {
	sk := key2048(b)
	e, _ := NewEncrypter(sk.Public(), EncrypterOptions{})
	c, _ := e.Encrypt(big.NewInt(5))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := sk.Decrypt(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAdd2048(b *testing.B) {
	sk := key2048(b)
	e, _ := NewEncrypter(sk.Public(), EncrypterOptions{})
	c, _ := e.Encrypt(big.NewInt(5))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c = sk.Add(c, c)
	}
}
