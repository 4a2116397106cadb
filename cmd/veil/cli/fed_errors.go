package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/pki"
)

// coordinatorError is a failure to talk to the coordinator, worded for the
// person running the command (gRPC's own text names transports, prefaces
// and codes). Permanent says retrying cannot help: a certificate problem.
type coordinatorError struct {
	msg       string
	permanent bool
	err       error
}

func (e *coordinatorError) Error() string { return e.msg }
func (e *coordinatorError) Unwrap() error { return e.err }

var validFor = regexp.MustCompile(`certificate is valid for ([^"]*?), not ([^\s"\\]+)`)

// explainCoordinatorError rewords err, raised while talking to the
// coordinator at addr as the certificate name (a client, or anyone asking
// for the status), if it is a connection or certificate failure or a
// refusal; other errors are returned as they are.
func explainCoordinatorError(addr, name string, err error) error {
	if err == nil {
		return nil
	}
	var ce *coordinatorError
	if errors.As(err, &ce) {
		return err
	}
	st, ok := grpcstatus.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	mk := func(permanent bool, format string, a ...any) error {
		return &coordinatorError{msg: fmt.Sprintf(format, a...), permanent: permanent, err: err}
	}
	switch {
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return mk(true, "the coordinator at %s shows a certificate from another authority than this certificate's ca.crt: "+
			"the coordinator and every client need certificates from the same authority (one veil fed certs init)", addr)
	case validFor.MatchString(msg):
		m := validFor.FindStringSubmatch(msg)
		return mk(true, "the coordinator's certificate is not valid for the name %s (it is valid for %s): dial one of those names, "+
			"or issue the coordinator a certificate for it (veil fed certs issue NAME --role coordinator --host %s)", m[2], m[1], m[2])
	case strings.Contains(msg, "certificate has expired") || strings.Contains(msg, "not yet valid"):
		return mk(true, "the coordinator's certificate at %s has expired or is not yet valid (check both machines' clocks, or issue a new one)", addr)
	case strings.Contains(msg, "remote error: tls:"):
		return mk(true, "the coordinator at %s refused the certificate of %q: it is revoked, expired, issued by another authority, "+
			"or not a client certificate (veil fed certs issue NAME makes client certificates); or the coordinator's revocation list "+
			"is missing or older than one it accepted, and then it refuses everyone", addr, name)
	case strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer"):
		// Under TLS 1.3 a coordinator refuses a client's certificate
		// after the client's side of the handshake is done, so the
		// client may see the connection cut instead of the refusal.
		return mk(false, "the coordinator at %s closed the connection: it may have refused the certificate of %q (revoked, expired, "+
			"issued by another authority, or not a client certificate), or it stopped", addr, name)
	case strings.Contains(msg, "connection refused"):
		return mk(false, "cannot reach the coordinator at %s: connection refused (is it running, and listening on that address? "+
			"it listens on 127.0.0.1 only unless started with --listen 0.0.0.0:PORT)", addr)
	case strings.Contains(msg, "no such host"):
		return mk(false, "cannot reach the coordinator at %s: its host name is unknown", addr)
	case st.Code() == codes.DeadlineExceeded:
		return mk(false, "cannot reach the coordinator at %s: no answer in time (is that the coordinator's address, and is it running?)", addr)
	case st.Code() == codes.Unavailable:
		return mk(false, "cannot reach the coordinator at %s (%s)", addr, innermost(msg))
	case st.Code() == codes.PermissionDenied || st.Code() == codes.Unauthenticated || st.Code() == codes.FailedPrecondition ||
		st.Code() == codes.InvalidArgument || st.Code() == codes.NotFound:
		return mk(true, "the coordinator at %s refused: %s", addr, msg)
	}
	return err
}

// innermost is the last part of gRPC's nested "desc = ..." text.
func innermost(msg string) string {
	if i := strings.LastIndex(msg, "desc = "); i >= 0 {
		msg = msg[i+len("desc = "):]
	}
	return strings.Trim(msg, `"`)
}

// permanentCoordinatorError reports whether err, explained, cannot be
// cured by retrying.
func permanentCoordinatorError(err error) bool {
	var ce *coordinatorError
	return errors.As(err, &ce) && ce.permanent
}

// loadFedIdentity loads a federation certificate, its key and the
// authority's certificate, saying which file is missing and how to get it.
func loadFedIdentity(certP, keyP, caP string) (*pki.Identity, error) {
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

// needAuthority says how to make the authority a --pki folder lacks.
func needAuthority(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no certificate authority in %s (ca.key is missing): make one with veil fed certs init --pki %s, "+
			"or point --pki at the authority's folder", dir, dir)
	}
	return nil
}
