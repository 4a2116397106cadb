// Package trained runs the networks that veil train saves, outside
// training: an embedding head (arch.Config kind "head") rebuilt from what
// its checkpoint records, with the weights it was evaluated with, so that
// a trained or federated head embeds faces like the pretrained pipeline.
package trained

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
)

// Input kinds of a head: what each face must be turned into before the
// head reads it (Head.Input).
const (
	// InputDescriptor is the face pipeline's 128-d descriptor.
	InputDescriptor = "descriptor"
	// InputAgeGender is face-api's age/gender network's region features
	// (nets.AgeGender.RegionFeatures) of the face's crop.
	InputAgeGender = arch.HeadAgeGender
)

// batch is the number of examples per graph execution: one compiled
// shape, inputs padded with zeros (the rows are independent, so the
// padding never changes a real row's embedding). It is veil train's
// default micro-batch, and the embeddings equal a train.Trainer's bit for
// bit whenever the trainer's micro-batch has at least 8 rows; below 8 the
// backend's matrix product sums in another order, and the two agree to
// float32 rounding (about 1e-7 relative).
const batch = 32

// Head is a trained embedding head ready to embed input vectors. It is
// safe for concurrent use.
type Head struct {
	cfg    arch.Config
	model  *arch.Model
	values [][]float32 // the weights Embed uses, one per model parameter
	ema    bool
	exec   *graph.Exec
}

// ErrNotHead is wrapped by the error for a checkpoint that holds another
// kind of network.
var ErrNotHead = errors.New("not an embedding head")

// LoadHead reads the checkpoint at path (written by veil train --model
// head) and rebuilds its head, to run on eng (nil: a new default engine).
func LoadHead(path string, eng *engine.Engine) (*Head, error) {
	c, err := checkpoint.Load(path)
	if err != nil {
		return nil, err
	}
	h, err := NewHead(c, eng)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return h, nil
}

// NewHead rebuilds the head a checkpoint records: the architecture from
// its model configuration, and the weights the training run evaluated
// with — the moving average when the run kept one (veil train --ema), else
// the last weights. It refuses a checkpoint of another network (LightFace
// reads images, not per-face vectors), a head on unknown input features,
// and one whose stored parameters do not fit the architecture. The loss's
// own parameters (class centres, the distillation offset) are not part of
// the embedding and are ignored. The head runs on eng; nil means a new
// default engine of its own (see engine.OrDefault).
func NewHead(c *checkpoint.Checkpoint, eng *engine.Engine) (*Head, error) {
	cfg := c.Header.Model
	if cfg.Kind != "head" {
		kind := cfg.Kind
		if kind == "" {
			kind = "an unnamed network"
		}
		return nil, fmt.Errorf("trained: the checkpoint holds %s, %w: only veil train --model head checkpoints embed faces", kind, ErrNotHead)
	}
	switch cfg.Features {
	case "", InputAgeGender:
	default:
		return nil, fmt.Errorf("trained: the checkpoint's head reads features %q, which this version cannot compute (known: %s, %s)", cfg.Features, InputDescriptor, InputAgeGender)
	}
	model, err := arch.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("trained: rebuilding the head: %w", err)
	}
	if !model.Config().Equal(cfg) {
		a, _ := json.Marshal(cfg)
		b, _ := json.Marshal(model.Config())
		return nil, fmt.Errorf("trained: the checkpoint's model %s is incomplete (rebuilt as %s)", a, b)
	}
	p := model.Params()
	// ApplyInit copies every model parameter by name and shape, the moving
	// average when there is one, and fails on a missing one.
	if _, err := c.ApplyInit(cfg, p, ""); err != nil {
		return nil, fmt.Errorf("trained: %w", err)
	}
	h := &Head{cfg: cfg, model: model, ema: c.Header.EMA}
	for i := 0; i < p.Len(); i++ {
		v := append([]float32(nil), p.Values(i)...)
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("trained: parameter %q holds a value that is not finite", p.Spec(i).Name)
			}
		}
		h.values = append(h.values, v)
	}
	eng, err = engine.OrDefault(eng)
	if err != nil {
		return nil, err
	}
	be := eng.Backend()
	np := p.Len()
	h.exec, err = graph.NewExec(be, func(in []*graph.Node) *graph.Node {
		s, err := nn.NewScope(p, in[:np], nil, false)
		if err != nil {
			panic(err)
		}
		// The same graph as train.Trainer.Embed, so the embeddings are
		// the ones the training run scored.
		return nn.L2Normalize(model.Embed(s, in[np]))
	})
	if err != nil {
		return nil, fmt.Errorf("trained: building the head's graph: %w", err)
	}
	return h, nil
}

// Config returns the head's architecture as the checkpoint records it.
func (h *Head) Config() arch.Config { return h.cfg }

// Input returns what the head reads: InputDescriptor or InputAgeGender.
func (h *Head) Input() string {
	if h.cfg.Features == "" {
		return InputDescriptor
	}
	return h.cfg.Features
}

// InputDim is the length of each input vector.
func (h *Head) InputDim() int { return h.cfg.In }

// Dim is the length of each embedding.
func (h *Head) Dim() int { return h.cfg.Embedding }

// UsesEMA reports whether the weights are the training run's moving
// average.
func (h *Head) UsesEMA() bool { return h.ema }

// Embed returns the L2-normalised embedding of each input vector, in
// order. Every input must have InputDim finite values.
func (h *Head) Embed(inputs [][]float32) ([][]float32, error) {
	per := h.cfg.In
	for i, v := range inputs {
		if len(v) != per {
			return nil, fmt.Errorf("trained: input %d has %d values, the head reads %d (%s)", i, len(v), per, h.Input())
		}
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("trained: input %d holds a value that is not finite", i)
			}
		}
	}
	out := make([][]float32, 0, len(inputs))
	for start := 0; start < len(inputs); start += batch {
		end := min(start+batch, len(inputs))
		x := make([]float32, batch*per)
		for i := start; i < end; i++ {
			copy(x[(i-start)*per:], inputs[i])
		}
		args := make([]any, 0, len(h.values)+1)
		for i, v := range h.values {
			args = append(args, tensors.FromFlatDataAndDimensions(append([]float32(nil), v...), h.model.Params().Spec(i).Shape...))
		}
		args = append(args, tensors.FromFlatDataAndDimensions(x, batch, per))
		o, err := h.exec.Call(args...)
		if err != nil {
			return nil, fmt.Errorf("trained: running the head: %w", err)
		}
		e := tensors.MustCopyFlatData[float32](o[0])
		o[0].FinalizeAll()
		d := len(e) / batch
		for j := 0; j < end-start; j++ {
			out = append(out, e[j*d:(j+1)*d:(j+1)*d])
		}
	}
	return out, nil
}
