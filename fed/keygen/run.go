package keygen

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/veil-privacy/veil/fed/pki"
)

// RunOptions configures Run.
type RunOptions struct {
	Options
	// Identity is the key generator's certificate (required).
	Identity *pki.Identity
	// CRL is the authority's revocation list (required): while it is
	// missing or older than one accepted, every caller is refused.
	CRL string
	// Listen is the address to serve on (host:port).
	Listen string
	// MaxMessageBytes bounds a request (0: DefaultMaxMessageBytes).
	MaxMessageBytes int
	// Ready, if not nil, is told the address served once listening.
	Ready func(addr string)
}

// Run opens the key generator's state and serves it until ctx is done,
// then stops gracefully and closes the state.
func Run(ctx context.Context, o RunOptions) error {
	if o.Identity == nil || o.CRL == "" {
		return errors.New("keygen: serving needs the key generator's certificate and the authority's revocation list")
	}
	if pki.RoleOf(o.Identity.Leaf) != pki.Server {
		return fmt.Errorf("keygen: %q is a %s certificate; the key generator needs a server certificate (veil fed certs issue NAME --role coordinator --host HOST)", o.Identity.Leaf.Subject.CommonName, pki.RoleOf(o.Identity.Leaf))
	}
	svc, err := Open(o.Options)
	if err != nil {
		return err
	}
	defer svc.Close()
	rev, err := pki.OpenRevocations(pki.RevocationsOptions{Path: o.CRL, CA: o.Identity.CA, Numbers: svc})
	if err != nil {
		return err
	}
	if _, err := rev.IsRevoked(o.Identity.Leaf.SerialNumber); err != nil {
		return fmt.Errorf("keygen: revocation list %s: %w", o.CRL, err)
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	srv := NewServer(svc, o.Identity, rev, o.MaxMessageBytes)
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("keygen: serving: %w", err)
	case <-ctx.Done():
		srv.GracefulStop()
		<-done
		return nil
	}
}
