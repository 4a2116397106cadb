package cli

import (
	"time"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/internal/engine"
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

// evaluation returns the networks of the coordinator's --eval-data
// evaluation of a head reading features: the face networks of veil train's
// head (or the test's stand-ins), and the process's engine.
func (f *coordinatorFlags) evaluation(e *env, features string) (training.Describers, *engine.Engine, error) {
	eng, err := e.engine()
	if err != nil {
		return training.Describers{}, nil, err
	}
	if f.describers != nil {
		return *f.describers, eng, nil
	}
	h := &headFlags{features: features, detector: "tiny", align: "both", minScore: 0.5, quiet: true, engine: eng}
	return training.Describers{Inputs: h.openInputs, Teacher: h.openDescriber}, eng, nil
}
