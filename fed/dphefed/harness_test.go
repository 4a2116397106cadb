package dphefed_test

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/keygen"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/secagg/dphe"
)

// harness is a federation's authority, a key generator served over real
// gRPC with mutual TLS on a loopback port, and its state folder.
type harness struct {
	pkiDir, stateDir string
	ca               *pki.CA
	svc              *keygen.Service
	addr             string
	stop             func()
}

// newHarness makes an authority with the key generator's, the
// coordinator's, an impostor server's, an operator's and n clients'
// certificates, and starts the key generator.
func newHarness(t *testing.T, n int) *harness {
	t.Helper()
	h := &harness{pkiDir: t.TempDir(), stateDir: filepath.Join(t.TempDir(), "keygen")}
	var err error
	if h.ca, err = pki.Init(h.pkiDir, "test"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"keygen", "coordinator", "impostor"} {
		if _, err := h.ca.Issue(pki.IssueOptions{Name: name, Role: pki.Server}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.ca.Issue(pki.IssueOptions{Name: "operator", Role: pki.Operator}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := h.ca.Issue(pki.IssueOptions{Name: clientName(i), Role: pki.Client}); err != nil {
			t.Fatal(err)
		}
	}
	h.start(t)
	return h
}

func clientName(i int) string { return fmt.Sprintf("client-%d", i) }

func (h *harness) identity(t *testing.T, name string) *pki.Identity {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(h.pkiDir, name+".crt"), filepath.Join(h.pkiDir, name+".key"), filepath.Join(h.pkiDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// start opens the key generator's state folder and serves it on a fresh
// loopback port, as veil fed keygen does.
func (h *harness) start(t *testing.T) {
	t.Helper()
	var err error
	h.svc, err = keygen.Open(keygen.Options{Dir: h.stateDir, Coordinator: "coordinator", Bits: 512, AllowInsecureTestKeySize: true})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := pki.OpenRevocations(pki.RevocationsOptions{Path: filepath.Join(h.pkiDir, "revoked.crl"), CA: h.ca.Cert(), Numbers: h.svc})
	if err != nil {
		t.Fatal(err)
	}
	srv := keygen.NewServer(h.svc, h.identity(t, "keygen"), rev, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	go srv.Serve(ln)
	svc := h.svc
	stopped := false
	h.stop = func() {
		if !stopped {
			srv.Stop()
			svc.Close()
			stopped = true
		}
	}
	t.Cleanup(func() { h.stop() })
}

// serve serves svc with the certificate named cert on another loopback
// port and returns its address.
func (h *harness) serve(t *testing.T, svc *keygen.Service, cert string) string {
	t.Helper()
	srv := keygen.NewServer(svc, h.identity(t, cert), nil, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// restart stops the key generator and starts it again on the same state.
func (h *harness) restart(t *testing.T) {
	t.Helper()
	h.stop()
	h.start(t)
}

// dial connects to the key generator as name.
func (h *harness) dial(t *testing.T, name string) *dphefed.KeyGen {
	t.Helper()
	return h.dialAt(t, name, h.addr, "keygen")
}

func (h *harness) dialAt(t *testing.T, name, addr, keygenName string) *dphefed.KeyGen {
	t.Helper()
	kg, err := dphefed.Dial(dphefed.DialOptions{Addr: addr, Identity: h.identity(t, name), Name: keygenName, AllowInsecureTestKeySize: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kg.Close() })
	return kg
}

// clientPrivacy is a client's own release: clip 1, a tiny noise (so that
// tests can check sums and search for plaintexts; the noise's size is
// dphe's business), and a selection of at most count blocks whose ε is
// so large that exactly the blocks of norm above 0.1 are selected.
func clientPrivacy(t *testing.T, count int, seed byte) *dphe.Privacy {
	t.Helper()
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("photos", dp.Budget{Epsilon: 1e300, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	return &dphe.Privacy{Clip: 1, NoiseMultiplier: 1e-9, Ledger: l, Principal: "photos", Source: dp.NewSeededSource([32]byte{seed}),
		Select: &dphe.Selection{Epsilon: 1e6, Delta: 1e-5, Threshold: 0.1, Count: count}}
}
