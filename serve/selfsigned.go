package serve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/veil-privacy/veil/internal/atomicfile"
)

// The self-signed pair's files in the library's folder.
const (
	SelfSignedCert = "serve-cert.pem"
	SelfSignedKey  = "serve-key.pem"
)

// selfSignedLife is how long a generated certificate is valid.
const selfSignedLife = 365 * 24 * time.Hour

// SelfSigned is a certificate and key veil serve made for itself.
type SelfSigned struct {
	// CertFile and KeyFile are the PEM files (mode 0600).
	CertFile, KeyFile string
	// Fingerprint is the certificate's SHA-256, as browsers show it
	// (upper-case hex bytes separated by colons).
	Fingerprint string
	// Created tells whether it was made now (false: an earlier one is
	// reused, so a fingerprint the user checked before stays valid).
	Created bool
}

// SelfSignedPair returns a self-signed certificate for addr's host kept in
// dir (the library's folder): the one made before if it is still valid for
// that host for at least a day, else a new one (ECDSA P-256, valid a year,
// for the host, or for every address of this computer's interfaces and
// its name when the host is empty or unspecified, plus the loopback
// names), written with mode 0600. Its fingerprint is what the user
// compares with the browser's before trusting it.
func SelfSignedPair(dir, addr string) (SelfSigned, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return SelfSigned{}, fmt.Errorf("--addr %q: want host:port: %w", addr, err)
	}
	out := SelfSigned{CertFile: filepath.Join(dir, SelfSignedCert), KeyFile: filepath.Join(dir, SelfSignedKey)}
	if der, err := reusablePair(out.CertFile, out.KeyFile, host); err == nil {
		out.Fingerprint = Fingerprint(der)
		return out, nil
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errStalePair) {
		return SelfSigned{}, err
	}
	names, ips := certNames(host)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return SelfSigned{}, fmt.Errorf("making the self-signed key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return SelfSigned{}, fmt.Errorf("making the self-signed certificate: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "veil serve (self-signed)"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(selfSignedLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return SelfSigned{}, fmt.Errorf("making the self-signed certificate: %w", err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return SelfSigned{}, fmt.Errorf("encoding the self-signed key: %w", err)
	}
	// The key first: a certificate is never left without its key.
	if err := atomicfile.WriteFile(out.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return SelfSigned{}, fmt.Errorf("writing the self-signed key: %w", err)
	}
	if err := atomicfile.WriteFile(out.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return SelfSigned{}, fmt.Errorf("writing the self-signed certificate: %w", err)
	}
	out.Fingerprint, out.Created = Fingerprint(der), true
	return out, nil
}

var errStalePair = errors.New("the self-signed pair is stale")

// reusablePair loads an earlier pair and returns its certificate if it
// matches its key, is private (0600), is valid a day more and covers host.
func reusablePair(certFile, keyFile, host string) ([]byte, error) {
	for _, p := range []string{certFile, keyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%s is readable by other users (mode %v): remove it or make it 0600", p, fi.Mode().Perm())
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("the self-signed pair in %s: %w (remove both files to make a new one)", filepath.Dir(certFile), err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("the self-signed certificate %s: %w", certFile, err)
	}
	if time.Now().Add(24 * time.Hour).After(c.NotAfter) {
		return nil, errStalePair
	}
	names, ips := certNames(host)
	for _, n := range names {
		if c.VerifyHostname(n) != nil {
			return nil, errStalePair
		}
	}
	for _, ip := range ips {
		if c.VerifyHostname(ip.String()) != nil {
			return nil, errStalePair
		}
	}
	return pair.Certificate[0], nil
}

// certNames are the names and addresses a certificate for host covers:
// the host itself, or (empty or unspecified) this computer's name and its
// interfaces' addresses; and the loopback names.
func certNames(host string) ([]string, []net.IP) {
	names := []string{"localhost"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified()):
		if h, err := os.Hostname(); err == nil && h != "" {
			names = append(names, h)
		}
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
					ips = append(ips, n.IP)
				}
			}
		}
	case ip != nil:
		if !ip.IsLoopback() {
			ips = append(ips, ip)
		}
	case host != "localhost":
		names = append(names, host)
	}
	return names, ips
}

// Fingerprint is a certificate's SHA-256 as browsers show it: upper-case
// hex bytes separated by colons.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}
