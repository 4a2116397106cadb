package cli

import (
	"path/filepath"
	"time"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/internal/engine"
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

// evaluatorOptions are the options of the coordinator's --eval-data
// evaluation: the face networks of veil train's head (or the test's
// stand-ins) and the default centre images.
func evaluatorOptions(f *coordinatorFlags, initCk *checkpoint.Checkpoint, m *ops.Metrics, eng *engine.Engine) ops.EvaluatorOptions {
	cfg := f.cfg
	features := initCk.Header.Model.Features
	if features == "" {
		features = "descriptor"
	}
	h := &headFlags{features: features, detector: "tiny", align: "both", minScore: 0.5, quiet: true, engine: eng}
	o := ops.EvaluatorOptions{Init: initCk, LFW: cfg.EvalData, CentreImages: cfg.CentreImages, CentreCount: cfg.CentreCount,
		Describers: training.Describers{Inputs: h.openInputs, Teacher: h.openDescriber}, Observer: m, Metrics: m, Engine: eng}
	if f.describers != nil {
		o.Describers = *f.describers
	}
	if o.CentreImages == "" {
		o.CentreImages = filepath.Join(datadir.Default(), "mtfl", "net_7876")
	}
	return o
}
