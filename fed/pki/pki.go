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
// An operator's certificate (Operator) authenticates like a client's but
// says, in its subject's organisational unit, that it is the federation's
// operator: the coordinator shows it every client's status and metrics,
// and lets it take part in no round. Only the authority can issue one.
//
// The revocation list has a number that grows with every list the
// authority signs. A coordinator refuses every certificate while its list
// is missing, unreadable, not the authority's, or older (by number) than
// the newest it has accepted (Revocations), so deleting the list or putting
// back an older one revokes everyone rather than no one.
//
// Folder layout (0700; private keys 0600):
//
//	ca.crt ca.key        the authority
//	NAME.crt NAME.key    one pair per issued certificate
//	revoked.crl          the signed revocation list (written by Init)
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
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/veil-privacy/veil/internal/atomicfile"
)

// Role says what a certificate is for.
type Role int

const (
	// Client certificates authenticate a client to the coordinator.
	Client Role = iota
	// Server certificates authenticate the coordinator to clients.
	Server
	// Operator certificates authenticate the federation's operator to the
	// coordinator: every client's status, and no part in rounds.
	Operator
)

// operatorUnit is the subject organisational unit marking an operator's
// certificate.
const operatorUnit = "veil-federation-operator"

// String returns the role's name: client, coordinator or operator.
func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Server:
		return "coordinator"
	case Operator:
		return "operator"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// RoleOf returns the role a certificate of the authority was issued for.
// A certificate is an operator's only if the authority marked it so;
// every other certificate for client authentication is a client's.
func RoleOf(c *x509.Certificate) Role {
	if slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return Server
	}
	if slices.Contains(c.Subject.OrganizationalUnit, operatorUnit) {
		return Operator
	}
	return Client
}

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
	ca := &CA{dir: dir, cert: cert, key: key}
	// A coordinator refuses everyone without a list: the authority starts
	// with an empty one.
	if err := ca.SignCRL(); err != nil {
		return nil, err
	}
	return ca, nil
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
	if o.Role != Client && o.Role != Server && o.Role != Operator {
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
			return nil, fmt.Errorf("pki: hosts are for the coordinator's certificate, not a %s's", o.Role)
		}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		if o.Role == Operator {
			tmpl.Subject.OrganizationalUnit = []string{operatorUnit}
		}
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
// revocation list and re-signs it with the next number. Revoking twice is
// not an error.
func (c *CA) Revoke(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	cert, err := ReadCert(filepath.Join(c.dir, name+".crt"))
	if err != nil {
		return err
	}
	entries, number, err := c.currentCRL()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.SerialNumber.Cmp(cert.SerialNumber) == 0 {
			return nil
		}
	}
	entries = append(entries, x509.RevocationListEntry{SerialNumber: cert.SerialNumber, RevocationTime: time.Now()})
	return c.writeCRL(entries, number)
}

// SignCRL signs the revocation list again with the next number (an empty
// list numbered 1 if the folder has none), as Init does for a new
// authority: a folder made before Init wrote one needs it, since a
// coordinator refuses every certificate without a list.
func (c *CA) SignCRL() error {
	entries, number, err := c.currentCRL()
	if err != nil {
		return err
	}
	return c.writeCRL(entries, number)
}

// currentCRL returns the entries of the authority's list and the number
// the next list gets (1 if there is no list).
func (c *CA) currentCRL() ([]x509.RevocationListEntry, *big.Int, error) {
	crl, err := readCRL(filepath.Join(c.dir, "revoked.crl"), c.cert)
	if errors.Is(err, os.ErrNotExist) {
		return nil, big.NewInt(1), nil
	}
	if err != nil {
		return nil, nil, err
	}
	if crl.Number == nil {
		return nil, nil, fmt.Errorf("pki: %s has no number", filepath.Join(c.dir, "revoked.crl"))
	}
	return crl.RevokedCertificateEntries, new(big.Int).Add(crl.Number, big.NewInt(1)), nil
}

// writeCRL signs and writes the list with entries and number.
func (c *CA) writeCRL(entries []x509.RevocationListEntry, number *big.Int) error {
	path := filepath.Join(c.dir, "revoked.crl")
	now := time.Now()
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
// revoked serial numbers (decimal strings). A missing list is an error.
func Revoked(dir string, ca *x509.Certificate) (map[string]bool, error) {
	crl, err := readCRL(filepath.Join(dir, "revoked.crl"), ca)
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
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		return pem.Encode(w, &pem.Block{Type: typ, Bytes: der})
	})
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
// the authority's CRL file when it changes (another file, size or
// modification time), so revoking a client takes
// effect on its next connection without a restart. It fails closed: while
// the list is missing, cannot be read, is not signed by the authority, has
// no number, or has a lower number than the newest list it has accepted,
// every certificate is refused. The newest number is kept by Numbers
// (the coordinator's state file), so an older list put back is refused
// also after a restart.
type Revocations struct {
	path    string
	ca      *x509.Certificate
	numbers CRLNumbers

	mu      sync.Mutex
	file    os.FileInfo // the list file last read (nil: none)
	revoked map[string]bool
	err     error
	highest *big.Int // the newest list's number accepted (nil: none)
}

// CRLNumbers keeps the number of the newest revocation list accepted.
type CRLNumbers interface {
	// HighestCRLNumber returns the number kept (nil if none).
	HighestCRLNumber() (*big.Int, error)
	// AcceptCRLNumber keeps n, which is higher than the number kept,
	// durably before it returns.
	AcceptCRLNumber(n *big.Int) error
}

// RevocationsOptions configures Revocations.
type RevocationsOptions struct {
	// Path is the authority's revocation list (required).
	Path string
	// CA is the authority's certificate, which must sign the list
	// (required).
	CA *x509.Certificate
	// Numbers keeps the newest list's number across restarts; nil keeps
	// it in memory only.
	Numbers CRLNumbers
}

// OpenRevocations returns the revocation list's watcher, starting from the
// number Numbers kept.
func OpenRevocations(o RevocationsOptions) (*Revocations, error) {
	if o.Path == "" || o.CA == nil {
		return nil, errors.New("pki: revocations need the list's path and the authority's certificate")
	}
	r := &Revocations{path: o.Path, ca: o.CA, numbers: o.Numbers}
	if o.Numbers != nil {
		n, err := o.Numbers.HighestCRLNumber()
		if err != nil {
			return nil, fmt.Errorf("pki: the newest revocation list number accepted: %w", err)
		}
		r.highest = n
	}
	return r, nil
}

// NewRevocations watches the CRL at path, keeping the newest number
// accepted in memory only (OpenRevocations keeps it durably).
func NewRevocations(path string, ca *x509.Certificate) *Revocations {
	return &Revocations{path: path, ca: ca}
}

// IsRevoked reports whether serial is revoked; a list that is missing,
// unreadable or older than one accepted is an error.
func (r *Revocations) IsRevoked(serial *big.Int) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fi, err := os.Stat(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.revoked, r.file = nil, nil
		r.err = fmt.Errorf("pki: the revocation list %s is missing: every certificate is refused until the authority's revoked.crl is back there", r.path)
	case err != nil:
		return false, fmt.Errorf("pki: %w", err)
	case r.revoked == nil || r.err != nil || r.file == nil || !os.SameFile(fi, r.file) || !fi.ModTime().Equal(r.file.ModTime()) || fi.Size() != r.file.Size():
		// A list replaced by a rename (as the authority writes it) is a
		// new file even if written within the file system's timestamp
		// granularity at the same size.
		r.file = fi
		r.revoked = nil
		r.err = r.load()
	}
	if r.err != nil {
		return false, r.err
	}
	return r.revoked[serial.String()], nil
}

// load reads the list, refusing one older than the newest accepted, and
// keeps the number of a newer one (r.mu held).
func (r *Revocations) load() error {
	crl, err := readCRL(r.path, r.ca)
	if err != nil {
		return err
	}
	switch {
	case crl.Number == nil:
		return fmt.Errorf("pki: the revocation list %s has no number: every certificate is refused", r.path)
	case r.highest != nil && crl.Number.Cmp(r.highest) < 0:
		return fmt.Errorf("pki: the revocation list %s is number %s, older than number %s already accepted: every certificate is refused until a list numbered %s or higher is back there",
			r.path, crl.Number, r.highest, r.highest)
	case r.highest == nil || crl.Number.Cmp(r.highest) > 0:
		if r.numbers != nil {
			if err := r.numbers.AcceptCRLNumber(crl.Number); err != nil {
				return fmt.Errorf("pki: keeping the revocation list's number: %w", err)
			}
		}
		r.highest = new(big.Int).Set(crl.Number)
	}
	r.revoked = make(map[string]bool, len(crl.RevokedCertificateEntries))
	for _, e := range crl.RevokedCertificateEntries {
		r.revoked[e.SerialNumber.String()] = true
	}
	return nil
}

// Check refuses a certificate that is revoked, or any while the list
// cannot be trusted (see IsRevoked). A nil Revocations revokes nothing.
func (r *Revocations) Check(leaf *x509.Certificate) error {
	if r == nil {
		return nil
	}
	revoked, err := r.IsRevoked(leaf.SerialNumber)
	if err != nil {
		return err
	}
	if revoked {
		return fmt.Errorf("pki: the certificate of %q is revoked", leaf.Subject.CommonName)
	}
	return nil
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
			return rev.Check(leaf)
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
