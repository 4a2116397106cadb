package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/training"
)

// EvaluationPairs names what an Evaluator scores, as recorded with every
// evaluation.
const EvaluationPairs = "LFW development pairs (pairsDevTest.txt; threshold from pairsDevTrain.txt)"

// EvaluatorOptions configure a coordinator's evaluation of its model.
type EvaluatorOptions struct {
	// Init is the federation's initial checkpoint (required): the network
	// scored, an embedding head; the model's weights must have its layout.
	Init *checkpoint.Checkpoint
	// LFW is an LFW-layout folder whose development pairs are scored
	// (required).
	LFW string
	// CentreImages is a folder of public face photos whose mean
	// descriptor centres the distillation targets, and CentreCount how
	// many of them to average (default 512): needed, as by veil train,
	// when Init's loss is distillation, because the head's evaluation
	// network is built with its loss.
	CentreImages string
	CentreCount  int
	// Describers compute the head's input vectors and the teacher's
	// descriptors (required; the caller chooses the networks and cache).
	Describers training.Describers
	// Workers is how many images are described at once (0: the engine's
	// parallelism).
	Workers int
	// Engine runs the evaluation network; nil means a new default engine
	// (see engine.OrDefault).
	Engine *engine.Engine
	// Observer, if set, is told every event first (the coordinator's
	// metrics); Metrics, if set, receives the evaluations' results.
	Observer coord.Observer
	Metrics  *Metrics
	// Progress, if set, is told of the pair images' description.
	Progress func(training.Event)
	// Logger receives the evaluations' results and failures (default:
	// discard).
	Logger *slog.Logger
}

// Evaluator scores a coordinator's model on LFW's development pairs
// (threshold on pairsDevTrain, accuracy on pairsDevTest, exactly as veil
// train scores) when it starts, after every aggregated round and, if
// asked, at the end, and records each score in the coordinator's state
// (coord.Coordinator.RecordEvaluation), where veil fed status reads it.
// It scores in the background so rounds are not held up; when rounds
// close faster than evaluations, only the latest model is scored, and a
// model already scored is not scored again.
//
// An Evaluator is the coordinator's Observer: pass it as
// coord.Options.Metrics, then Start it with the coordinator.
type Evaluator struct {
	obs     coord.Observer
	ev      *local.Evaluator
	log     *slog.Logger
	metrics *Metrics

	kick chan struct{}
	wg   sync.WaitGroup
	co   *coord.Coordinator // set by Start
	last string             // model version last scored (by score only)
}

// NewEvaluator validates o and loads what scoring needs: the pair images
// of o.LFW described as the network of o.Init reads them.
func NewEvaluator(o EvaluatorOptions) (*Evaluator, error) {
	if o.Init == nil {
		return nil, errors.New("evaluation: the initial checkpoint is required")
	}
	cfg := o.Init.Header.Model
	if cfg.Kind != "head" {
		return nil, fmt.Errorf("evaluation: the model is scored as an embedding head; the initial checkpoint holds a %q network", cfg.Kind)
	}
	if o.LFW == "" {
		return nil, errors.New("evaluation: an LFW folder is required")
	}
	if o.Describers.Inputs == nil {
		return nil, errors.New("evaluation: the describer of the head's inputs is required")
	}
	loss := o.Init.Header.Loss
	if loss.Kind == "distill" && (o.CentreImages == "" || o.Describers.Teacher == nil) {
		return nil, errors.New("evaluation: a distillation head needs the centre images and the teacher's describer")
	}
	if o.CentreCount == 0 {
		o.CentreCount = 512
	}
	if o.CentreCount < 0 || o.Workers < 0 {
		return nil, fmt.Errorf("evaluation: the centre count and workers must not be negative, got %d and %d", o.CentreCount, o.Workers)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	features := cfg.Features
	if features == "" {
		features = "descriptor"
	}
	to := training.Options{
		Model: training.ModelOptions{Kind: "head", Features: features, Loss: loss.Kind, Scale: loss.Scale, Margin: loss.Margin},
		// One training identity: building the network needs training
		// data; only the pairs are scored.
		Data:       training.DataOptions{Set: "lfw", LFW: o.LFW, MinImages: 1, MaxPeople: 1, CentreImages: o.CentreImages, CentreCount: o.CentreCount},
		Optim:      training.OptimOptions{Batch: 1, MicroBatch: 32, Optimizer: "sgd", LearningRate: 0.01, Engine: o.Engine},
		Describers: o.Describers,
		Workers:    o.Workers,
		Progress:   o.Progress,
	}
	if err := to.ValidateData(); err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	data, err := training.LoadData(&to)
	if err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	ev, err := local.NewEvaluator(to.Model, to.Optim, data)
	if err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	init, err := WeightsFromCheckpoint(o.Init)
	if err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	if err := ev.Initial().SameLayout(init); err != nil {
		return nil, fmt.Errorf("evaluation: the evaluation network is not the initial checkpoint's (%w)", err)
	}
	return &Evaluator{obs: o.Observer, metrics: o.Metrics, ev: ev, log: o.Logger, kick: make(chan struct{}, 1)}, nil
}

// RoundClosed implements coord.Observer: an aggregated round asks for an
// evaluation.
func (r *Evaluator) RoundClosed(state string, d, agg time.Duration) {
	r.obs.RoundClosed(state, d, agg)
	if state == "done" {
		r.request()
	}
}

// UpdateAccepted implements coord.Observer.
func (r *Evaluator) UpdateAccepted(client string, bytes int, spent float64) {
	r.obs.UpdateAccepted(client, bytes, spent)
}

// UpdateRefused implements coord.Observer.
func (r *Evaluator) UpdateRefused(reason string) { r.obs.UpdateRefused(reason) }

// BytesOut implements coord.Observer.
func (r *Evaluator) BytesOut(n int) { r.obs.BytesOut(n) }

// ClientWithdrew implements coord.WithdrawalObserver: it tells the
// wrapped observer, if that counts withdrawals.
func (r *Evaluator) ClientWithdrew(reason string) {
	if wo, ok := r.obs.(coord.WithdrawalObserver); ok {
		wo.ClientWithdrew(reason)
	}
}

func (r *Evaluator) request() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Start scores co's current model now and after every aggregated round
// until Stop. Call it once.
func (r *Evaluator) Start(co *coord.Coordinator) {
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

// Stop waits for the evaluation under way; then, if final, it scores the
// coordinator's model unless that model has been scored. Call it once,
// after Start and once the coordinator no longer closes rounds.
func (r *Evaluator) Stop(final bool) {
	close(r.kick)
	r.wg.Wait()
	if final {
		r.score()
	}
}

// score scores the coordinator's model unless it was the last scored. It
// runs on Start's goroutine, then (Stop) on the caller's once that one has
// ended, never on both at once.
func (r *Evaluator) score() {
	co := r.co
	if co == nil {
		return
	}
	w, v := co.Model()
	if r.last == v {
		return
	}
	_, closed := co.Round()
	acc, thr, err := r.ev.Accuracy(w)
	if err != nil {
		r.log.Warn("evaluation failed", "err", err)
		return
	}
	ev := &fedpb.Evaluation{Round: uint64(closed), ModelVersion: v, Accuracy: acc, Threshold: thr,
		Pairs: EvaluationPairs, TimeUnixMs: time.Now().UnixMilli()}
	if err := co.RecordEvaluation(context.Background(), ev); err != nil {
		r.log.Warn("saving the evaluation", "err", err)
		return
	}
	r.last = v
	if r.metrics != nil {
		r.metrics.Evaluated(closed, acc)
	}
	r.log.Info("model evaluated", "rounds", closed, "model", shortVersion(v), "accuracy", acc)
}

type nopObserver struct{}

func (nopObserver) RoundClosed(string, time.Duration, time.Duration) {}
func (nopObserver) UpdateAccepted(string, int, float64)              {}
func (nopObserver) UpdateRefused(string)                             {}
func (nopObserver) BytesOut(int)                                     {}

func shortVersion(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}
