package paillier

import (
	"bufio"
	"crypto/rand"
	"math/big"
	"os"
	"strings"
	"testing"
)

// katKey is one key of testdata/kat.txt with its vectors.
type katKey struct {
	p, q *big.Int
	enc  [][3]*big.Int // m, r, c = g^m r^n mod n²
	dec  [][2]*big.Int // c, Dec(c)
}

// readKAT parses testdata/kat.txt, written by testdata/kat.py from the
// textbook definitions with Python's integers (independently of this code).
func readKAT(t *testing.T) map[string]*katKey {
	t.Helper()
	f, err := os.Open("testdata/kat.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]*katKey{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	hex := func(s string) *big.Int {
		x, ok := new(big.Int).SetString(s, 16)
		if !ok {
			t.Fatalf("bad hex %q", s)
		}
		return x
	}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch {
		case f[0] == "key" && len(f) == 4:
			keys[f[1]] = &katKey{p: hex(f[2]), q: hex(f[3])}
		case f[0] == "enc" && len(f) == 5:
			k := keys[f[1]]
			k.enc = append(k.enc, [3]*big.Int{hex(f[2]), hex(f[3]), hex(f[4])})
		case f[0] == "dec" && len(f) == 4:
			k := keys[f[1]]
			k.dec = append(k.dec, [2]*big.Int{hex(f[2]), hex(f[3])})
		default:
			t.Fatalf("bad line %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("%d keys in kat.txt, want 3", len(keys))
	}
	return keys
}

// TestKnownAnswers checks encryption with a given r and constant-time CRT
// decryption against vectors computed independently by kat.py.
func TestKnownAnswers(t *testing.T) {
	for name, k := range readKAT(t) {
		t.Run(name, func(t *testing.T) {
			sk, err := newPrivateKey(k.p, k.q, true)
			if err != nil {
				t.Fatal(err)
			}
			pk := sk.Public()
			for i, v := range k.enc {
				m, r, want := v[0], v[1], v[2]
				rn := new(big.Int).Exp(r, pk.n, pk.nSquared)
				if got := pk.mulGm(rn, new(big.Int).Mod(rn, pk.n), m); got.Cmp(want) != 0 {
					t.Fatalf("enc %d: Enc(m; r) differs from the vector", i)
				}
				got, err := sk.Decrypt(&Ciphertext{c: want})
				if err != nil || got.Cmp(m) != 0 {
					t.Fatalf("enc %d: Decrypt = %x, %v; want %x", i, got, err, m)
				}
			}
			for i, v := range k.dec {
				got, err := sk.Decrypt(&Ciphertext{c: v[0]})
				if err != nil || got.Cmp(v[1]) != 0 {
					t.Fatalf("dec %d: Decrypt = %x, %v; want %x", i, got, err, v[1])
				}
			}
			if len(k.enc) < 10 || len(k.dec) < 6 {
				t.Fatalf("only %d and %d vectors", len(k.enc), len(k.dec))
			}
		})
	}
}

// textbookDecrypt is Paillier's definition with λ and μ in math/big.
func textbookDecrypt(p, q, c *big.Int) *big.Int {
	n := new(big.Int).Mul(p, q)
	n2 := new(big.Int).Mul(n, n)
	pm1, qm1 := new(big.Int).Sub(p, bigOne), new(big.Int).Sub(q, bigOne)
	g := new(big.Int).GCD(nil, nil, pm1, qm1)
	lambda := new(big.Int).Mul(pm1, qm1)
	lambda.Div(lambda, g)
	l := func(x *big.Int) *big.Int { x.Sub(x, bigOne); return x.Div(x, n) }
	mu := l(new(big.Int).Exp(new(big.Int).Add(n, bigOne), lambda, n2))
	mu.ModInverse(mu, n)
	m := l(new(big.Int).Exp(c, lambda, n2))
	m.Mul(m, mu)
	return m.Mod(m, n)
}

// TestDecryptMatchesTextbook compares the constant-time CRT decryption with
// the textbook definition on random units of Z_{n²} (not only encryptions
// this package made) for fresh keys of several sizes.
func TestDecryptMatchesTextbook(t *testing.T) {
	for _, bits := range []int{256, 512, 768, 1024} {
		sk, err := GenerateKey(KeyOptions{Bits: bits, AllowInsecureTestKeySize: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			c, err := rand.Int(rand.Reader, sk.nSquared)
			if err != nil {
				t.Fatal(err)
			}
			ct := &Ciphertext{c: c}
			if sk.Validate(ct) != nil {
				continue
			}
			got, err := sk.Decrypt(ct)
			if err != nil {
				t.Fatal(err)
			}
			if want := textbookDecrypt(sk.p, sk.q, c); got.Cmp(want) != 0 {
				t.Fatalf("%d bits: CRT decryption %x, textbook %x", bits, got, want)
			}
			if seq := sk.decrypt(c); seq.Cmp(got) != 0 {
				t.Fatalf("%d bits: sequential and concurrent halves disagree", bits)
			}
		}
	}
}
