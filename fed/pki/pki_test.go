package pki

import (
	"crypto/tls"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// handshake runs one mutual-TLS handshake over a real loopback socket and
// returns the server's and the client's errors and the name the server saw.
func handshake(t *testing.T, server, client *tls.Config) (peer string, serr, cerr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			serr = err
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if serr = tc.Handshake(); serr == nil {
			peer, _, serr = PeerName(tc.ConnectionState())
			_, _ = tc.Write([]byte("x"))
		}
	}()
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), client)
	if err == nil {
		// TLS 1.3 reports a refused client certificate on the first read.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(c, make([]byte, 1))
		c.Close()
	}
	cerr = err
	<-done
	return peer, serr, cerr
}

func setup(t *testing.T) (dir string, ca *CA) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "ca")
	ca, err := Init(dir, "test CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []IssueOptions{{Name: "coordinator", Role: Server}, {Name: "client-1", Role: Client}, {Name: "client-2", Role: Client}} {
		if _, err := ca.Issue(o); err != nil {
			t.Fatal(err)
		}
	}
	return dir, ca
}

func identity(t *testing.T, dir, name string) *Identity {
	t.Helper()
	id, err := LoadIdentity(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestMutualTLS(t *testing.T) {
	dir, ca := setup(t)
	srv := identity(t, dir, "coordinator")
	rev := NewRevocations(filepath.Join(dir, "revoked.crl"), ca.Cert())
	serverCfg := ServerTLS(srv, rev)

	peer, serr, cerr := handshake(t, serverCfg, ClientTLS(identity(t, dir, "client-1"), "localhost"))
	if serr != nil || cerr != nil || peer != "client-1" {
		t.Fatalf("enrolled client: server %v, client %v, peer %q", serr, cerr, peer)
	}

	// A certificate from another authority is refused.
	otherDir, _ := setup(t)
	_, serr, cerr = handshake(t, serverCfg, ClientTLS(identity(t, otherDir, "client-1"), "localhost"))
	if serr == nil || cerr == nil {
		t.Fatalf("foreign client accepted: server %v, client %v", serr, cerr)
	}

	// A client without a certificate is refused.
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: srv.Pool, ServerName: "localhost"}
	if _, serr, _ = handshake(t, serverCfg, noCert); serr == nil {
		t.Fatal("client without a certificate accepted")
	}

	// A client certificate cannot serve as the coordinator's.
	fake := ServerTLS(identity(t, dir, "client-2"), nil)
	if _, _, cerr = handshake(t, fake, ClientTLS(identity(t, dir, "client-1"), "localhost")); cerr == nil {
		t.Fatal("client accepted a client certificate as the coordinator's")
	}

	// The coordinator's certificate must name the host dialled.
	if _, _, cerr = handshake(t, serverCfg, ClientTLS(identity(t, dir, "client-1"), "coordinator.example")); cerr == nil {
		t.Fatal("client accepted a coordinator certificate for another host")
	}

	// Revocation takes effect on the next connection, without a restart.
	if err := ca.Revoke("client-1"); err != nil {
		t.Fatal(err)
	}
	_, serr, _ = handshake(t, serverCfg, ClientTLS(identity(t, dir, "client-1"), "localhost"))
	if serr == nil || !strings.Contains(serr.Error(), "revoked") {
		t.Fatalf("revoked client: server error %v, want revoked", serr)
	}
	if peer, serr, cerr = handshake(t, serverCfg, ClientTLS(identity(t, dir, "client-2"), "localhost")); serr != nil || cerr != nil || peer != "client-2" {
		t.Fatalf("other client after a revocation: %v %v %q", serr, cerr, peer)
	}
	if err := ca.Revoke("client-1"); err != nil {
		t.Fatalf("revoking twice: %v", err)
	}

	// A revocation list not signed by the authority fails closed.
	_, other := setup(t)
	if err := other.Revoke("client-2"); err != nil {
		t.Fatal(err)
	}
	foreignCRL, err := os.ReadFile(filepath.Join(other.dir, "revoked.crl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "revoked.crl"), foreignCRL, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, serr, _ = handshake(t, serverCfg, ClientTLS(identity(t, dir, "client-2"), "localhost")); serr == nil {
		t.Fatal("a CRL signed by another authority was trusted")
	}
}

func TestFolderAndNames(t *testing.T) {
	dir, ca := setup(t)
	for _, name := range []string{"ca.key", "client-1.key", "coordinator.key"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	if _, err := Init(dir, ""); err == nil {
		t.Error("Init over an existing authority succeeded")
	}
	if _, err := ca.Issue(IssueOptions{Name: "client-1", Role: Client}); err == nil {
		t.Error("issuing a second certificate with the same name succeeded")
	}
	for _, bad := range []string{"", "../x", "a/b", "ca", "revoked", ".hidden", strings.Repeat("a", 65)} {
		if _, err := ca.Issue(IssueOptions{Name: bad, Role: Client}); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if _, err := ca.Issue(IssueOptions{Name: "c3", Role: Client, Hosts: []string{"h"}}); err == nil {
		t.Error("hosts accepted on a client certificate")
	}
	if err := ca.Revoke("nobody"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("revoking an unknown name: %v", err)
	}
	loaded, err := Load(dir)
	if err != nil || !loaded.Cert().Equal(ca.Cert()) {
		t.Fatalf("Load: %v", err)
	}
	// A key that does not match the certificate is refused.
	if err := os.Rename(filepath.Join(dir, "client-1.key"), filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Error("Load accepted a key that is not the authority's")
	}
}

// memNumbers keeps the newest list number as a coordinator's state file
// would (in memory here; package coord keeps it in SQLite).
type memNumbers struct{ n *big.Int }

func (m *memNumbers) HighestCRLNumber() (*big.Int, error) { return m.n, nil }
func (m *memNumbers) AcceptCRLNumber(n *big.Int) error {
	if m.n == nil || n.Cmp(m.n) > 0 {
		m.n = new(big.Int).Set(n)
	}
	return nil
}

// TestRevocationsFailClosed: a new authority has a signed, numbered,
// empty list; a missing list refuses every certificate; an older list put
// back is refused (also by a new watcher sharing the kept number, as after
// a restart) and the certificate it leaves out stays revoked; the list
// number only grows.
func TestRevocationsFailClosed(t *testing.T) {
	dir, ca := setup(t)
	crl := filepath.Join(dir, "revoked.crl")
	first, err := os.ReadFile(crl)
	if err != nil {
		t.Fatalf("Init wrote no revocation list: %v", err)
	}
	c1, c2 := identity(t, dir, "client-1").Leaf.SerialNumber, identity(t, dir, "client-2").Leaf.SerialNumber
	numbers := &memNumbers{}
	rev, err := OpenRevocations(RevocationsOptions{Path: crl, CA: ca.Cert(), Numbers: numbers})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := rev.IsRevoked(c1); err != nil || r {
		t.Fatalf("with the empty list: revoked %v, %v", r, err)
	}
	if numbers.n == nil || numbers.n.Int64() != 1 {
		t.Fatalf("the kept number is %v, want 1", numbers.n)
	}
	if err := ca.Revoke("client-2"); err != nil {
		t.Fatal(err)
	}
	if r, err := rev.IsRevoked(c2); err != nil || !r {
		t.Fatalf("client-2 after its revocation: revoked %v, %v", r, err)
	}
	if numbers.n.Int64() != 2 {
		t.Fatalf("the kept number is %v, want 2", numbers.n)
	}
	current, err := os.ReadFile(crl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(crl); err != nil {
		t.Fatal(err)
	}
	if _, err := rev.IsRevoked(c1); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("with the list deleted: %v, want an error (missing)", err)
	}
	if _, err := Revoked(dir, ca.Cert()); err == nil {
		t.Error("Revoked read a missing list as none revoked")
	}
	if err := os.WriteFile(crl, first, 0o600); err != nil {
		t.Fatal(err)
	}
	restarted, err := OpenRevocations(RevocationsOptions{Path: crl, CA: ca.Cert(), Numbers: numbers})
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*Revocations{"running": rev, "restarted": restarted} {
		for _, serial := range []*big.Int{c1, c2} {
			if _, err := r.IsRevoked(serial); err == nil || !strings.Contains(err.Error(), "older than number 2") {
				t.Errorf("%s, the older list put back: %v, want an error (older than number 2)", name, err)
			}
		}
	}
	if numbers.n.Int64() != 2 {
		t.Errorf("the older list lowered the kept number to %v", numbers.n)
	}
	if err := os.WriteFile(crl, current, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := restarted.IsRevoked(c2); err != nil || !r {
		t.Errorf("the current list back: client-2 revoked %v, %v", r, err)
	}
	if r, err := restarted.IsRevoked(c1); err != nil || r {
		t.Errorf("the current list back: client-1 revoked %v, %v", r, err)
	}
	// Signing again keeps the entries under the next number.
	if err := ca.SignCRL(); err != nil {
		t.Fatal(err)
	}
	if r, err := restarted.IsRevoked(c2); err != nil || !r || numbers.n.Int64() != 3 {
		t.Errorf("after SignCRL: client-2 revoked %v, %v, number %v (want 3)", r, err, numbers.n)
	}
	if _, err := OpenRevocations(RevocationsOptions{CA: ca.Cert()}); err == nil {
		t.Error("revocations without a path were opened")
	}
}

// TestOperatorRole: an operator's certificate authenticates like a
// client's and says it is the operator's; nothing else does.
func TestOperatorRole(t *testing.T) {
	dir, ca := setup(t)
	if _, err := ca.Issue(IssueOptions{Name: "ops", Role: Operator}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(IssueOptions{Name: "ops2", Role: Operator, Hosts: []string{"h"}}); err == nil {
		t.Error("hosts accepted on an operator's certificate")
	}
	srv := identity(t, dir, "coordinator")
	peer, serr, cerr := handshake(t, ServerTLS(srv, NewRevocations(filepath.Join(dir, "revoked.crl"), ca.Cert())), ClientTLS(identity(t, dir, "ops"), "localhost"))
	if serr != nil || cerr != nil || peer != "ops" {
		t.Fatalf("the operator's handshake: %v %v %q", serr, cerr, peer)
	}
	for name, want := range map[string]Role{"ops": Operator, "client-1": Client, "coordinator": Server} {
		if got := RoleOf(identity(t, dir, name).Leaf); got != want {
			t.Errorf("RoleOf(%s) = %s, want %s", name, got, want)
		}
	}
}
