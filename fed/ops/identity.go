package ops

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/veil-privacy/veil/fed/pki"
)

// IdentityFiles resolves the paths of a federation certificate, its key,
// the authority's certificate and its revocation list from a PKI folder
// and a name (dir/name.crt, dir/name.key, dir/ca.crt, dir/revoked.crl), or
// from explicit paths (cert, key and ca together; the list defaults to
// revoked.crl beside ca). An explicit crl is kept either way. Errors name
// the flags (--pki, --name, --cert, --key, --ca) that set them.
func IdentityFiles(dir, name, cert, key, ca, crl string) (certP, keyP, caP, crlP string, err error) {
	switch {
	case cert != "" || key != "" || ca != "":
		if cert == "" || key == "" || ca == "" {
			return "", "", "", "", errors.New("--cert, --key and --ca go together")
		}
		certP, keyP, caP = cert, key, ca
		if crl == "" {
			crl = filepath.Join(filepath.Dir(ca), "revoked.crl")
		}
	case dir != "":
		if name == "" {
			return "", "", "", "", errors.New("--name is required with --pki")
		}
		certP, keyP, caP = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.crt")
		if crl == "" {
			crl = filepath.Join(dir, "revoked.crl")
		}
	default:
		return "", "", "", "", errors.New("certificates are required: --pki DIR, or --cert, --key and --ca")
	}
	return certP, keyP, caP, crl, nil
}

// LoadIdentity loads a federation certificate, its key and the
// authority's certificate (pki.LoadIdentity), saying which file is missing
// and how to get it.
func LoadIdentity(certP, keyP, caP string) (*pki.Identity, error) {
	for _, f := range []struct{ path, what string }{
		{certP, "the certificate"}, {keyP, "its private key"}} {
		if _, err := os.Stat(f.path); errors.Is(err, fs.ErrNotExist) {
			name := strings.TrimSuffix(filepath.Base(certP), ".crt")
			return nil, fmt.Errorf("%s %s is missing: on the authority's machine veil fed certs issue %s makes %s.crt and %s.key; "+
				"copy them and ca.crt here", f.what, f.path, name, name, name)
		}
	}
	if _, err := os.Stat(caP); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the authority's certificate %s is missing: copy ca.crt from the authority's folder (the one veil fed certs init made)", caP)
	}
	return pki.LoadIdentity(certP, keyP, caP)
}
