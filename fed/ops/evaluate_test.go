package ops_test

import (
	"context"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/local/localtest"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/training"
)

// evalSetup writes a small LFW-style folder and the initial checkpoint of
// veil train's distillation head on it, with its stand-in describers.
func evalSetup(t *testing.T) (lfw string, init *checkpoint.Checkpoint, o training.Options, d *training.Data) {
	t.Helper()
	lfw = filepath.Join(t.TempDir(), "lfw")
	d, o = localtest.Data(t, lfw, 4)
	s, err := training.NewSession(o.Model, o.Optim, nil, 0, d)
	if err != nil {
		t.Fatal(err)
	}
	return lfw, s.Checkpoint(0, "adam", 1, true), o, d
}

// recorded keeps the log records of the evaluations.
type recorded struct {
	mu       sync.Mutex
	versions []string
}

func (r *recorded) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorded) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorded) WithGroup(string) slog.Handler            { return r }
func (r *recorded) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "model evaluated" {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "model" {
			r.mu.Lock()
			r.versions = append(r.versions, a.Value.String())
			r.mu.Unlock()
		}
		return true
	})
	return nil
}

// TestEvaluatorScoresTheRoundsModels runs a coordinator of two rounds with
// one client over mutual TLS, its metrics behind the evaluator: the last
// evaluation in the state file is of the final model after round 2, its
// accuracy is what an independent evaluator gives that model, no model is
// scored twice, and the metrics saw the rounds and the evaluation.
func TestEvaluatorScoresTheRoundsModels(t *testing.T) {
	lfw, initCk, o, d := evalSetup(t)
	init, err := ops.WeightsFromCheckpoint(initCk)
	if err != nil {
		t.Fatal(err)
	}
	m := ops.NewMetrics()
	logs := &recorded{}
	ev, err := ops.NewEvaluator(ops.EvaluatorOptions{Init: initCk, LFW: lfw, CentreImages: filepath.Join(lfw, "centre"), CentreCount: 2,
		Describers: o.Describers, Workers: 1, Observer: m, Metrics: m, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "pki")
	makePKI(t, dir)
	state := filepath.Join(t.TempDir(), "state.db")
	co, err := coord.New(coord.Options{StatePath: state, Init: init, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 2, Fraction: 1, MinAvailable: 1, MinUpdates: 1, RoundTimeout: 5 * time.Minute,
		Task:          coord.Task{LocalSteps: 5, LearningRate: 0.1, Batch: 8, DP: &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity"}},
		MaxUpdateNorm: 1e6, Metrics: ev})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	id, err := pki.LoadIdentity(filepath.Join(dir, "coordinator.crt"), filepath.Join(dir, "coordinator.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ops.NewServer(ops.ServerOptions{Coordinator: co, StatePath: state, Identity: id, Listen: "127.0.0.1:0", Metrics: m,
		Linger: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ev.Start(co)
	// The round's deadline and this context are safety nets: under load
	// (two busy loops, -cpu 1,2) this test took up to 33 s of its 50 s
	// context, and nothing here depends on a deadline expiring.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	runClients(ctx, t, srv.Addr(), dir, 0.01)
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	ev.Stop(true)

	final, version := co.Model()
	db, err := coord.OpenStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := coord.ReadStatus(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	last := st.GetLastEvaluation()
	if last == nil || last.GetRound() != 2 || last.GetModelVersion() != version || last.GetPairs() != ops.EvaluationPairs {
		t.Fatalf("last evaluation %v, want round 2 of model %s", last, version)
	}
	ref, err := local.NewEvaluator(o.Model, o.Optim, d)
	if err != nil {
		t.Fatal(err)
	}
	acc, thr, err := ref.Accuracy(final)
	if err != nil {
		t.Fatal(err)
	}
	// The threshold is the final model's up to float32 rounding (the
	// evaluators run different micro-batches).
	if last.GetAccuracy() != acc || math.Abs(last.GetThreshold()-thr) > 1e-6 {
		t.Errorf("recorded accuracy %g at threshold %g; the final model scores %g at %g", last.GetAccuracy(), last.GetThreshold(), acc, thr)
	}
	logs.mu.Lock()
	seen := map[string]bool{}
	for _, v := range logs.versions {
		if seen[v] {
			t.Errorf("model %s scored twice (%v)", v, logs.versions)
		}
		seen[v] = true
	}
	n := len(logs.versions)
	logs.mu.Unlock()
	if n < 1 || n > 3 || !seen[version[:12]] {
		t.Errorf("models scored %v; want at most the initial one and one per round, the final one %s among them", logs.versions, version[:12])
	}
	if r, a, done := gathered(t, m, "veil_fed_eval_round"), gathered(t, m, "veil_fed_eval_accuracy"), gathered(t, m, "veil_fed_rounds_total"); r != 2 || a != acc || done != 2 {
		t.Errorf("metrics: evaluation round %g, accuracy %g, rounds %g; want 2, %g, 2 (the metrics told first)", r, a, done, acc)
	}
}

// gathered sums the values of the series of metric name.
func gathered(t *testing.T, m *ops.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			v += s.GetGauge().GetValue() + s.GetCounter().GetValue()
		}
	}
	return v
}

// TestEvaluatorOptionsAreChecked: options that cannot give a score are
// refused before anything is read, and a checkpoint whose weights are not
// the network its header describes is refused once it is built.
func TestEvaluatorOptionsAreChecked(t *testing.T) {
	lfw, initCk, o, _ := evalSetup(t)
	good := ops.EvaluatorOptions{Init: initCk, LFW: lfw, CentreImages: filepath.Join(lfw, "centre"), CentreCount: 2, Describers: o.Describers, Workers: 1}
	lightface := *initCk
	lightface.Header.Model.Kind = "lightface"
	short := *initCk // one parameter fewer than the network it names
	short.Header.Params = short.Header.Params[:len(short.Header.Params)-1]
	short.Values = short.Values[:len(short.Values)-1]
	cases := []struct {
		name string
		set  func(*ops.EvaluatorOptions)
		want string
	}{
		{"no checkpoint", func(e *ops.EvaluatorOptions) { e.Init = nil }, "initial checkpoint is required"},
		{"not a head", func(e *ops.EvaluatorOptions) { e.Init = &lightface }, `holds a "lightface" network`},
		{"no pairs", func(e *ops.EvaluatorOptions) { e.LFW = "" }, "LFW folder is required"},
		{"no input describer", func(e *ops.EvaluatorOptions) { e.Describers.Inputs = nil }, "describer of the head's inputs"},
		{"no centre images", func(e *ops.EvaluatorOptions) { e.CentreImages = "" }, "needs the centre images"},
		{"no teacher", func(e *ops.EvaluatorOptions) { e.Describers.Teacher = nil }, "needs the centre images and the teacher"},
		{"negative count", func(e *ops.EvaluatorOptions) { e.CentreCount = -1 }, "must not be negative"},
		{"another network", func(e *ops.EvaluatorOptions) { e.Init = &short }, "not the initial checkpoint's"},
	}
	for _, c := range cases {
		eo := good
		c.set(&eo)
		_, err := ops.NewEvaluator(eo)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := ops.NewEvaluator(good); err != nil {
		t.Fatalf("good options: %v", err)
	}
}
