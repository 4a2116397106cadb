package coord_test

import (
	"context"
	"errors"
	"io"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// asyncOptions is an asynchronous coordinator making versions model
// versions.
func asyncOptions(t *testing.T, a coord.AsyncOptions, versions int) coord.Options {
	o := options(filepath.Join(t.TempDir(), "state.db"), versions)
	o.Async = &a
	return o
}

// rawClient is a client speaking the protocol itself over mutual TLS, so
// a test orders its pulls and pushes.
type rawClient struct {
	t    *testing.T
	name string
	api  fedpb.CoordinatorClient
}

func (h *harness) raw(t *testing.T, name string) *rawClient {
	t.Helper()
	conn, err := grpc.NewClient(h.addr, append(wire.DialOptions(), grpc.WithTransportCredentials(h.creds(t, name)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rc := &rawClient{t: t, name: name, api: fedpb.NewCoordinatorClient(conn)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := rc.api.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: fedpb.ProtocolVersion, BudgetEpsilon: 100, BudgetDelta: 1e-5, PrivacyUnit: "identity"}); err != nil {
		t.Fatal(err)
	}
	return rc
}

// pull asks for an exchange and downloads the model served for it.
func (rc *rawClient) pull() (*fedpb.RoundConfig, wire.Weights) {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := rc.api.Poll(ctx, &fedpb.PollRequest{ProtocolVersion: fedpb.ProtocolVersion})
	if err != nil {
		rc.t.Fatal(err)
	}
	task := resp.GetTask()
	if task == nil || task.GetAsync() == nil {
		rc.t.Fatalf("%s: poll answered %v, want an exchange", rc.name, resp)
	}
	stream, err := rc.api.DownloadModel(ctx, &fedpb.ModelRequest{ProtocolVersion: fedpb.ProtocolVersion, ModelVersion: task.GetModelVersion()})
	if err != nil {
		rc.t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		rc.t.Fatal(err)
	}
	dec, err := wire.NewDecoder(first.GetHeader(), wire.Limits{MaxBytes: 64 << 20})
	if err != nil {
		rc.t.Fatal(err)
	}
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rc.t.Fatal(err)
		}
		if err := dec.Write(ch.GetData()); err != nil {
			rc.t.Fatal(err)
		}
	}
	w, err := dec.Finish()
	if err != nil {
		rc.t.Fatal(err)
	}
	if wire.Version(w.Header()) != task.GetModelVersion() {
		rc.t.Fatalf("%s: served model %s, the task names %s", rc.name, wire.Version(w.Header()), task.GetModelVersion())
	}
	return task, w
}

// push sends update (on the served layout) for task, stating the DP-SGD
// the test trainer runs, and returns the answer.
func (rc *rawClient) push(task *fedpb.RoundConfig, update wire.Weights) *fedpb.SubmitResponse {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := task.GetDp()
	h := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: task.GetRound(), ModelVersion: task.GetModelVersion(),
		Dp:      &fedpb.DPParams{NoiseMultiplier: 1, Clip: d.GetClip(), SamplingRate: 0.1, Steps: uint64(task.GetLocalSteps()), Delta: d.GetDelta(), PrivacyUnit: d.GetPrivacyUnit()},
		Weights: update.Header()}
	resp, err := client.SendUpdate(ctx, rc.api, h, update)
	if err != nil {
		rc.t.Fatal(err)
	}
	return resp
}

// constant returns w's layout with every value v.
func constant(w wire.Weights, v float32) wire.Weights {
	out := w.Clone()
	for i := range out {
		for j := range out[i].Values {
			out[i].Values[j] = v
		}
	}
	return out
}

func wantModel(t *testing.T, co *coord.Coordinator, want []float32, tol float64) {
	t.Helper()
	w, _ := co.Model()
	var got []float32
	for _, x := range w {
		got = append(got, x.Values...)
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("model %v, want %v (±%g)", got, want, tol)
		}
	}
}

// Irene's Algorithm 1 over real gRPC and mutual TLS, by hand: two
// clients pull the centre x̃₀ = (1, 2, 3, 4, 0, 0); client 1 sends
// Δ = 0.2 (x = x̃₀ + 0.2), so x̃₁ = x̃₀ + β·0.2 = x̃₀ + 0.1 at β = 0.5;
// client 2, whose pull was x̃₀, sends Δ = 0.6: x = x̃₀ + 0.6, and
// x̃₂ = x̃₁ + β(x − x̃₁) = x̃₀ + 0.1 + 0.5·0.5 = x̃₀ + 0.35.
func TestEASGDExchangesOverMutualTLSMatchHandComputedValues(t *testing.T) {
	h := startHarness(t, asyncOptions(t, coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 4, MaxStaleness: 4}, 10), filepath.Join(t.TempDir(), "pki"))
	c1, c2 := h.raw(t, "client-1"), h.raw(t, "client-2")
	t1, m1 := c1.pull()
	t2, _ := c2.pull()
	if t1.GetLocalSteps() != 4 || t1.GetAsync().GetBeta() != 0.5 || t1.GetAsync().GetBase() != 0 {
		t.Fatalf("task %v: want λ = 4 local steps, β = 0.5, base 0", t1)
	}
	if r := c1.push(t1, constant(m1, 0.2)); !r.GetAccepted() {
		t.Fatalf("client 1 refused: %s", r.GetReason())
	}
	wantModel(t, h.co, []float32{1.1, 2.1, 3.1, 4.1, 0.1, 0.1}, 1e-6)
	r := c2.push(t2, constant(m1, 0.6))
	if !r.GetAccepted() {
		t.Fatalf("client 2 refused: %s", r.GetReason())
	}
	wantModel(t, h.co, []float32{1.35, 2.35, 3.35, 4.35, 0.35, 0.35}, 1e-6)
	if _, done := h.co.Round(); done != 2 {
		t.Fatalf("%d model versions, want 2", done)
	}
	// Each exchange was charged to its client's ledger at the coordinator.
	if r.GetSpentEpsilon() <= 0 {
		t.Fatalf("client 2's exchange charged ε = %g", r.GetSpentEpsilon())
	}
	// The same update again: its exchange is answered, nothing changes.
	if r := c2.push(t2, constant(m1, 0.6)); r.GetAccepted() || !strings.HasPrefix(r.GetReason(), "stale") {
		t.Fatalf("a replayed exchange: accepted %v, reason %q", r.GetAccepted(), r.GetReason())
	}
	wantModel(t, h.co, []float32{1.35, 2.35, 3.35, 4.35, 0.35, 0.35}, 1e-6)
}

// FedBuff's staleness weights, applied by the coordinator: K = 2. Clients
// 1, 2 and 3 pull version 0; 1 and 2 send 0.2 and 0.6 (staleness 0,
// weight 1): v₁ = v₀ + (0.2 + 0.6)/2 = v₀ + 0.4. Client 3's update (−1.0)
// is now one version stale, weight (1 + 1)^−½; client 4 pulls v₁ and sends
// 0.5 (weight 1): v₂ = v₁ + (−1/√2 + 0.5)/2.
func TestFedBuffAppliesStalenessWeights(t *testing.T) {
	h := startHarness(t, asyncOptions(t, coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 2, MaxStaleness: 2}, 10), filepath.Join(t.TempDir(), "pki"))
	cs := []*rawClient{h.raw(t, "client-1"), h.raw(t, "client-2"), h.raw(t, "client-3"), h.raw(t, "client-4")}
	t1, m := cs[0].pull()
	t2, _ := cs[1].pull()
	t3, _ := cs[2].pull()
	for i, x := range []struct {
		task *fedpb.RoundConfig
		d    float32
	}{{t1, 0.2}, {t2, 0.6}} {
		if r := cs[i].push(x.task, constant(m, x.d)); !r.GetAccepted() {
			t.Fatalf("client %d refused: %s", i+1, r.GetReason())
		}
	}
	wantModel(t, h.co, []float32{1.4, 2.4, 3.4, 4.4, 0.4, 0.4}, 1e-6)
	t4, m4 := cs[3].pull()
	if t4.GetAsync().GetBase() != 1 {
		t.Fatalf("client 4's exchange is based on version %d, want 1", t4.GetAsync().GetBase())
	}
	if r := cs[2].push(t3, constant(m, -1)); !r.GetAccepted() {
		t.Fatalf("client 3 refused: %s", r.GetReason())
	}
	wantModel(t, h.co, []float32{1.4, 2.4, 3.4, 4.4, 0.4, 0.4}, 1e-6) // buffered, not applied
	if r := cs[3].push(t4, constant(m4, 0.5)); !r.GetAccepted() {
		t.Fatalf("client 4 refused: %s", r.GetReason())
	}
	step := (-1/math.Sqrt2 + 0.5) / 2
	if w := strategy.StalenessWeight(1, 0.5); math.Abs(w-1/math.Sqrt2) > 1e-15 {
		t.Fatalf("weight %g", w)
	}
	want := []float32{float32(1.4 + step), float32(2.4 + step), float32(3.4 + step), float32(4.4 + step), float32(0.4 + step), float32(0.4 + step)}
	wantModel(t, h.co, want, 1e-6)
	// Unweighted (staleness ignored), the model would be v₁ − 0.25.
	if w, _ := h.co.Model(); math.Abs(float64(w[0].Values[0])-1.15) < 0.05 {
		t.Fatal("the stale update was applied with full weight")
	}
}

// An exchange based on a version older than the limit is refused with
// its reason, and changes neither the model nor the client's ledger.
func TestStaleExchangeRefused(t *testing.T) {
	h := startHarness(t, asyncOptions(t, coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 1, MaxStaleness: 0}, 10), filepath.Join(t.TempDir(), "pki"))
	c1, c2 := h.raw(t, "client-1"), h.raw(t, "client-2")
	t1, m := c1.pull()
	t2, _ := c2.pull()
	if r := c1.push(t1, constant(m, 0.2)); !r.GetAccepted() {
		t.Fatalf("client 1 refused: %s", r.GetReason())
	}
	r := c2.push(t2, constant(m, 0.6))
	if r.GetAccepted() || !strings.HasPrefix(r.GetReason(), "stale") || !strings.Contains(r.GetReason(), "limit is 0") {
		t.Fatalf("a stale exchange: accepted %v, reason %q", r.GetAccepted(), r.GetReason())
	}
	wantModel(t, h.co, []float32{1.1, 2.1, 3.1, 4.1, 0.1, 0.1}, 1e-6)
	st := readStatus(t, h.state)
	for _, c := range st.Clients {
		if c.Id == "client-2" && (c.Updates != 0 || c.Epsilon != 0) {
			t.Fatalf("client 2 after a refused exchange: %d updates, ε = %g", c.Updates, c.Epsilon)
		}
	}
	// A new exchange on the current model is accepted.
	t3, m3 := c2.pull()
	if r := c2.push(t3, constant(m3, 0.6)); !r.GetAccepted() {
		t.Fatalf("client 2's fresh exchange refused: %s", r.GetReason())
	}
}

// Thinning with p = 0 keeps every unit: the exchange is the full one,
// bit for bit. With p = 0.5 the served model has only the kept columns of
// w (and entries of b), and the units left out stay as they were.
func TestThinnedExchanges(t *testing.T) {
	layers := []strategy.FCLayer{{Weight: "w", Bias: "b"}}
	for _, c := range []struct {
		a    coord.AsyncOptions
		move float32 // what Δ = 0.4 does to a kept value
	}{
		{coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 1, MaxStaleness: 4}, 0.2},
		{coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 1, MaxStaleness: 4}, 0.4},
	} {
		t.Run(c.a.Strategy, func(t *testing.T) {
			run := func(thin strategy.ThinOptions) (wire.Weights, wire.Weights) {
				a := c.a
				a.Thin = thin
				h := startHarness(t, asyncOptions(t, a, 10), filepath.Join(t.TempDir(), "pki"))
				rc := h.raw(t, "client-1")
				task, served := rc.pull()
				if r := rc.push(task, constant(served, 0.4)); !r.GetAccepted() {
					t.Fatalf("refused: %s", r.GetReason())
				}
				w, _ := h.co.Model()
				return served, w
			}
			_, full := run(strategy.ThinOptions{})
			_, p0 := run(strategy.ThinOptions{Drop: 0, Layers: layers})
			for i := range full {
				for j := range full[i].Values {
					if full[i].Values[j] != p0[i].Values[j] {
						t.Fatalf("p = 0: %v, the full exchange: %v", p0, full)
					}
				}
			}
			for range 5 {
				served, w := run(strategy.ThinOptions{Drop: 0.5, Layers: layers})
				kept := map[int]bool{}
				for j := 0; j < served[0].Shape[1]; j++ {
					// w's first row is (1, 2): a served column is the unit of that value.
					kept[int(served[0].Values[j])-1] = true
				}
				for u := range 2 {
					want := []float32{float32(1 + u), float32(3 + u), 0}
					if kept[u] {
						want = []float32{want[0] + c.move, want[1] + c.move, c.move}
					}
					got := []float32{w[0].Values[u], w[0].Values[2+u], w[1].Values[u]}
					for k := range want {
						if math.Abs(float64(got[k]-want[k])) > 1e-6 {
							t.Fatalf("unit %d (kept %v): %v, want %v", u, kept[u], got, want)
						}
					}
				}
			}
		})
	}
}

// slowTrainer blocks until release is closed.
type slowTrainer struct {
	fixedTrainer
	started chan struct{}
	release chan struct{}
	once    *sync.Once
}

func (s slowTrainer) Train(ctx context.Context, m wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	s.once.Do(func() { close(s.started) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return client.Update{}, ctx.Err()
	}
	return s.fixedTrainer.Train(ctx, m, task, plan)
}

// A client that trains slowly blocks no one: a fast client makes every
// model version while the slow one is still training its first exchange.
func TestSlowClientDoesNotBlockFastOne(t *testing.T) {
	h := startHarness(t, asyncOptions(t, coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 5, MaxStaleness: 100}, 6), filepath.Join(t.TempDir(), "pki"))
	slow := slowTrainer{fixedTrainer: fixedTrainer{0.1, 1, 0.1}, started: make(chan struct{}), release: make(chan struct{}), once: &sync.Once{}}
	defer close(slow.release)
	sc := h.client(t, "client-2", slow, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	go sc.Run(ctx)
	select {
	case <-slow.started:
	case <-ctx.Done():
		t.Fatal("the slow client never started training")
	}
	fc := h.client(t, "client-1", fixedTrainer{0.1, 1, 0.1}, 100)
	if err := fc.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if _, done := h.co.Round(); done != 6 {
		t.Fatalf("%d model versions, want 6", done)
	}
	st := readStatus(t, h.state)
	for _, c := range st.Clients {
		want := map[string]uint64{"client-1": 6, "client-2": 0}[c.Id]
		if c.Updates != want {
			t.Fatalf("client %s: %d exchanges, want %d", c.Id, c.Updates, want)
		}
	}
	// The fast client's own EASGD parameters moved with its exchanges.
	if x := fc.EASGDParams(); x == nil {
		t.Fatal("the fast client kept no EASGD parameters")
	}
}

// Settings out of range are refused with a clear reason, as is a FedBuff
// buffer too small for masking (more in TestAsyncSecureOptionsValidated).
func TestAsyncOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    coord.AsyncOptions
		sec  bool
		want string
	}{
		{"unknown", coord.AsyncOptions{Strategy: "hogwild"}, false, "asynchronous strategy"},
		{"beta", coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 1.5, Period: 1}, false, "moving rate"},
		{"period", coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5}, false, "period"},
		{"buffer", coord.AsyncOptions{Strategy: coord.AsyncFedBuff}, false, "buffer size"},
		{"staleness", coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 2, MaxStaleness: -1}, false, "staleness"},
		{"thin", coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 1, Thin: strategy.ThinOptions{Drop: 1}}, false, "dropout"},
		{"secagg", coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 2}, true, "at least 3 clients"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := asyncOptions(t, tc.a, 3)
			if tc.sec {
				o.SecAgg = &coord.SecAggOptions{Mode: "masking", MinHonest: 2}
			}
			_, err := coord.New(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// A coordinator started again on its state file continues where it
// stopped: the model version, its sequence number and FedBuff's buffer.
func TestAsyncRestartKeepsBufferAndVersion(t *testing.T) {
	pkiDir := filepath.Join(t.TempDir(), "pki")
	o := asyncOptions(t, coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 2, MaxStaleness: 4}, 10)
	h := startHarness(t, o, pkiDir)
	c1, c2, c3 := h.raw(t, "client-1"), h.raw(t, "client-2"), h.raw(t, "client-3")
	for i, c := range []*rawClient{c1, c2, c3} {
		task, m := c.pull()
		if r := c.push(task, constant(m, float32(i+1)/10)); !r.GetAccepted() {
			t.Fatalf("refused: %s", r.GetReason())
		}
	}
	// v₁ = v₀ + (0.1 + 0.2)/2; 0.3 waits in the buffer.
	wantModel(t, h.co, []float32{1.15, 2.15, 3.15, 4.15, 0.15, 0.15}, 1e-6)
	h.stop()
	o.Init = nil
	h2 := startHarness(t, o, pkiDir)
	if _, done := h2.co.Round(); done != 1 {
		t.Fatalf("restarted at version %d, want 1", done)
	}
	c4 := h2.raw(t, "client-4")
	task, m := c4.pull()
	if task.GetAsync().GetBase() != 1 {
		t.Fatalf("the exchange is based on version %d, want 1", task.GetAsync().GetBase())
	}
	if r := c4.push(task, constant(m, 0.5)); !r.GetAccepted() {
		t.Fatalf("refused: %s", r.GetReason())
	}
	// The buffered 0.3 (now one version stale, but weighted when it came:
	// staleness 0) and 0.5: v₂ = v₁ + (0.3 + 0.5)/2.
	wantModel(t, h2.co, []float32{1.55, 2.55, 3.55, 4.55, 0.55, 0.55}, 1e-6)
}

// A client revoked after it pulled cannot send its exchange: the call is
// refused and the model does not move.
func TestRevokedClientsExchangeRefused(t *testing.T) {
	h := startHarness(t, asyncOptions(t, coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 1, MaxStaleness: 4}, 10), filepath.Join(t.TempDir(), "pki"))
	c := h.raw(t, "client-1")
	task, m := c.pull()
	if err := h.ca.Revoke("client-1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hd := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: task.GetRound(), ModelVersion: task.GetModelVersion(),
		Dp: &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 1, Delta: 1e-5, PrivacyUnit: "identity"}, Weights: m.Header()}
	resp, err := client.SendUpdate(ctx, c.api, hd, constant(m, 0.2))
	if err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("a revoked client's exchange: %v, %v", resp, err)
	}
	wantModel(t, h.co, []float32{1, 2, 3, 4, 0, 0}, 0)
}

// keptUnits are the units of w (model0's first row is (1, 2)) a served
// thinned model holds.
func keptUnits(served wire.Weights) map[int]bool {
	kept := map[int]bool{}
	for j := 0; j < served[0].Shape[1]; j++ {
		kept[int(served[0].Values[j])-1] = true
	}
	return kept
}

// A stale thinned EASGD exchange moves only its own units: client 1 is
// served both units, client 2 one; client 1's Δ = 0.4 moves everything by
// 0.2; client 2's Δ = 0.4, computed on the older centre, moves its unit
// to x̃₀ + 0.2 + β(0.4 − 0.2) = x̃₀ + 0.3, and the unit it was not served
// stays at x̃₀ + 0.2 (not pulled back towards the older centre).
func TestThinnedStaleExchangeMovesOnlyItsUnits(t *testing.T) {
	layers := []strategy.FCLayer{{Weight: "w", Bias: "b"}}
	h := startHarness(t, asyncOptions(t, coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 1, MaxStaleness: 4,
		Thin: strategy.ThinOptions{Drop: 0.5, Layers: layers}}, 10), filepath.Join(t.TempDir(), "pki"))
	c1, c2 := h.raw(t, "client-1"), h.raw(t, "client-2")
	pullUntil := func(c *rawClient, units int) (*fedpb.RoundConfig, wire.Weights, map[int]bool) {
		for range 200 {
			task, served := c.pull()
			if k := keptUnits(served); len(k) == units {
				return task, served, k
			}
		}
		t.Fatalf("%s was never served %d units in 200 pulls", c.name, units)
		return nil, nil, nil
	}
	t1, m1, _ := pullUntil(c1, 2)
	t2, m2, k2 := pullUntil(c2, 1)
	if r := c1.push(t1, constant(m1, 0.4)); !r.GetAccepted() {
		t.Fatal(r.GetReason())
	}
	if r := c2.push(t2, constant(m2, 0.4)); !r.GetAccepted() {
		t.Fatal(r.GetReason())
	}
	w, _ := h.co.Model()
	for u := range 2 {
		move := float32(0.2)
		if k2[u] {
			move = 0.3
		}
		want := []float32{float32(1+u) + move, float32(3+u) + move, move}
		got := []float32{w[0].Values[u], w[0].Values[2+u], w[1].Values[u]}
		for k := range want {
			if math.Abs(float64(got[k]-want[k])) > 1e-6 {
				t.Fatalf("unit %d (served to client 2: %v): %v, want %v", u, k2[u], got, want)
			}
		}
	}
}
