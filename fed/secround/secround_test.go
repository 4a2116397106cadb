package secround_test

import (
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/secround"
)

// TestDirectoryRefusesSubstitutedCertificates plays a coordinator relaying
// certificates with the adverts: another client's certificate for an id,
// an operator's, one from another authority, or garbage is refused, so a
// client checks a neighbour's advert only against that neighbour's own
// certificate key.
func TestDirectoryRefusesSubstitutedCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.Init(filepath.Join(dir, "a"), "a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.Init(filepath.Join(dir, "b"), "b")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(c *pki.CA, name string, role pki.Role) []byte {
		crt, err := c.Issue(pki.IssueOptions{Name: name, Role: role})
		if err != nil {
			t.Fatal(err)
		}
		return crt.Raw
	}
	alice, bob := issue(ca, "alice", pki.Client), issue(ca, "bob", pki.Client)
	op := issue(ca, "carol", pki.Operator)
	forged := issue(other, "alice2", pki.Client)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert())
	cfg := &fedpb.SecAggConfig{Roster: []*fedpb.SecAggMember{{Id: 1, Client: "alice"}, {Id: 2, Client: "bob"}, {Id: 3, Client: "carol"}, {Id: 4, Client: "alice2"}}}
	d := secround.NewDirectory(cfg, pool)
	for _, c := range []struct {
		id   uint32
		der  []byte
		want string
	}{
		{1, bob, `is "bob"'s`},
		{3, op, "role operator"},
		{4, forged, "certificate signed by unknown authority"},
		{1, []byte("garbage"), "client 1's certificate"},
		{9, alice, "not in the roster"},
	} {
		if err := d.Add(c.id, c.der); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("id %d: %v, want an error with %q", c.id, err, c.want)
		}
		if _, err := d.PublicKey(c.id); err == nil {
			t.Errorf("id %d has a key after a refused certificate", c.id)
		}
	}
	if err := d.Add(1, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := d.PublicKey(1); err != nil {
		t.Fatal(err)
	}
}
