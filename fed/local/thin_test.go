package local_test

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// recorder is a local trainer that keeps every model it was served and
// the update it returned.
type recorder struct {
	*local.Trainer
	mu      sync.Mutex
	served  []wire.Weights
	updates []wire.Weights
}

func (r *recorder) Train(ctx context.Context, m wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	up, err := r.Trainer.Train(ctx, m, task, plan)
	if err == nil {
		r.mu.Lock()
		r.served, r.updates = append(r.served, m.Clone()), append(r.updates, up.Weights.Clone())
		r.mu.Unlock()
	}
	return up, err
}

// thinCoordinator serves an asynchronous FedBuff coordinator (one update
// per version, so each exchange moves the model by its merged Δ) of init
// with dropout p over mutual TLS on loopback, and returns its address,
// the folder of the certificates and the coordinator.
func thinCoordinator(t *testing.T, init wire.Weights, p float64, versions int) (string, string, *coord.Coordinator) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := pki.Init(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct {
		name string
		role pki.Role
	}{{"coordinator", pki.Server}, {"client-1", pki.Client}} {
		if _, err := ca.Issue(pki.IssueOptions{Name: n.name, Role: n.role}); err != nil {
			t.Fatal(err)
		}
	}
	co, err := coord.New(coord.Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: init, Rounds: versions,
		MinAvailable: 1, RoundTimeout: time.Minute, MaxUpdateNorm: 1e6,
		Task:  coord.Task{LocalEpochs: 1, LearningRate: 0.01, Batch: 2, DP: &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1}},
		Async: &coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 1, MaxStaleness: 4, Thin: strategy.ThinOptions{Drop: p}}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.LoadIdentity(filepath.Join(dir, "coordinator.crt"), filepath.Join(dir, "coordinator.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := pki.OpenRevocations(pki.RevocationsOptions{Path: filepath.Join(dir, "revoked.crl"), CA: ca.Cert(), Numbers: co})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(co.ServerOptions(), grpc.Creds(credentials.NewTLS(pki.ServerTLS(id, rev))))...)
	fedpb.RegisterCoordinatorServer(srv, co.Service(rev))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	go co.Run(ctx)
	t.Cleanup(func() { cancel(); srv.Stop(); co.Close() })
	return ln.Addr().String(), dir, co
}

// runThinned runs a real local trainer against a thinned FedBuff
// coordinator until the run is over and returns the trainer's record, the
// initial and the final model, and the client's spent ε.
func runThinned(t *testing.T, p float64, versions int) (*recorder, wire.Weights, wire.Weights, float64) {
	t.Helper()
	tr, d, o := newTrainer(t, 6)
	ev, err := local.NewEvaluator(o.Model, o.Optim, d)
	if err != nil {
		t.Fatal(err)
	}
	init := ev.Initial()
	addr, dir, co := thinCoordinator(t, init, p, versions)
	id, err := pki.LoadIdentity(filepath.Join(dir, "client-1.crt"), filepath.Join(dir, "client-1.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Trainer: tr}
	c, err := client.New(client.Options{Addr: addr, Creds: credentials.NewTLS(pki.ClientTLS(id, "localhost")),
		Policy: client.DefaultPolicy(dp.Budget{Epsilon: 1000, Delta: 1e-5}), Dir: filepath.Join(dir, "client"),
		LedgerDir: filepath.Join(dir, "client", "ledgers"), DataSet: "client-1", Trainer: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("the client's run: %v", err)
	}
	final, _ := co.Model()
	s, err := c.Spent()
	if err != nil {
		t.Fatal(err)
	}
	return rec, init, final, s.Epsilon
}

// TestThinnedHeadOverMutualTLS: a coordinator serving FedBuff with
// dropout p = 0.5 (veil fed coordinator --strategy fedbuff --thin-p 0.5)
// and a real local trainer (veil train's head, DP-SGD) over mutual TLS
// complete every exchange. Each served model is the head thinned to its
// kept hidden units (its weight, bias, PReLU slopes and the next layer's
// rows), the trainer returns an update of exactly that shape, and the
// final model is the initial one plus each update on its kept units: a
// unit no exchange kept is bit for bit the initial one. The client is
// charged each exchange's DP-SGD on the dimension it trained.
func TestThinnedHeadOverMutualTLS(t *testing.T) {
	const versions = 3
	rec, init, final, spent := runThinned(t, 0.5, versions)
	if len(rec.served) != versions {
		t.Fatalf("the client trained %d exchanges, want %d", len(rec.served), versions)
	}
	hidden := init[0].Shape[1]
	want := init.Clone()
	everKept := make([]bool, hidden)
	var dims []int
	for e, served := range rec.served {
		if err := served.SameLayout(rec.updates[e]); err != nil {
			t.Fatalf("exchange %d: the update is not in the served shape: %v", e, err)
		}
		k := served[0].Shape[1]
		if k >= hidden || k < 1 {
			t.Fatalf("exchange %d: served %d of %d hidden units, not a thinned model", e, k, hidden)
		}
		dims = append(dims, served.Len())
		// Each served unit is the current model's unit whose fc1 column
		// it holds (2048 distinct values).
		kept := make([]int, k)
		for j := range k {
			kept[j] = -1
			for u := range hidden {
				same := true
				for i := range served[0].Shape[0] {
					if served[0].Values[i*k+j] != want[0].Values[i*hidden+u] {
						same = false
						break
					}
				}
				if same {
					kept[j] = u
					break
				}
			}
			if kept[j] < 0 {
				t.Fatalf("exchange %d: served unit %d is none of the model's", e, j)
			}
			everKept[kept[j]] = true
		}
		th := thinnedAt(t, want, kept)
		if err := th.Model.SameLayout(served); err != nil {
			t.Fatalf("exchange %d: %v", e, err)
		}
		for i := range served {
			if !slices.Equal(served[i].Values, th.Model[i].Values) {
				t.Fatalf("exchange %d: served %s is not the model's kept units' (alpha, bias and next layer thinned with the weight)", e, served[i].Name)
			}
		}
		full, err := th.Merge(rec.updates[e])
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			for j := range want[i].Values {
				want[i].Values[j] += full[i].Values[j]
			}
		}
	}
	never := 0
	for u, k := range everKept {
		if k {
			continue
		}
		never++
		for i := range init[0].Shape[0] {
			if final[0].Values[i*hidden+u] != init[0].Values[i*hidden+u] {
				t.Fatalf("unit %d, never kept, moved in fc1/w", u)
			}
		}
		if final[1].Values[u] != init[1].Values[u] || final[2].Values[u] != init[2].Values[u] ||
			!slices.Equal(final[3].Values[u*final[3].Shape[1]:(u+1)*final[3].Shape[1]], init[3].Values[u*init[3].Shape[1]:(u+1)*init[3].Shape[1]]) {
			t.Fatalf("unit %d, never kept, moved", u)
		}
	}
	if never == 0 || never == hidden {
		t.Fatalf("%d of %d units never kept: the draw does not test thinning", never, hidden)
	}
	moved := 0.0
	for i := range want {
		for j, v := range want[i].Values {
			if d := math.Abs(float64(v - final[i].Values[j])); d > 1e-5 {
				t.Fatalf("%s[%d]: the coordinator's %g, the initial model plus the merged updates %g", want[i].Name, j, final[i].Values[j], v)
			}
			moved += math.Abs(float64(final[i].Values[j] - init[i].Values[j]))
		}
	}
	if moved == 0 {
		t.Fatal("the model did not move")
	}
	// The ledger holds each exchange's DP-SGD on what was trained.
	plan := rec.Mechanism()
	var evs []dp.Event
	for _, n := range dims {
		ev, err := client.Event(plan, n)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	acct, err := dp.NewAccountant(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := acct.Add(evs...); err != nil {
		t.Fatal(err)
	}
	rdp, _, err := acct.Epsilon(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	pld, perr := dp.PLDEpsilon(evs, 1e-5, dp.PLDOptions{})
	if close := func(a float64) bool { return math.Abs(spent-a) <= 1e-9*a }; !close(rdp) && (perr != nil || !close(pld)) {
		t.Errorf("the client spent ε = %g; its exchanges on their trained dimensions %v cost %g (RDP), %g (PLD, %v)", spent, dims, rdp, pld, perr)
	}
}

// thinnedAt is model thinned to the kept hidden units.
func thinnedAt(t *testing.T, model wire.Weights, kept []int) *strategy.Thinned {
	t.Helper()
	slices.Sort(kept)
	th, err := strategy.ThinUnits(model, strategy.FCLayers(model), [][]int{kept})
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// TestThinnedAllKeptIsTheUnthinnedPath: a model thinned with p = 0 (every
// unit kept) trains exactly as the model itself, bit for bit; a served
// layout that is no thinning of the head is refused with the reason.
func TestThinnedAllKeptIsTheUnthinnedPath(t *testing.T) {
	a, d, o := newTrainer(t, 6)
	b, _, _ := newTrainer(t, 6)
	ev, err := local.NewEvaluator(o.Model, o.Optim, d)
	if err != nil {
		t.Fatal(err)
	}
	model := ev.Initial()
	th, err := strategy.Thin(model, strategy.ThinOptions{Drop: 0, Layers: strategy.FCLayers(model)}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	task := &fedpb.RoundConfig{Round: 1, Rounds: 1, Strategy: "fedbuff", LocalEpochs: 1, Batch: 2, LearningRate: 0.01}
	ua, err := a.Train(context.Background(), model, task, nil)
	if err != nil {
		t.Fatal(err)
	}
	ub, err := b.Train(context.Background(), th.Model, task, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ua.Weights {
		if !slices.Equal(ua.Weights[i].Values, ub.Weights[i].Values) {
			t.Fatalf("%s: the p = 0 thinned model's update differs from the model's", ua.Weights[i].Name)
		}
	}
	bad := model.Clone()
	bad[3] = wire.Tensor{Name: bad[3].Name, Shape: []int{bad[3].Shape[0], 7}, Values: make([]float32, bad[3].Shape[0]*7)}
	if _, err := a.Train(context.Background(), bad, task, nil); err == nil || !strings.Contains(err.Error(), "layout") {
		t.Fatalf("a model thinned in its output layer: %v", err)
	}
}
