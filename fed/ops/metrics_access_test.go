package ops_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
)

// TestMetricsAddressMustBeLoopbackWithoutTLS: the metrics name every
// client and its ε, so a plain-HTTP metrics address off this machine is
// refused, in the flag's words by the configuration and by the server
// itself; with --metrics-tls any address is allowed.
func TestMetricsAddressMustBeLoopbackWithoutTLS(t *testing.T) {
	for _, tc := range []struct {
		addr string
		tls  bool
		ok   bool
	}{
		{"127.0.0.1:9464", false, true},
		{"127.8.9.10:9464", false, true},
		{"[::1]:9464", false, true},
		{"localhost:9464", false, true},
		{"0.0.0.0:9464", false, false},
		{":9464", false, false},
		{"[::]:9464", false, false},
		{"192.0.2.7:9464", false, false},
		{"metrics.example.org:9464", false, false},
		{"0.0.0.0:9464", true, true},
		{"metrics.example.org:9464", true, true},
	} {
		c := ops.DefaultConfig()
		c.State, c.MetricsListen, c.MetricsTLS = "s.db", tc.addr, tc.tls
		_, err := c.Options()
		if tc.ok && err != nil {
			t.Errorf("--metrics-listen %s (--metrics-tls=%v): %v", tc.addr, tc.tls, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), `--metrics-listen "`+tc.addr+`" is not a loopback address`) ||
			!strings.Contains(err.Error(), "--metrics-tls")) {
			t.Errorf("--metrics-listen %s: %v, want a refusal naming the flag and --metrics-tls", tc.addr, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "pki")
	makePKI(t, dir)
	state := filepath.Join(t.TempDir(), "state.db")
	co := newTestCoordinator(t, state, nil)
	id := loadIdentity(t, dir, "coordinator")
	// The library refuses too, before binding anything (an address of
	// another machine, so that nothing is opened even where it would not).
	_, err := ops.NewServer(ops.ServerOptions{Coordinator: co, StatePath: state, Identity: id, Listen: "127.0.0.1:0", MetricsListen: "192.0.2.7:0"})
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("the server with plain metrics on 192.0.2.7: %v, want a refusal (not a loopback address)", err)
	}
}

// TestMetricsOverTLSOnlyForTheOperator: with MetricsTLS the metrics are
// served over mutual TLS to the operator's certificate; a client's
// certificate, no certificate and plain HTTP get nothing.
func TestMetricsOverTLSOnlyForTheOperator(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	makePKI(t, dir)
	state := filepath.Join(t.TempDir(), "state.db")
	m := ops.NewMetrics()
	co := newTestCoordinator(t, state, m)
	id := loadIdentity(t, dir, "coordinator")
	ca, err := pki.ReadCert(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ops.NewServer(ops.ServerOptions{Coordinator: co, StatePath: state, Identity: id,
		Revocations: pki.NewRevocations(filepath.Join(dir, "revoked.crl"), ca),
		Listen:      "127.0.0.1:0", MetricsListen: "127.0.0.1:0", MetricsTLS: true, Metrics: m, Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	get := func(scheme, name string) (string, error) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: id.Pool, ServerName: "localhost"}
		if name != "" {
			cfg = pki.ClientTLS(loadIdentity(t, dir, name), "localhost")
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(scheme + "://" + srv.MetricsAddr() + "/metrics")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return string(b), &httpError{resp.Status}
		}
		return string(b), err
	}
	body, err := get("https", "operator")
	if err != nil || !strings.Contains(body, "veil_fed_updates_accepted_total") || !strings.Contains(body, "veil_fed_receive_bytes_held 0") {
		t.Fatalf("the operator's scrape: %v\n%.200s", err, body)
	}
	for _, tc := range []struct{ scheme, name string }{{"https", "client-1"}, {"https", ""}, {"http", ""}} {
		if body, err := get(tc.scheme, tc.name); err == nil || strings.Contains(body, "veil_fed") {
			t.Errorf("%s with certificate %q: %v, body %.100q: want nothing", tc.scheme, tc.name, err, body)
		}
	}
}

type httpError struct{ status string }

func (e *httpError) Error() string { return e.status }

func newTestCoordinator(t *testing.T, state string, m *ops.Metrics) *coord.Coordinator {
	t.Helper()
	o := coord.Options{StatePath: state, Init: model0(), Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 1, Fraction: 1, MinAvailable: 1, MinUpdates: 1, RoundTimeout: time.Minute,
		Task:          coord.Task{LocalSteps: 5, LearningRate: 0.1, Batch: 8, DP: &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity"}},
		MaxUpdateNorm: 10}
	if m != nil {
		o.Metrics = m
	}
	co, err := coord.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	return co
}

func loadIdentity(t *testing.T, dir, name string) *pki.Identity {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return id
}
