package ops_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// fixedTrainer's update is delta in every coordinate, with the DP it
// states it ran.
type fixedTrainer struct{ delta float32 }

func (fixedTrainer) Plan(task *fedpb.RoundConfig, _ float64) (*fedpb.DPParams, error) {
	d := task.GetDp()
	return &fedpb.DPParams{NoiseMultiplier: 1, Clip: d.GetClip(), SamplingRate: 0.1, Steps: uint64(task.GetLocalSteps()),
		Delta: d.GetDelta(), PrivacyUnit: d.GetPrivacyUnit()}, nil
}

func (f fixedTrainer) Train(_ context.Context, model wire.Weights, _ *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	up := model.Clone()
	for i := range up {
		for j := range up[i].Values {
			up[i].Values[j] = f.delta
		}
	}
	return client.Update{Weights: up, DP: plan}, nil
}

func model0() wire.Weights {
	return wire.Weights{{Name: "w", Shape: []int{2, 2}, Values: []float32{1, 2, 3, 4}}, {Name: "b", Shape: []int{2}, Values: []float32{0, 0}}}
}

// chargeFor is the ε a ledger holds after k rounds of the fixed trainer.
func chargeFor(t *testing.T, dim, k int) float64 {
	t.Helper()
	l, _ := dp.NewLedger(dp.LedgerOptions{})
	_ = l.SetBudget("x", dp.Budget{Epsilon: 1e9, Delta: 1e-5})
	ev, err := client.Event(&fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5}, dim)
	if err != nil {
		t.Fatal(err)
	}
	var s dp.Spent
	for range k {
		if s, err = l.Charge("x", ev); err != nil {
			t.Fatal(err)
		}
	}
	return s.Epsilon
}

func makePKI(t *testing.T, dir string) {
	t.Helper()
	ca, err := pki.Init(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(pki.IssueOptions{Name: "coordinator", Role: pki.Server}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"client-1", "client-2", "client-3", "client-4"} {
		if _, err := ca.Issue(pki.IssueOptions{Name: n, Role: pki.Client}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ca.Issue(pki.IssueOptions{Name: "operator", Role: pki.Operator}); err != nil {
		t.Fatal(err)
	}
}

// runClients runs one client per delta (client-1, client-2, …, each with
// its own folder, ledger folder and a fixedTrainer adding its delta) until
// the federation is done, and fails the test on any client's error.
func runClients(ctx context.Context, t *testing.T, addr, dir string, deltas ...float32) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(deltas))
	for i, delta := range deltas {
		name := fmt.Sprintf("client-%d", i+1)
		c, err := client.New(client.Options{Addr: addr, Creds: creds(t, dir, name), Policy: client.DefaultPolicy(dp.Budget{Epsilon: 100, Delta: 1e-5}),
			Dir: filepath.Join(t.TempDir(), name), LedgerDir: t.TempDir(), DataSet: name, Trainer: fixedTrainer{delta}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func creds(t *testing.T, dir, name string) credentials.TransportCredentials {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(pki.ClientTLS(id, "localhost"))
}

// scrape reads the metrics endpoint into series → value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestServerMetricsHealthAndLinger runs 3 clients × 2 rounds through the
// server, with a fourth client enrolled that never comes back, then
// checks the scraped counters, the gRPC health service and /healthz, and
// that the server stops by itself after lingering for the absent client.
func TestServerMetricsHealthAndLinger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	makePKI(t, dir)
	state := filepath.Join(t.TempDir(), "state.db")
	m := ops.NewMetrics()
	co, err := coord.New(coord.Options{StatePath: state, Init: model0(), Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 2, Fraction: 1, MinAvailable: 3, MinUpdates: 3, RoundTimeout: 20 * time.Second, Available: time.Second,
		Task:          coord.Task{LocalSteps: 5, LearningRate: 0.1, Batch: 8, DP: &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity"}},
		MaxUpdateNorm: 10, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	id, err := pki.LoadIdentity(filepath.Join(dir, "coordinator.crt"), filepath.Join(dir, "coordinator.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := pki.ReadCert(filepath.Join(dir, "ca.crt"))
	srv, err := ops.NewServer(ops.ServerOptions{Coordinator: co, StatePath: state, Identity: id,
		Revocations: pki.NewRevocations(filepath.Join(dir, "revoked.crl"), ca),
		Listen:      "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Metrics: m, Linger: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()

	// client-4 enrols, then stays away (it is no longer available when
	// the first round starts: Available is 1 s).
	conn4, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(creds(t, dir, "client-4")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn4.Close()
	api4 := fedpb.NewCoordinatorClient(conn4)
	if _, err := api4.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: 1, BudgetEpsilon: 10, BudgetDelta: 1e-5, PrivacyUnit: "identity"}); err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(conn4)
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: fedpb.Coordinator_ServiceDesc.ServiceName}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of the coordinator service: %v %v", r, err)
	}
	time.Sleep(1200 * time.Millisecond)

	runClients(ctx, t, srv.Addr(), dir, 0.1, 0.2, 0.6)
	// An update after the run is refused as stale.
	w, v := co.Model()
	r, err := client.SendUpdate(ctx, api4, &fedpb.UpdateHeader{ProtocolVersion: 1, Round: 2, ModelVersion: v, Weights: w.Header(),
		Dp: &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5, PrivacyUnit: "identity"}}, w)
	if err != nil || r.GetAccepted() || !strings.HasPrefix(r.GetReason(), "stale") {
		t.Fatalf("late update: %v %v", r, err)
	}

	m.Evaluated(2, 0.75)
	got := scrape(t, srv.MetricsAddr())
	eps := chargeFor(t, 6, 2)
	want := map[string]float64{
		`veil_fed_rounds_total{state="done"}`:              2,
		`veil_fed_rounds_total{state="failed"}`:            0,
		`veil_fed_updates_accepted_total`:                  6,
		`veil_fed_updates_refused_total{reason="stale"}`:   1,
		`veil_fed_updates_refused_total{reason="replay"}`:  0,
		`veil_fed_update_bytes_accepted_total`:             6 * 6 * 4,
		`veil_fed_round_duration_seconds_count`:            2,
		`veil_fed_aggregation_duration_seconds_count`:      2,
		`veil_fed_open_round`:                              0,
		`veil_fed_rounds_closed`:                           2,
		`veil_fed_eval_round`:                              2,
		`veil_fed_eval_accuracy`:                           0.75,
		`veil_fed_client_epsilon_spent{client="client-1"}`: eps,
		`veil_fed_client_epsilon_spent{client="client-2"}`: eps,
		`veil_fed_client_epsilon_spent{client="client-3"}`: eps,
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok || math.Abs(g-v) > 1e-9*math.Max(1, math.Abs(v)) {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if _, ok := got[`veil_fed_client_epsilon_spent{client="client-4"}`]; ok {
		t.Error("client-4 sent no accepted update but has an ε series")
	}
	// Each client downloaded the initial model and the round-1 model.
	if g := got["veil_fed_model_bytes_sent_total"]; g != 3*2*6*4 {
		t.Errorf("model bytes sent %v, want %d", g, 3*2*6*4)
	}
	for _, k := range []string{"veil_fed_grpc_received_bytes_total", "veil_fed_grpc_sent_bytes_total", "veil_fed_connected_clients"} {
		if got[k] < 1 {
			t.Errorf("%s = %v, want > 0", k, got[k])
		}
	}
	if got["veil_fed_grpc_received_bytes_total"] < got["veil_fed_update_bytes_accepted_total"] {
		t.Error("fewer gRPC bytes received than update bytes accepted")
	}
	resp, err := http.Get("http://" + srv.MetricsAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}

	// client-4 is never told the run is over: the server stops by itself
	// after lingering.
	select {
	case err := <-runDone:
		if err != nil {
			t.Fatalf("server: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not stop after the run")
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("the health service still answers after the stop")
	}
	if _, err := http.Get("http://" + srv.MetricsAddr() + "/metrics"); err == nil {
		t.Error("the metrics endpoint still answers after the stop")
	}
}

// TestServerStopsOnCancel checks the graceful stop when the run is not
// over: Run returns the context's error and the listeners close.
func TestServerStopsOnCancel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	makePKI(t, dir)
	state := filepath.Join(t.TempDir(), "state.db")
	co, err := coord.New(coord.Options{StatePath: state, Init: model0(), Strategy: strategy.Options{Name: "fedavg"},
		Rounds: 1, Fraction: 1, MinAvailable: 1, MinUpdates: 1, RoundTimeout: time.Minute,
		Task: coord.Task{LocalSteps: 1, LearningRate: 0.1, Batch: 8}, MaxUpdateNorm: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	id, err := pki.LoadIdentity(filepath.Join(dir, "coordinator.crt"), filepath.Join(dir, "coordinator.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ops.NewServer(ops.ServerOptions{Coordinator: co, StatePath: state, Identity: id, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(creds(t, dir, "client-1")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	if r, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the server did not stop")
	}
	if _, err := http.Get("http://" + srv.MetricsAddr() + "/healthz"); err == nil {
		t.Error("/healthz still answers after the stop")
	}
}
