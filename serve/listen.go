package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DefaultAddr is where veil serve listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7470"

// CheckAddr checks a listen address: host:port, where a host that is not a
// loopback address (or empty, meaning every interface) needs TLS. It
// reports whether the address is loopback only.
func CheckAddr(addr string, withTLS bool) (loopback bool, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--addr %q: want host:port, e.g. %s: %w", addr, DefaultAddr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return false, fmt.Errorf("--addr %q: bad port %q", addr, port)
	}
	ip := net.ParseIP(host)
	loopback = host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && !withTLS {
		return false, fmt.Errorf("--addr %q listens beyond this computer: give --tls-cert and --tls-key, or --self-signed, or use a loopback address such as %s", addr, DefaultAddr)
	}
	return loopback, nil
}

// HostsFor returns the Host header values a server listening on addr
// answers to (Options.Hosts): nil (any loopback name) for a loopback
// address; the address itself for one interface; any name ("*") for every
// interface (0.0.0.0, [::] or no host), where TLS is required and a
// rebinding page's name would not match the certificate.
func HostsFor(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return []string{addr}
	}
	ip := net.ParseIP(host)
	switch {
	case host == "localhost" || (ip != nil && ip.IsLoopback()):
		return nil
	case host == "" || (ip != nil && ip.IsUnspecified()):
		return []string{"*"}
	}
	return []string{addr}
}

// ListenOptions configure ListenAndServe.
type ListenOptions struct {
	// Addr is host:port (checked with CheckAddr).
	Addr string
	// TLSCert and TLSKey are PEM files; both or neither.
	TLSCert, TLSKey string
	// SelfSigned asks for a self-signed pair (SelfSignedPair) instead of
	// TLSCert and TLSKey: Check accepts it in their place; the caller then
	// sets them to the pair's files and clears SelfSigned before
	// ListenAndServe, which refuses it still set.
	SelfSigned bool
	// Ready is called with the server's URL once it listens.
	Ready func(url string)
}

// Check checks the options before anything is unlocked or loaded: the
// address (CheckAddr) and the TLS pair. It reports whether the address is
// loopback only.
func (o ListenOptions) Check() (loopback bool, err error) {
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return false, errors.New("give both --tls-cert and --tls-key, or neither")
	}
	if o.SelfSigned && o.TLSCert != "" {
		return false, errors.New("give --self-signed or --tls-cert and --tls-key, not both")
	}
	return CheckAddr(o.Addr, o.TLSCert != "" || o.SelfSigned)
}

// ListenAndServe serves s on o.Addr until ctx is done, then shuts down
// gracefully (at most 5 s) and stops a running scan.
func (s *Server) ListenAndServe(ctx context.Context, o ListenOptions) error {
	if _, err := o.Check(); err != nil {
		return err
	}
	if o.SelfSigned {
		return errors.New("serve: ListenOptions.SelfSigned still set: make the pair with SelfSignedPair and give its files as TLSCert and TLSKey")
	}
	withTLS := o.TLSCert != ""
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: nil, BaseContext: func(net.Listener) context.Context { return ctx }}
	scheme := "http"
	if withTLS {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return fmt.Errorf("loading --tls-cert and --tls-key: %w", err)
		}
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		scheme = "https"
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.Addr, err)
	}
	if withTLS {
		ln = tls.NewListener(ln, hs.TLSConfig)
	}
	if o.Ready != nil {
		o.Ready(scheme + "://" + ln.Addr().String() + "/")
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	s.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		err = hs.Close()
	}
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}
