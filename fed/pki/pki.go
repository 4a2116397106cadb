// Package pki is the federation's small public-key infrastructure: a local
// certificate authority kept in a folder, certificates for the coordinator
// and for each client, revocation by a CRL the authority signs, and the
// mutual-TLS configurations both sides use.
//
// A client's identity is its certificate's subject common name. The
// coordinator accepts a client only if its certificate chains to the
// authority, is meant for client authentication, has not expired and is not
// on the authority's revocation list; the client accepts a coordinator only
// if its certificate chains to the same authority and names the host it
// dialled. Keys are ECDSA P-256; TLS 1.3 only.
//
// Folder layout (0700; private keys 0600):
//
//	ca.crt ca.key        the authority
//	NAME.crt NAME.key    one pair per issued certificate
//	revoked.crl          the signed revocation list (absent: none revoked)
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"
)

// Role says what a certificate is for.
type Role int

const (
	// Client certificates authenticate a client to the coordinator.
	Client Role = iota
	// Server certificates authenticate the coordinator to clients.
	Server
)

// CA is a certificate authority loaded from its folder.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckName reports whether name can name a certificate: 1–64 letters,
// digits, '.', '_' or '-', not starting with a punctuation mark. Names are
// also file names in the authority's folder.
func CheckName(name string) error {
	if !validName.MatchString(name) || name == "ca" || name == "revoked" {
		return fmt.Errorf("pki: %q is not a valid certificate name (1–64 letters, digits, '.', '_', '-'; not ca or revoked)", name)
	}
	return nil
}

// Init creates a new authority in dir, which must not already hold one.
func Init(dir, name string) (*CA, error) {
	if name == "" {
		name = "Veil federation CA"
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); err == nil {
		return nil, fmt.Errorf("pki: %s already holds an authority (ca.key); refusing to overwrite it", dir)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generating the authority's key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: signing the authority's certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if err := writeKey(filepath.Join(dir, "ca.key"), key); err != nil {
		return nil, err
	}
	if err := writeCert(filepath.Join(dir, "ca.crt"), der); err != nil {
		return nil, err
	}
	return &CA{dir: dir, cert: cert, key: key}, nil
}

// Load reads the authority in dir.
func Load(dir string) (*CA, error) {
	cert, err := ReadCert(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	key, err := readKey(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("pki: %s: ca.key does not belong to ca.crt", dir)
	}
	return &CA{dir: dir, cert: cert, key: key}, nil
}

// Cert returns the authority's certificate.
func (c *CA) Cert() *x509.Certificate { return c.cert }

// IssueOptions configures a certificate.
type IssueOptions struct {
	// Name is the subject common name: the client id, or the coordinator's
	// name. It also names the files.
	Name string
	Role Role
	// Hosts are the DNS names and IP addresses a server certificate is
	// valid for; loopback (localhost, 127.0.0.1, ::1) is always included.
	Hosts []string
	// Validity defaults to one year.
	Validity time.Duration
}

// Issue signs a new key pair and writes NAME.crt and NAME.key. It refuses
// to overwrite an existing certificate of that name.
func (c *CA) Issue(o IssueOptions) (*x509.Certificate, error) {
	if err := CheckName(o.Name); err != nil {
		return nil, err
	}
	if o.Role != Client && o.Role != Server {
		return nil, fmt.Errorf("pki: unknown role %d", o.Role)
	}
	if o.Validity == 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	if o.Validity < 0 {
		return nil, fmt.Errorf("pki: validity must be positive, got %s", o.Validity)
	}
	crtPath := filepath.Join(c.dir, o.Name+".crt")
	if _, err := os.Stat(crtPath); err == nil {
		return nil, fmt.Errorf("pki: a certificate named %q exists already (%s); revoke it and choose another name", o.Name, crtPath)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generating a key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: o.Name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(o.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if o.Role == Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		for _, h := range o.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else if h != "" && !slices.Contains(tmpl.DNSNames, h) {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	} else {
		if len(o.Hosts) > 0 {
			return nil, errors.New("pki: hosts are for the coordinator's certificate, not a client's")
		}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("pki: signing %q: %w", o.Name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if err := writeKey(filepath.Join(c.dir, o.Name+".key"), key); err != nil {
		return nil, err
	}
	if err := writeCert(crtPath, der); err != nil {
		return nil, err
	}
	return cert, nil
}

// Revoke adds the certificate named name (in the authority's folder) to the
// revocation list and re-signs it. Revoking twice is not an error.
func (c *CA) Revoke(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	cert, err := ReadCert(filepath.Join(c.dir, name+".crt"))
	if err != nil {
		return err
	}
	path := filepath.Join(c.dir, "revoked.crl")
	var entries []x509.RevocationListEntry
	number := big.NewInt(1)
	if crl, err := readCRL(path, c.cert); err == nil {
		entries = crl.RevokedCertificateEntries
		number = new(big.Int).Add(crl.Number, big.NewInt(1))
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if e.SerialNumber.Cmp(cert.SerialNumber) == 0 {
			return nil
		}
	}
	now := time.Now()
	entries = append(entries, x509.RevocationListEntry{SerialNumber: cert.SerialNumber, RevocationTime: now})
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		RevokedCertificateEntries: entries,
		Number:                    number,
		ThisUpdate:                now,
		NextUpdate:                now.AddDate(10, 0, 0),
	}, c.cert, c.key)
	if err != nil {
		return fmt.Errorf("pki: signing the revocation list: %w", err)
	}
	return writePEM(path, "X509 CRL", der)
}

// Revoked reads the authority's revocation list from dir and returns the
// revoked serial numbers (decimal strings). A missing list means none.
func Revoked(dir string, ca *x509.Certificate) (map[string]bool, error) {
	crl, err := readCRL(filepath.Join(dir, "revoked.crl"), ca)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(crl.RevokedCertificateEntries))
	for _, e := range crl.RevokedCertificateEntries {
		out[e.SerialNumber.String()] = true
	}
	return out, nil
}

func readCRL(path string, ca *x509.Certificate) (*x509.RevocationList, error) {
	der, err := readPEM(path, "X509 CRL", "revocation list")
	if err != nil {
		return nil, err
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	if err := crl.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("pki: %s is not signed by the authority: %w", path, err)
	}
	return crl, nil
}

// ReadCert reads one PEM certificate.
func ReadCert(path string) (*x509.Certificate, error) {
	der, err := readPEM(path, "CERTIFICATE", "certificate")
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	return cert, nil
}

// readPEM reads the one PEM block of type typ (what, in words) in path.
func readPEM(path, typ, what string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: reading a %s: %w", what, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != typ {
		return nil, fmt.Errorf("pki: %s is not a PEM %s", path, what)
	}
	return blk.Bytes, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	der, err := readPEM(path, "PRIVATE KEY", "private key")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("pki: %s is not an ECDSA key", path)
	}
	return ek, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der)
}

func writeCert(path string, der []byte) error {
	return writePEM(path, "CERTIFICATE", der)
}

// writePEM replaces path atomically and durably with one PEM block; the
// file is readable by its owner only (0600), keys and certificates alike.
func writePEM(path, typ string, der []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = pem.Encode(tmp, &pem.Block{Type: typ, Bytes: der})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("pki: writing %s: %w", path, err)
	}
	return nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: drawing a serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// Identity is a certificate and key loaded for TLS, with the authority it
// trusts.
type Identity struct {
	Cert tls.Certificate
	Leaf *x509.Certificate
	Pool *x509.CertPool
	CA   *x509.Certificate
}

// LoadIdentity reads NAME.crt, NAME.key and the authority's certificate
// from the paths given.
func LoadIdentity(certPath, keyPath, caPath string) (*Identity, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("pki: loading %s and %s: %w", certPath, keyPath, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	ca, err := ReadCert(caPath)
	if err != nil {
		return nil, err
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("pki: %s is not signed by the authority in %s: %w", certPath, caPath, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	pair.Leaf = leaf
	return &Identity{Cert: pair, Leaf: leaf, Pool: pool, CA: ca}, nil
}

// Revocations is the coordinator's view of the revocation list: it rereads
// the authority's CRL file when it changes, so revoking a client takes
// effect on its next connection without a restart. A CRL that cannot be
// read or is not signed by the authority makes every client refused (fail
// closed).
type Revocations struct {
	path string
	ca   *x509.Certificate

	mu      sync.Mutex
	modTime time.Time
	size    int64
	revoked map[string]bool
	err     error
}

// NewRevocations watches the CRL at path (it need not exist yet).
func NewRevocations(path string, ca *x509.Certificate) *Revocations {
	return &Revocations{path: path, ca: ca}
}

// IsRevoked reports whether serial is revoked; an unreadable list is an
// error.
func (r *Revocations) IsRevoked(serial *big.Int) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fi, err := os.Stat(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.revoked, r.err, r.modTime, r.size = map[string]bool{}, nil, time.Time{}, 0
	case err != nil:
		return false, fmt.Errorf("pki: %w", err)
	case r.revoked == nil || r.err != nil || !fi.ModTime().Equal(r.modTime) || fi.Size() != r.size:
		crl, err := readCRL(r.path, r.ca)
		r.modTime, r.size = fi.ModTime(), fi.Size()
		if err != nil {
			r.revoked, r.err = nil, err
		} else {
			r.revoked, r.err = map[string]bool{}, nil
			for _, e := range crl.RevokedCertificateEntries {
				r.revoked[e.SerialNumber.String()] = true
			}
		}
	}
	if r.err != nil {
		return false, r.err
	}
	return r.revoked[serial.String()], nil
}

// ServerTLS returns the coordinator's TLS configuration: TLS 1.3, client
// certificates required and verified against the authority, and refused
// when revoked (rev may be nil: nothing revoked).
func ServerTLS(id *Identity, rev *Revocations) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.Cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    id.Pool,
		VerifyPeerCertificate: func(_ [][]byte, chains [][]*x509.Certificate) error {
			if len(chains) == 0 || len(chains[0]) == 0 {
				return errors.New("pki: no verified client certificate")
			}
			leaf := chains[0][0]
			if err := CheckName(leaf.Subject.CommonName); err != nil {
				return err
			}
			if rev == nil {
				return nil
			}
			revoked, err := rev.IsRevoked(leaf.SerialNumber)
			if err != nil {
				return err
			}
			if revoked {
				return fmt.Errorf("pki: the certificate of %q is revoked", leaf.Subject.CommonName)
			}
			return nil
		},
	}
}

// ClientTLS returns a client's TLS configuration: TLS 1.3, its own
// certificate, and the coordinator's verified against the authority for
// serverName.
func ClientTLS(id *Identity, serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.Cert},
		RootCAs:      id.Pool,
		ServerName:   serverName,
	}
}

// PeerName returns the subject common name of the verified peer
// certificate of a TLS connection state, or an error if there is none.
func PeerName(cs tls.ConnectionState) (string, *x509.Certificate, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", nil, errors.New("pki: the connection has no verified peer certificate")
	}
	leaf := cs.VerifiedChains[0][0]
	return leaf.Subject.CommonName, leaf, nil
}
