package ops

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
)

// ServerOptions configures a coordinator's server.
type ServerOptions struct {
	// Coordinator is the coordinator to serve and run (required).
	Coordinator *coord.Coordinator
	// StatePath is the coordinator's state file, read to learn which
	// clients are enrolled (required).
	StatePath string
	// Identity is the coordinator's certificate, key and authority
	// (required); Revocations, if non-nil, is checked at every handshake
	// and call.
	Identity    *pki.Identity
	Revocations *pki.Revocations
	// Listen is the gRPC address (host:port; port 0 picks a free one).
	Listen string
	// MetricsListen, if not empty, is the address of the HTTP endpoint
	// serving /metrics (Prometheus) and /healthz. The metrics name every
	// client and its ε, so over plain HTTP the address must be a loopback
	// one (and the listener is checked to be bound to one).
	MetricsListen string
	// MetricsTLS serves MetricsListen over mutual TLS with the
	// coordinator's certificate, to the operator's certificates only
	// (pki.Operator, not revoked), at any address.
	MetricsTLS bool
	// Metrics must be the coordinator's Observer (coord.Options.Metrics),
	// or nil for no metrics (MetricsListen then serves /healthz only).
	Metrics *Metrics
	// Linger is how long the server keeps answering once the run is over,
	// so that clients learn it; it stops sooner once every enrolled client
	// has been told. Default 10 s.
	Linger time.Duration
	// AwaitFinalDownload makes the server linger, at most Linger, until
	// every enrolled client has also downloaded the final model (libraries
	// import and adopt it: veil library join).
	AwaitFinalDownload bool
	// StopTimeout bounds the graceful stop (calls in flight may finish);
	// default 5 s.
	StopTimeout time.Duration
	// Logger receives structured logs (default: discard).
	Logger *slog.Logger
}

// Server serves a coordinator: its gRPC service and the gRPC health
// service over mutual TLS, and optionally metrics over HTTP.
type Server struct {
	o      ServerOptions
	grpc   *grpc.Server
	health *health.Server
	ln     net.Listener
	mln    net.Listener
	http   *http.Server

	mu       sync.Mutex
	toldDone map[string]bool
	fetched  map[string]string // AwaitFinalDownload: the version each client last downloaded
	serving  bool
}

// NewServer validates o and opens the listeners; Run serves.
func NewServer(o ServerOptions) (*Server, error) {
	if o.Coordinator == nil || o.Identity == nil || o.StatePath == "" {
		return nil, errors.New("coordinator server: a coordinator, its state file and its certificate are required")
	}
	if o.Listen == "" {
		return nil, errors.New("coordinator server: an address to listen on is required")
	}
	if o.MetricsListen != "" && !o.MetricsTLS && !LoopbackAddress(o.MetricsListen) {
		return nil, fmt.Errorf("coordinator server: the metrics address %q is not a loopback address: plain HTTP metrics (they name every client and its ε) are served on this machine only; serve them over mutual TLS (MetricsTLS) elsewhere", o.MetricsListen)
	}
	if o.Linger == 0 {
		o.Linger = 10 * time.Second
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 5 * time.Second
	}
	if o.Linger < 0 || o.StopTimeout < 0 {
		return nil, errors.New("coordinator server: linger and stop timeout must not be negative")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, toldDone: map[string]bool{}, fetched: map[string]string{}, health: health.NewServer()}
	opts := append(o.Coordinator.ServerOptions(),
		grpc.Creds(credentials.NewTLS(pki.ServerTLS(o.Identity, o.Revocations))),
		grpc.ChainUnaryInterceptor(s.watchDone),
		grpc.ChainStreamInterceptor(s.watchDoneStream, s.watchDownloads),
	)
	if o.Metrics != nil {
		opts = append(opts, grpc.StatsHandler(o.Metrics.StatsHandler()))
		o.Metrics.Watch(o.Coordinator)
	}
	s.grpc = grpc.NewServer(opts...)
	fedpb.RegisterCoordinatorServer(s.grpc, o.Coordinator.Service(o.Revocations))
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.setServing(false)
	var err error
	if s.ln, err = net.Listen("tcp", o.Listen); err != nil {
		return nil, fmt.Errorf("coordinator server: %w", err)
	}
	if o.MetricsListen != "" {
		if s.mln, err = net.Listen("tcp", o.MetricsListen); err != nil {
			s.ln.Close()
			return nil, fmt.Errorf("coordinator server: metrics endpoint: %w", err)
		}
		if o.MetricsTLS {
			s.mln = tls.NewListener(s.mln, operatorTLS(o.Identity, o.Revocations))
		} else if a, ok := s.mln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
			// localhost resolved to something else.
			s.mln.Close()
			s.ln.Close()
			return nil, fmt.Errorf("coordinator server: the metrics address %q is bound to %s, not a loopback address", o.MetricsListen, s.mln.Addr())
		}
		mux := http.NewServeMux()
		if o.Metrics != nil {
			mux.Handle("GET /metrics", o.Metrics.Handler())
		}
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			s.mu.Lock()
			ok := s.serving
			s.mu.Unlock()
			if !ok {
				http.Error(w, "not serving", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "serving")
		})
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn)}
	}
	return s, nil
}

// operatorTLS is the metrics endpoint's TLS configuration: the
// coordinator's, admitting the operator's certificates only.
func operatorTLS(id *pki.Identity, rev *pki.Revocations) *tls.Config {
	cfg := pki.ServerTLS(id, rev)
	verify := cfg.VerifyPeerCertificate
	cfg.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
		if err := verify(raw, chains); err != nil {
			return err
		}
		if leaf := chains[0][0]; pki.RoleOf(leaf) != pki.Operator {
			return fmt.Errorf("the metrics are served to the operator's certificate only, not to %q's", leaf.Subject.CommonName)
		}
		return nil
	}
	return cfg
}

// Addr is the gRPC listener's address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// MetricsAddr is the HTTP listener's address ("" without one).
func (s *Server) MetricsAddr() string {
	if s.mln == nil {
		return ""
	}
	return s.mln.Addr().String()
}

func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(fedpb.Coordinator_ServiceDesc.ServiceName, st)
	s.mu.Lock()
	s.serving = ok
	s.mu.Unlock()
}

// watchDone records the clients told that the run is over by Poll.
func (s *Server) watchDone(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if r, ok := resp.(*fedpb.PollResponse); ok && err == nil && r.GetDone() != "" {
		s.told(ctx)
	}
	return resp, err
}

// watchDoneStream records the clients told that the run is over on their
// stream of work (Subscribe).
func (s *Server) watchDoneStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, doneWatcher{ServerStream: ss, s: s})
}

type doneWatcher struct {
	grpc.ServerStream
	s *Server
}

func (w doneWatcher) SendMsg(m any) error {
	err := w.ServerStream.SendMsg(m)
	if p, ok := m.(*fedpb.Push); ok && err == nil && p.GetDone() != "" {
		w.s.told(w.Context())
	}
	return err
}

// told records that the caller of ctx has been told the run is over.
func (s *Server) told(ctx context.Context) {
	if name := peerName(ctx); name != "" {
		s.mu.Lock()
		s.toldDone[name] = true
		s.mu.Unlock()
	}
}

// Run serves and runs the coordinator until the run is over (then it
// lingers, see ServerOptions.Linger, and returns nil) or ctx ends (it
// returns ctx's error). Either way it stops gracefully: the health
// service turns NOT_SERVING, new calls are refused, and calls in flight
// have StopTimeout to finish.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(s.ln) }()
	if s.http != nil {
		go func() {
			if err := s.http.Serve(s.mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics endpoint: %w", err)
			}
		}()
	}
	s.setServing(true)
	s.o.Logger.Info("coordinator serving", "addr", s.Addr(), "metrics", s.MetricsAddr())
	runErr := make(chan error, 1)
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	go func() { runErr <- s.o.Coordinator.Run(runCtx) }()
	var err error
	select {
	case err = <-runErr:
		if err == nil {
			s.o.Logger.Info("the run is over; telling clients", "linger", s.o.Linger)
			s.linger(ctx)
		}
	case err = <-errc:
		err = fmt.Errorf("coordinator server: %w", err)
		cancelRun()
		<-runErr
	}
	s.stop()
	return err
}

// linger waits until every enrolled client has been told the run is over
// (with AwaitFinalDownload, and has downloaded the final model), Linger
// has passed or ctx ends.
func (s *Server) linger(ctx context.Context) {
	deadline := time.NewTimer(s.o.Linger)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.allTold(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

func (s *Server) allTold(ctx context.Context) bool {
	db, err := coord.OpenStatus(s.o.StatePath)
	if err != nil {
		return false
	}
	defer db.Close()
	ids, err := coord.ClientIDs(ctx, db)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if !s.toldDone[id] {
			return false
		}
	}
	return !s.o.AwaitFinalDownload || s.allFetched(ids)
}

// stop stops gracefully within StopTimeout, then forcibly.
func (s *Server) stop() {
	s.setServing(false)
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	t := time.NewTimer(s.o.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.grpc.Stop()
		<-done
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.o.StopTimeout)
		defer cancel()
		if err := s.http.Shutdown(ctx); err != nil {
			s.http.Close()
		}
	}
	s.o.Logger.Info("coordinator stopped")
}
