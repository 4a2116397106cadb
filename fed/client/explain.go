package client

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CoordinatorError is a failure to talk to the coordinator, worded for the
// person running the client (gRPC's own text names transports, prefaces
// and codes). It wraps the original error.
type CoordinatorError struct {
	msg string
	// Permanent says retrying cannot help: a certificate problem or a
	// refusal.
	Permanent bool
	err       error
}

func (e *CoordinatorError) Error() string { return e.msg }

// Unwrap returns the original error.
func (e *CoordinatorError) Unwrap() error { return e.err }

var validFor = regexp.MustCompile(`certificate is valid for ([^"]*?), not ([^\s"\\]+)`)

// Explain rewords err, raised while talking to the coordinator at addr as
// the certificate name (a client, or anyone asking for the status), as a
// *CoordinatorError if it is a connection or certificate failure or a
// refusal; other errors are returned as they are.
func Explain(addr, name string, err error) error {
	if err == nil {
		return nil
	}
	var ce *CoordinatorError
	if errors.As(err, &ce) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	mk := func(permanent bool, format string, a ...any) error {
		return &CoordinatorError{msg: fmt.Sprintf(format, a...), Permanent: permanent, err: err}
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

// Permanent reports whether err, explained, cannot be cured by retrying.
func Permanent(err error) bool {
	var ce *CoordinatorError
	return errors.As(err, &ce) && ce.Permanent
}
