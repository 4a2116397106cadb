package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/training"
)

// fedEvaluation is the coordinator's latest evaluation of its model, as
// veil fed status and the coordinator's summary print it. The coordinator
// keeps it in its state file (coord.RecordEvaluation), so it is read like
// the rest of the status, locally or over the network.
type fedEvaluation struct {
	// Round is the number of rounds closed when the model was scored (0:
	// the initial model).
	Round        int     `json:"round"`
	ModelVersion string  `json:"model_version"`
	Accuracy     float64 `json:"accuracy"`
	Threshold    float64 `json:"threshold"`
	Pairs        string  `json:"pairs"`
	Time         string  `json:"time"`
}

// evaluationFromPB converts the status's evaluation (nil if none).
func evaluationFromPB(ev *fedpb.Evaluation) *fedEvaluation {
	if ev == nil {
		return nil
	}
	return &fedEvaluation{Round: int(ev.GetRound()), ModelVersion: ev.GetModelVersion(), Accuracy: ev.GetAccuracy(),
		Threshold: ev.GetThreshold(), Pairs: ev.GetPairs(), Time: time.UnixMilli(ev.GetTimeUnixMs()).UTC().Format(time.RFC3339)}
}

// roundEvaluator scores the coordinator's model on LFW's development
// pairs (threshold on pairsDevTrain, accuracy on pairsDevTest, exactly as
// veil train scores) after every aggregated round, in the background so
// rounds are not held up; only the latest model is scored when rounds
// close faster than evaluations.
type roundEvaluator struct {
	coord.Observer // the metrics, told first
	ev             *local.Evaluator
	log            *slog.Logger
	co             *coord.Coordinator
	metrics        *ops.Metrics

	kick chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	last string // model version last scored
}

// newRoundEvaluator loads what scoring needs: the pair images of dataDir
// (an LFW-layout folder) described as the model's input, for the network
// of the initial checkpoint.
func newRoundEvaluator(e *env, obs *ops.Metrics, initCk *checkpoint.Checkpoint, dataDir, centre string, centreCount int,
	desc *training.Describers, log *slog.Logger) (*roundEvaluator, error) {
	cfg := initCk.Header.Model
	if cfg.Kind != "head" {
		return nil, fmt.Errorf("--eval-data: evaluation is for an embedding head; the initial checkpoint holds %q", cfg.Kind)
	}
	features := cfg.Features
	if features == "" {
		features = "descriptor"
	}
	h := &headFlags{features: features, detector: "tiny", align: "both", minScore: 0.5, quiet: true}
	def := datadir.Default()
	o := training.Options{
		Model: training.ModelOptions{Kind: "head", Features: features, Loss: initCk.Header.Loss.Kind, Scale: initCk.Header.Loss.Scale,
			Margin: initCk.Header.Loss.Margin},
		// One training identity: the session needs data; only the pairs are scored.
		Data:       training.DataOptions{Set: "lfw", LFW: dataDir, MinImages: 1, MaxPeople: 1, CentreImages: centre, CentreCount: centreCount},
		Optim:      training.OptimOptions{Batch: 1, MicroBatch: 32, Optimizer: "sgd", LearningRate: 0.01},
		Epochs:     1,
		Checkpoint: filepath.Join(os.TempDir(), "veil-fed-coordinator-unused.ckpt"),
		Describers: training.Describers{Inputs: h.openInputs, Teacher: h.openDescriber},
	}
	if desc != nil {
		o.Describers = *desc
	}
	if o.Data.CentreImages == "" {
		o.Data.CentreImages = filepath.Join(def, "mtfl", "net_7876")
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("--eval-data: %w", err)
	}
	draw := &trainProgress{w: e.stderr, quiet: true}
	o.Progress = draw.event
	data, err := training.LoadData(&o)
	if err != nil {
		return nil, fmt.Errorf("--eval-data: %w", err)
	}
	ev, err := local.NewEvaluator(o.Model, o.Optim, data)
	if err != nil {
		return nil, fmt.Errorf("--eval-data: %w", err)
	}
	init, err := ops.WeightsFromCheckpoint(initCk)
	if err != nil {
		return nil, err
	}
	if err := ev.Initial().SameLayout(init); err != nil {
		return nil, fmt.Errorf("--eval-data: the evaluation network is not the initial checkpoint's (%w)", err)
	}
	return &roundEvaluator{Observer: obs, metrics: obs, ev: ev, log: log, kick: make(chan struct{}, 1)}, nil
}

// RoundClosed implements coord.Observer: an aggregated round asks for an
// evaluation.
func (r *roundEvaluator) RoundClosed(state string, d, agg time.Duration) {
	r.Observer.RoundClosed(state, d, agg)
	if state == "done" {
		r.request()
	}
}

func (r *roundEvaluator) request() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// start scores the current model now and after every aggregated round
// until stop.
func (r *roundEvaluator) start(co *coord.Coordinator) {
	r.co = co
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for range r.kick {
			r.score()
		}
	}()
	r.request()
}

// stop waits for the evaluation under way, then, if final, scores the
// final model unless it has been scored.
func (r *roundEvaluator) stop(final bool) {
	close(r.kick)
	r.wg.Wait()
	if final {
		r.score()
	}
}

func (r *roundEvaluator) score() {
	w, v := r.co.Model()
	r.mu.Lock()
	done := r.last == v
	r.mu.Unlock()
	if done {
		return
	}
	_, closed := r.co.Round()
	acc, thr, err := r.ev.Accuracy(w)
	if err != nil {
		r.log.Warn("evaluation failed", "err", err)
		return
	}
	ev := &fedpb.Evaluation{Round: uint64(closed), ModelVersion: v, Accuracy: acc, Threshold: thr,
		Pairs: "LFW development pairs (pairsDevTest.txt; threshold from pairsDevTrain.txt)", TimeUnixMs: time.Now().UnixMilli()}
	if err := r.co.RecordEvaluation(context.Background(), ev); err != nil {
		r.log.Warn("saving the evaluation", "err", err)
		return
	}
	r.mu.Lock()
	r.last = v
	r.mu.Unlock()
	if r.metrics != nil {
		r.metrics.Evaluated(closed, acc)
	}
	r.log.Info("model evaluated", "rounds", closed, "model", shortVersion(v), "accuracy", acc)
}
