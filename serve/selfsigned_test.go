package serve

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// certOf reads the first certificate of a PEM file.
func certOf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s holds no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSelfSignedPair(t *testing.T) {
	dir := t.TempDir()
	a, err := SelfSignedPair(dir, "192.0.2.7:7470")
	if err != nil {
		t.Fatal(err)
	}
	if !a.Created {
		t.Error("the first pair was not made")
	}
	for _, p := range []string{a.CertFile, a.KeyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || filepath.Dir(p) != dir {
			t.Errorf("%s: mode %v, want 0600 in the library's folder", p, fi.Mode().Perm())
		}
	}
	c := certOf(t, a.CertFile)
	sum := sha256.Sum256(c.Raw)
	if want := strings.ToUpper(strings.Join(strings.Split(fmt.Sprintf("% x", sum), " "), ":")); a.Fingerprint != want {
		t.Errorf("fingerprint %s, want %s (SHA-256 of the certificate)", a.Fingerprint, want)
	}
	for _, h := range []string{"192.0.2.7", "127.0.0.1", "localhost"} {
		if err := c.VerifyHostname(h); err != nil {
			t.Errorf("the certificate does not cover %s: %v", h, err)
		}
	}
	if err := c.VerifyHostname("192.0.2.8"); err == nil {
		t.Error("the certificate covers another address")
	}
	// Started again, the same pair: the fingerprint the user checked holds.
	b, err := SelfSignedPair(dir, "192.0.2.7:7471")
	if err != nil || b.Created || b.Fingerprint != a.Fingerprint {
		t.Errorf("second start: %+v, %v; want the first pair reused", b, err)
	}
	// Another interface: a new pair covering it.
	n, err := SelfSignedPair(dir, "192.0.2.9:7470")
	if err != nil || !n.Created || n.Fingerprint == a.Fingerprint {
		t.Errorf("another address: %+v, %v; want a new pair", n, err)
	}
	if err := certOf(t, n.CertFile).VerifyHostname("192.0.2.9"); err != nil {
		t.Error(err)
	}
	// A key others can read is refused, not used.
	if err := os.Chmod(n.KeyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := SelfSignedPair(dir, "192.0.2.9:7470"); err == nil || !strings.Contains(err.Error(), "readable by other users") {
		t.Errorf("a key readable by others: %v", err)
	}
	if _, err := SelfSignedPair(dir, "no port"); err == nil {
		t.Error("an address without a port gave no error")
	}
}

// A server on the self-signed pair: a client that checks certificates
// against the system's authorities refuses it (as a browser warns); one
// that compares the printed fingerprint, or trusts that certificate, talks
// to it over TLS.
func TestSelfSignedServes(t *testing.T) {
	s := newTestServer(t, nil)
	pair, err := SelfSignedPair(t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.srv.ListenAndServe(ctx, ListenOptions{Addr: "127.0.0.1:0", TLSCert: pair.CertFile, TLSKey: pair.KeyFile,
			Ready: func(u string) { urls <- u }})
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("the server stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("the server did not start")
	}
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("url %s, want https", url)
	}
	get := func(cfg *tls.Config) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 20 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := get(&tls.Config{}); err == nil {
		t.Error("a client checking the system's authorities accepted the self-signed certificate")
	}
	pinned := &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 || Fingerprint(raw[0]) != pair.Fingerprint {
			return fmt.Errorf("fingerprint does not match")
		}
		return nil
	}}
	if err := get(pinned); err != nil {
		t.Errorf("a client comparing the fingerprint: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(certOf(t, pair.CertFile))
	if err := get(&tls.Config{RootCAs: pool}); err != nil {
		t.Errorf("a client trusting the certificate: %v", err)
	}
	// Another pair's fingerprint does not match this server's.
	other, err := SelfSignedPair(t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pinned.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		if Fingerprint(raw[0]) != other.Fingerprint {
			return fmt.Errorf("fingerprint does not match")
		}
		return nil
	}
	if err := get(pinned); err == nil {
		t.Error("a client pinning another fingerprint reached the server")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}
