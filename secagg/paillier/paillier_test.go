package paillier

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
)

// testDecode lets the tests load their small fixture keys: insecure sizes
// must be asked for explicitly, even in tests.
var testDecode = DecodeOptions{AllowInsecureTestKeySize: true}

// testKey loads the 512-bit fixture key.
func testKey(t testing.TB) *PrivateKey {
	t.Helper()
	b, err := os.ReadFile("testdata/key512.bin")
	if err != nil {
		t.Fatal(err)
	}
	sk, err := UnmarshalPrivateKey(b, testDecode)
	if err != nil {
		t.Fatal(err)
	}
	return sk
}

func testEncrypters(t testing.TB, pk *PublicKey) map[string]*Encrypter {
	t.Helper()
	out := map[string]*Encrypter{}
	for _, o := range []struct {
		name string
		opts EncrypterOptions
	}{
		{"full", EncrypterOptions{}},
		{"short-exponent", EncrypterOptions{Randomness: RandomnessShortExponent}},
		{"short-exponent-256-w8", EncrypterOptions{Randomness: RandomnessShortExponent, ExponentBits: 256, WindowBits: 8}},
	} {
		e, err := NewEncrypter(pk, o.opts)
		if err != nil {
			t.Fatalf("%s: %v", o.name, err)
		}
		out[o.name] = e
	}
	return out
}

// TestMinimumKeySize: small keys are refused unless the caller asks for
// them by name, even inside a test binary (which used to lower the minimum
// for every package's tests).
func TestMinimumKeySize(t *testing.T) {
	for _, bits := range []int{128, 512, 1024, 2046} {
		if _, err := GenerateKey(KeyOptions{Bits: bits}); !errors.Is(err, ErrKeyTooSmall) {
			t.Errorf("GenerateKey(%d bits) = %v, want ErrKeyTooSmall", bits, err)
		}
	}
	if _, err := GenerateKey(KeyOptions{Bits: 128, AllowInsecureTestKeySize: true}); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("GenerateKey(128 bits, insecure sizes allowed) = %v, want ErrKeyTooSmall", err)
	}
	if _, err := GenerateKey(KeyOptions{Bits: 1023, AllowInsecureTestKeySize: true}); err == nil {
		t.Error("odd modulus size accepted")
	}
	sk := testKey(t)
	pb, _ := sk.Public().MarshalBinary()
	if _, err := UnmarshalPublicKey(pb, DecodeOptions{}); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("512-bit public key decoded without the option: %v", err)
	}
	sb, _ := sk.MarshalBinary()
	if _, err := UnmarshalPrivateKey(sb, DecodeOptions{}); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("512-bit private key decoded without the option: %v", err)
	}
}

func TestGenerateKeySizes(t *testing.T) {
	sizes := []int{512, 1024}
	if !testing.Short() {
		sizes = append(sizes, 2048)
	}
	for _, bits := range sizes {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			sk, err := GenerateKey(KeyOptions{Bits: bits, Random: rand.Reader, AllowInsecureTestKeySize: bits < MinBits})
			if err != nil {
				t.Fatal(err)
			}
			if sk.Bits() != bits {
				t.Fatalf("modulus has %d bits, want %d", sk.Bits(), bits)
			}
			e, _ := NewEncrypter(sk.Public(), EncrypterOptions{})
			m := big.NewInt(123456789)
			c, err := e.Encrypt(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := sk.Decrypt(c)
			if err != nil || got.Cmp(m) != 0 {
				t.Fatalf("decrypt = %v, %v; want %v", got, err, m)
			}
		})
	}
}

func TestEncryptDecryptRoundTrip(t *testing.T) {
	sk := testKey(t)
	n := sk.N()
	nMinus1 := new(big.Int).Sub(n, bigOne)
	for name, e := range testEncrypters(t, sk.Public()) {
		t.Run(name, func(t *testing.T) {
			for _, m := range []*big.Int{big.NewInt(0), big.NewInt(1), big.NewInt(42), nMinus1, new(big.Int).Rsh(n, 1)} {
				c, err := e.Encrypt(m)
				if err != nil {
					t.Fatal(err)
				}
				got, err := sk.Decrypt(c)
				if err != nil || got.Cmp(m) != 0 {
					t.Fatalf("Decrypt(Encrypt(%v)) = %v, %v", m, got, err)
				}
			}
			c1, _ := e.Encrypt(big.NewInt(7))
			c2, _ := e.Encrypt(big.NewInt(7))
			if c1.Equal(c2) {
				t.Fatal("two encryptions of 7 are identical: randomness is not fresh")
			}
		})
	}
}

func TestEncryptRejectsOutOfRange(t *testing.T) {
	sk := testKey(t)
	e, _ := NewEncrypter(sk.Public(), EncrypterOptions{})
	for _, m := range []*big.Int{big.NewInt(-1), sk.N(), nil} {
		if _, err := e.Encrypt(m); err == nil {
			t.Errorf("Encrypt(%v) accepted", m)
		}
	}
}

func TestHomomorphicOperations(t *testing.T) {
	sk := testKey(t)
	pk := sk.Public()
	rng := mrand.New(mrand.NewPCG(1, 2))
	for name, e := range testEncrypters(t, pk) {
		t.Run(name, func(t *testing.T) {
			for i := 0; i < 20; i++ {
				a := big.NewInt(rng.Int64N(1<<40) - 1<<39)
				b := big.NewInt(rng.Int64N(1<<40) - 1<<39)
				k := big.NewInt(rng.Int64N(1<<20) - 1<<19)
				ca, err := e.EncryptSigned(a)
				if err != nil {
					t.Fatal(err)
				}
				cb, _ := e.EncryptSigned(b)
				neg, err := pk.Neg(ca)
				if err != nil {
					t.Fatal(err)
				}
				cases := []struct {
					name string
					c    *Ciphertext
					want *big.Int
				}{
					{"add", pk.Add(ca, cb), new(big.Int).Add(a, b)},
					{"add plain", pk.AddPlain(ca, b), new(big.Int).Add(a, b)},
					{"scalar", pk.MulScalar(ca, k), new(big.Int).Mul(a, k)},
					{"neg", neg, new(big.Int).Neg(a)},
					{"sub", pk.Add(cb, neg), new(big.Int).Sub(b, a)},
				}
				for _, tc := range cases {
					got, err := sk.DecryptSigned(tc.c)
					if err != nil || got.Cmp(tc.want) != 0 {
						t.Fatalf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
					}
				}
			}
		})
	}
}

func TestVectorOperations(t *testing.T) {
	sk := testKey(t)
	pk := sk.Public()
	e, _ := NewEncrypter(pk, EncrypterOptions{Randomness: RandomnessShortExponent})
	const n = 37
	a, b, k := make([]*big.Int, n), make([]*big.Int, n), make([]*big.Int, n)
	for i := range a {
		a[i], b[i], k[i] = big.NewInt(int64(i)), big.NewInt(int64(3*i+1)), big.NewInt(int64(i%5))
	}
	ca, err := e.EncryptVector(a)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := e.EncryptVector(b)
	sum, err := pk.AddVector(ca, cb)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := pk.MulScalarVector(ca, k)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := sk.DecryptVector(sum)
	if err != nil {
		t.Fatal(err)
	}
	dp, _ := sk.DecryptVector(prod)
	for i := range a {
		if ds[i].Int64() != int64(4*i+1) || dp[i].Int64() != int64(i*(i%5)) {
			t.Fatalf("element %d: sum %v product %v", i, ds[i], dp[i])
		}
	}
	if _, err := pk.AddVector(ca, cb[:3]); err == nil {
		t.Fatal("length mismatch accepted")
	}
	if err := pk.ValidateAll(sum); err != nil {
		t.Fatal(err)
	}
}

func TestFixedPointSumsAndOverflow(t *testing.T) {
	sk := testKey(t)
	pk := sk.Public()
	fp, err := NewFixedPoint(pk, 24)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := NewEncrypter(pk, EncrypterOptions{})
	rng := mrand.New(mrand.NewPCG(3, 4))
	for trial := 0; trial < 10; trial++ {
		users := 3 + trial%4
		var acc *Ciphertext
		var want float64
		for u := 0; u < users; u++ {
			x := (rng.Float64()*2 - 1) * math.Pow(10, float64(rng.IntN(6)-3))
			v, err := fp.EncodeSigned(x)
			if err != nil {
				t.Fatal(err)
			}
			want += math.Ldexp(float64(v.Int64()), -24) // sum of the quantized values
			m, _ := fp.Encode(x)
			c, _ := e.Encrypt(m)
			if acc == nil {
				acc = c
			} else {
				acc = pk.Add(acc, c)
			}
		}
		m, _ := sk.Decrypt(acc)
		got, err := fp.Decode(m)
		if err != nil || got != want {
			t.Fatalf("sum decoded to %v, %v; want exactly %v", got, err, want)
		}
	}
	// float32 path.
	m, _ := fp.Encode32(-1.5)
	if x, err := fp.Decode32(m); err != nil || x != -1.5 {
		t.Fatalf("float32 round trip = %v, %v", x, err)
	}
	// Overflow: n/3 + n/3 lands in the forbidden band.
	max := pk.MaxPlaintext()
	c1, _ := e.Encrypt(max)
	sum := pk.Add(c1, c1)
	dm, _ := sk.Decrypt(sum)
	if _, err := fp.Decode(dm); !errors.Is(err, ErrOverflow) {
		t.Fatalf("overflowed sum decoded without ErrOverflow: %v", err)
	}
	if _, err := sk.DecryptSigned(sum); !errors.Is(err, ErrOverflow) {
		t.Fatalf("DecryptSigned overflow = %v", err)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), 1e300} {
		if _, err := fp.Encode(bad); err == nil {
			t.Errorf("Encode(%v) accepted", bad)
		}
	}
	if _, err := NewFixedPoint(pk, -1); err == nil {
		t.Error("negative fraction bits accepted")
	}
}

func TestEncodingsRoundTrip(t *testing.T) {
	sk := testKey(t)
	pk := sk.Public()
	pb, _ := pk.MarshalBinary()
	pk2, err := UnmarshalPublicKey(pb, testDecode)
	if err != nil || !pk2.Equal(pk) {
		t.Fatalf("public key round trip: %v", err)
	}
	sb, _ := sk.MarshalBinary()
	sk2, err := UnmarshalPrivateKey(sb, testDecode)
	if err != nil || !sk2.Public().Equal(pk) {
		t.Fatalf("private key round trip: %v", err)
	}
	e, _ := NewEncrypter(pk, EncrypterOptions{})
	c, _ := e.Encrypt(big.NewInt(99))
	cb, _ := c.MarshalBinary()
	c2, err := pk.UnmarshalCiphertext(cb)
	if err != nil || !c2.Equal(c) {
		t.Fatalf("ciphertext round trip: %v", err)
	}
	fixed := pk.AppendFixed(nil, c)
	if len(fixed) != pk.CiphertextSize() {
		t.Fatalf("fixed ciphertext has %d bytes", len(fixed))
	}
	c3, err := pk.ParseFixed(fixed)
	if err != nil || !c3.Equal(c) {
		t.Fatalf("fixed round trip: %v", err)
	}
	if m, _ := sk2.Decrypt(c3); m.Int64() != 99 {
		t.Fatalf("decoded key decrypts to %v", m)
	}
}

func TestCiphertextValidation(t *testing.T) {
	sk := testKey(t)
	pk := sk.Public()
	enc := func(x *big.Int) []byte { return appendInt([]byte{EncodingVersion, tagCiphertext}, x) }
	multipleOfP := new(big.Int).Mul(sk.p, big.NewInt(5))
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"zero", []byte{EncodingVersion, tagCiphertext, 0, 0, 0, 1, 0}, ErrEncoding},
		{"n squared", enc(pk.NSquared()), ErrInvalidCiphertext},
		{"not coprime", enc(multipleOfP), ErrInvalidCiphertext},
		{"bad version", append([]byte{9}, enc(big.NewInt(5))[1:]...), ErrEncoding},
		{"wrong tag", append([]byte{EncodingVersion, tagPublic}, enc(big.NewInt(5))[2:]...), ErrEncoding},
		{"truncated", enc(big.NewInt(12345))[:7], ErrEncoding},
		{"trailing", append(enc(big.NewInt(5)), 1), ErrEncoding},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pk.UnmarshalCiphertext(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	good, _ := NewEncrypter(pk, EncrypterOptions{})
	c, _ := good.Encrypt(big.NewInt(1))
	bad := &Ciphertext{c: multipleOfP}
	if err := pk.ValidateAll([]*Ciphertext{c, bad, c}); !errors.Is(err, ErrInvalidCiphertext) || !strings.Contains(err.Error(), "element 1") {
		t.Fatalf("ValidateAll = %v, want element 1 invalid", err)
	}
	if _, err := sk.Decrypt(bad); !errors.Is(err, ErrInvalidCiphertext) {
		t.Fatalf("Decrypt of a non-coprime ciphertext = %v", err)
	}
}

func TestPrivateKeyNeverPrinted(t *testing.T) {
	sk := testKey(t)
	secrets := []string{sk.p.String(), sk.q.String(), sk.p.Text(16), sk.q.Text(16)}
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%x", "%d"} {
		out := fmt.Sprintf(format, sk)
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Fatalf("%s printed a secret factor: %s", format, out)
			}
		}
		if !strings.Contains(out, "REDACTED") {
			t.Fatalf("%s output %q lacks the redaction marker", format, out)
		}
	}
}

func TestZero(t *testing.T) {
	sk, err := GenerateKey(KeyOptions{Bits: 512, AllowInsecureTestKeySize: true})
	if err != nil {
		t.Fatal(err)
	}
	p := sk.p
	e, _ := NewEncrypter(sk.Public(), EncrypterOptions{})
	c, _ := e.Encrypt(big.NewInt(1))
	sk.Zero()
	if p.Sign() != 0 {
		t.Fatal("prime p not zeroed")
	}
	if _, err := sk.Decrypt(c); err == nil {
		t.Fatal("zeroed key still decrypts")
	}
	if _, err := sk.MarshalBinary(); err == nil {
		t.Fatal("zeroed key still marshals")
	}
}

func TestRandomnessPool(t *testing.T) {
	sk := testKey(t)
	for name, e := range testEncrypters(t, sk.Public()) {
		t.Run(name, func(t *testing.T) {
			if err := e.Precompute(10); err != nil {
				t.Fatal(err)
			}
			if e.Pooled() != 10 {
				t.Fatalf("pool holds %d, want 10", e.Pooled())
			}
			c, _ := e.Encrypt(big.NewInt(5))
			if e.Pooled() != 9 {
				t.Fatalf("Encrypt did not consume pooled randomness: %d left", e.Pooled())
			}
			if m, _ := sk.Decrypt(c); m.Int64() != 5 {
				t.Fatalf("pooled encryption decrypts to %v", m)
			}
			e.StartBackground(1)
			for e.Pooled() < 12 {
				if _, err := e.Encrypt(big.NewInt(1)); err != nil {
					t.Fatal(err)
				}
				c, _ := e.Encrypt(big.NewInt(3))
				if m, _ := sk.Decrypt(c); m.Int64() != 3 {
					t.Fatal("background randomness gives a wrong encryption")
				}
				if e.Pooled() >= 12 {
					break
				}
				e.Precompute(1)
			}
			e.Close()
			e.Close() // idempotent
		})
	}
}

func TestShortExponentIsDJNForm(t *testing.T) {
	// Every short-exponent randomness value is an n-th residue: it decrypts to 0.
	sk := testKey(t)
	e, _ := NewEncrypter(sk.Public(), EncrypterOptions{Randomness: RandomnessShortExponent})
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		r, err := e.newRandomness()
		if err != nil {
			t.Fatal(err)
		}
		if m := sk.decrypt(r.rn); m.Sign() != 0 {
			t.Fatalf("randomness decrypts to %v, not 0", m)
		}
		seen[r.rn.String()] = true
	}
	if len(seen) != 20 {
		t.Fatalf("only %d distinct randomness values in 20 draws", len(seen))
	}
	// The table computes exactly h^a.
	a, _ := rand.Int(rand.Reader, new(big.Int).Lsh(bigOne, uint(e.expBits)))
	h := e.table.table[0][1]
	if want := new(big.Int).Exp(h, a, sk.nSquared); e.table.exp(a).Cmp(want) != 0 {
		t.Fatal("fixed-base table disagrees with Exp")
	}
}

func TestEncrypterOptionsValidation(t *testing.T) {
	pk := testKey(t).Public()
	for _, o := range []EncrypterOptions{
		{Randomness: RandomnessShortExponent, ExponentBits: 100},
		{Randomness: RandomnessShortExponent, WindowBits: 9},
		{Randomness: RandomnessFull, ExponentBits: 300},
		{Randomness: 7},
		{PoolSize: -1},
	} {
		if _, err := NewEncrypter(pk, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if k, err := ParseRandomnessKind("djn"); err != nil || k != RandomnessShortExponent {
		t.Error("ParseRandomnessKind(djn)")
	}
	if _, err := ParseRandomnessKind("fast"); err == nil {
		t.Error("unknown variant accepted")
	}
}

func TestPublicKeyStringHidesNothingSecret(t *testing.T) {
	sk := testKey(t)
	s := sk.Public().String()
	if strings.Contains(s, sk.N().String()) || !strings.Contains(s, "fingerprint") {
		t.Fatalf("unexpected public key string %q", s)
	}
	pb, _ := sk.Public().MarshalBinary()
	if !bytes.Equal(pb[:2], []byte{EncodingVersion, tagPublic}) {
		t.Fatal("public key encoding lacks its version header")
	}
}

func TestCheckRange(t *testing.T) {
	sk := testKey(t)
	pk := sk.Public()
	e, _ := NewEncrypter(pk, EncrypterOptions{})
	good, _ := e.Encrypt(big.NewInt(3))
	for name, c := range map[string]*Ciphertext{
		"nil":        nil,
		"zero value": {},
		"zero":       {c: new(big.Int)},
		"n squared":  {c: pk.NSquared()},
		"negative":   {c: big.NewInt(-5)},
	} {
		if err := pk.CheckRange(c); !errors.Is(err, ErrInvalidCiphertext) {
			t.Errorf("%s: CheckRange = %v, want ErrInvalidCiphertext", name, err)
		}
	}
	if err := pk.CheckRange(good); err != nil {
		t.Fatal(err)
	}
}

// TestVectorProgress: the vector operations report every step, with the
// right total, and their results do not depend on reporting.
func TestVectorProgress(t *testing.T) {
	sk := testKey(t)
	e, _ := NewEncrypter(sk.Public(), EncrypterOptions{Randomness: RandomnessShortExponent})
	ms := make([]*big.Int, 23)
	for i := range ms {
		ms[i] = big.NewInt(int64(i * i))
	}
	var mu sync.Mutex
	seen := map[int]bool{}
	report := func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if total != len(ms) || done < 1 || done > total || seen[done] {
			t.Errorf("progress(%d, %d)", done, total)
		}
		seen[done] = true
	}
	cs, err := e.EncryptVectorProgress(ms, report)
	if err != nil || len(seen) != len(ms) {
		t.Fatalf("encryption: %v, %d reports", err, len(seen))
	}
	clear(seen)
	got, err := sk.DecryptVectorProgress(cs, report)
	if err != nil || len(seen) != len(ms) {
		t.Fatalf("decryption: %v, %d reports", err, len(seen))
	}
	for i := range ms {
		if got[i].Cmp(ms[i]) != 0 {
			t.Fatalf("element %d decrypts to %v", i, got[i])
		}
	}
}
