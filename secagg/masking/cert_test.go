package masking

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"slices"
	"testing"
	"time"
)

func makeCert(t *testing.T, serial int64, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer, ca bool, usage []x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "veil test " + big.NewInt(serial).String()},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCertDirectoryRound runs a round whose clients sign their key
// advertisements with the ECDSA (and one RSA) keys of CA-issued client
// certificates, as the federation's mTLS clients would, and checks that
// certificates from another CA or without client authentication are
// refused, and that one client's certificate cannot vouch for another's
// advertisement.
func TestCertDirectoryRound(t *testing.T) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := makeCert(t, 1, caKey.Public(), nil, caKey, true, nil)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	f := newFixture(t, 5, 4, 3, 8, 100)
	signers := map[uint32]crypto.Signer{}
	chains := map[uint32][]*x509.Certificate{}
	for i, id := range f.p.Roster {
		var k crypto.Signer
		if i == 4 {
			k, _ = rsa.GenerateKey(rand.Reader, 2048)
		} else {
			k, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		}
		signers[id] = k
		chains[id] = []*x509.Certificate{makeCert(t, int64(10+i), k.Public(), ca, caKey, false, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})}
	}
	dir, err := NewCertDirectory(roots, chains)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := NewServer(f.p, dir)
	r := testRand(101)
	clients := map[uint32]*Client{}
	for _, id := range f.p.Roster {
		c, ad, err := NewClient(ClientConfig{ID: id, Signer: signers[id], Keys: dir}, f.p, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ReceiveAdvert(ad); err != nil {
			t.Fatal(err)
		}
		clients[id] = c
	}
	// Client 0 signs an advertisement claiming to be client 1: refused.
	_, forged, err := NewClient(ClientConfig{ID: f.p.Roster[1], Signer: signers[f.p.Roster[0]], Keys: dir}, f.p, r)
	if err != nil {
		t.Fatal(err)
	}
	victim := f.p.Roster[2]
	ads, _ := srv.AdvertsFor(victim)
	bad := slices.Clone(ads)
	i := slices.IndexFunc(bad, func(a KeyAdvert) bool { return a.From == forged.From })
	bad[i] = *forged
	if _, err := clients[victim].ShareKeys(bad, r); err == nil {
		t.Fatal("an advertisement signed by another client's certificate key was accepted")
	}
	inputs := map[uint32][]uint32{}
	for _, id := range f.p.Roster {
		ads, _ := srv.AdvertsFor(id)
		sh, err := clients[id].ShareKeys(ads, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ReceiveShares(id, sh); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]uint32, f.p.Length)
	for n, id := range f.p.Roster {
		sh, _ := srv.SharesFor(id)
		in := make([]uint32, f.p.Length)
		for j := range in {
			in[j] = uint32(n*j + 7)
			want[j] += in[j]
		}
		inputs[id] = in
		m, err := clients[id].MaskInput(sh, in)
		if err != nil {
			t.Fatal(err)
		}
		srv.ReceiveMasked(m)
	}
	req, _ := srv.UnmaskRequest()
	for _, id := range f.p.Roster {
		resp, _ := clients[id].Unmask(req)
		srv.ReceiveUnmask(resp)
	}
	res, err := srv.Sum()
	if err != nil || !slices.Equal(res.Sum, want) {
		t.Fatalf("sum: %v", err)
	}

	// Refusals: another CA, no client-auth usage, no certificate.
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other := makeCert(t, 2, otherKey.Public(), nil, otherKey, true, nil)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, chain := range map[string][]*x509.Certificate{
		"another CA":       {makeCert(t, 50, k.Public(), other, otherKey, false, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})},
		"server-auth only": {makeCert(t, 51, k.Public(), ca, caKey, false, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})},
		"empty chain":      {},
	} {
		if _, err := NewCertDirectory(roots, map[uint32][]*x509.Certificate{7: chain}); err == nil {
			t.Fatalf("%s: certificate accepted", name)
		}
	}
}
