package collab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// Tagged is pooled hashed-tag training data: each example a descriptor,
// its hashed-tag class and its privacy unit (one person of one library).
type Tagged struct {
	// Dim is the descriptors' size.
	Dim int
	// X holds the descriptors one after another (len = Len()·Dim).
	X []float32
	// Class is each example's hashed tag, Unit its person-of-a-library.
	Class []int32
	Unit  []int
	// Units is the number of persons-of-a-library (N of DP's sampling).
	Units int
}

// Add appends one person of one library: its descriptors under class.
func (t *Tagged) Add(class int, descs [][]float32) error {
	if len(descs) == 0 {
		return nil
	}
	for _, d := range descs {
		if t.Dim == 0 {
			t.Dim = len(d)
		}
		if len(d) != t.Dim {
			return fmt.Errorf("collab: descriptor of %d values among ones of %d", len(d), t.Dim)
		}
		t.X = append(t.X, d...)
		t.Class = append(t.Class, int32(class))
		t.Unit = append(t.Unit, t.Units)
	}
	t.Units++
	return nil
}

// Len is the number of examples (nn/train's Data).
func (t *Tagged) Len() int { return len(t.Class) }

// Batch gathers examples idx (nn/train's Data).
func (t *Tagged) Batch(idx []int, _ *rand.Rand) ([]float32, []int32, error) {
	x := make([]float32, 0, len(idx)*t.Dim)
	l := make([]int32, 0, len(idx))
	for _, i := range idx {
		if i < 0 || i >= t.Len() {
			return nil, nil, fmt.Errorf("collab: example %d of %d", i, t.Len())
		}
		x = append(x, t.X[i*t.Dim:(i+1)*t.Dim]...)
		l = append(l, t.Class[i])
	}
	return x, l, nil
}

// Identity is example i's privacy unit (nn/train's Identified).
func (t *Tagged) Identity(i int) int { return t.Unit[i] }

// Identities is the number of units (nn/train's Identified).
func (t *Tagged) Identities() int { return t.Units }

// BootstrapDP configures DP-SGD for bootstrapping. The unit is one person
// of one library (all their faces in that library).
type BootstrapDP struct {
	// Epsilon is the target ε per unit for the whole training, at Delta.
	Epsilon, Delta float64
	// NoiseMultiplier, if positive, is the σ to run instead of one
	// calibrated to Epsilon (a federated round runs the plan its client
	// checked and charged).
	NoiseMultiplier float64
	// Clip bounds each unit's gradient (default 1).
	Clip float64
	// SamplingRate q of units per step (default: Batch / units).
	SamplingRate float64
	// MaxPerUnit caps a sampled unit's examples per step (default 16).
	MaxPerUnit int
	// Source draws the samples and the noise (nil: a fresh CSPRNG-seeded
	// one).
	Source *dp.Source
}

// BootstrapOptions configures Bootstrap.
type BootstrapOptions struct {
	// Classes is n, the number of hashed-tag classes (≥ 2).
	Classes int
	// Alpha is Eq. 2's α ∈ (0, 1] (default 0.9).
	Alpha float64
	// Epochs, Batch and LearningRate drive Adam (defaults 20, 64, 1e-3).
	Epochs, Batch int
	LearningRate  float64
	// Seed seeds φ's initial weights and the data order.
	Seed uint64
	// DP, if set, trains with DP-SGD.
	DP *BootstrapDP
	// Charge, if set, is called with the whole training's privacy event
	// before any step runs; an error stops the training before it starts
	// (the libraries' ledgers refuse).
	Charge func(dp.Event) error
	// Engine runs the training graphs (nil: a private default engine).
	Engine *engine.Engine
	// Progress, if set, gets each epoch's mean loss.
	Progress func(epoch int, loss float64)
}

// BootstrapReport says what a bootstrapping run did.
type BootstrapReport struct {
	Examples int `json:"examples"`
	Units    int `json:"units"`
	Steps    int `json:"steps"`
	// Epochs is the number of passes over the data.
	Epochs int `json:"epochs"`
	// Epsilon is ε per unit at Delta (0 without DP); NoiseMultiplier σ.
	Epsilon         float64 `json:"epsilon"`
	Delta           float64 `json:"delta"`
	NoiseMultiplier float64 `json:"noise_multiplier"`
	// Loss is the last epoch's mean loss.
	Loss float64 `json:"loss"`
}

// Bootstrap trains ψ (in place) with Irene's noisy bootstrapping: a
// classifier φ over the hashed-tag classes on ψ's output with Eq. 2's
// min-entropy regularised loss. φ is thrown away; ψ keeps what it learned.
func Bootstrap(ctx context.Context, ψ *Psi, data *Tagged, o BootstrapOptions) (*BootstrapReport, error) {
	rep, _, err := bootstrap(ctx, ψ, data, o)
	return rep, err
}

// classifier is φ(y) = Uᵀy + b with U [in, out] row-major (nn.Dense's
// layout).
type classifier struct {
	u, b    []float32
	in, out int
}

// predict is argmax φ(y).
func (c *classifier) predict(y []float32) int {
	best, arg := math.Inf(-1), 0
	for o := range c.out {
		s := float64(c.b[o])
		for i, v := range y {
			s += float64(v) * float64(c.u[i*c.out+o])
		}
		if s > best {
			best, arg = s, o
		}
	}
	return arg
}

// bootstrap is Bootstrap, also returning the trained φ.
func bootstrap(ctx context.Context, ψ *Psi, data *Tagged, o BootstrapOptions) (*BootstrapReport, *classifier, error) {
	if o.Classes < 2 {
		return nil, nil, fmt.Errorf("collab: bootstrapping needs at least 2 classes, got %d", o.Classes)
	}
	if data == nil || data.Len() == 0 {
		return nil, nil, errors.New("collab: no training data")
	}
	if data.Dim != ψ.o.Dim {
		return nil, nil, fmt.Errorf("collab: data of %d values for ψ of %d", data.Dim, ψ.o.Dim)
	}
	for _, c := range data.Class {
		if c < 0 || int(c) >= o.Classes {
			return nil, nil, fmt.Errorf("collab: class %d outside 0…%d", c, o.Classes-1)
		}
	}
	if o.Alpha == 0 {
		o.Alpha = 0.9
	}
	if o.Epochs == 0 {
		o.Epochs = 20
	}
	if o.Batch == 0 {
		o.Batch = 64
	}
	if o.LearningRate == 0 {
		o.LearningRate = 1e-3
	}
	if o.Epochs < 1 || o.Batch < 1 || !(o.LearningRate > 0) {
		return nil, nil, fmt.Errorf("collab: epochs, batch and learning rate must be positive, got %d, %d, %g", o.Epochs, o.Batch, o.LearningRate)
	}
	// φ's parameters live beside a copy of ψ's; ψ gets its trained
	// values back at the end.
	p := ψ.params.Clone()
	head, err := loss.New(p, loss.Config{Kind: "irene", Classes: o.Classes, Alpha: o.Alpha}, ψ.o.Out)
	if err != nil {
		return nil, nil, fmt.Errorf("collab: φ: %w", err)
	}
	keep := ψ.Weights()
	p.Init(o.Seed ^ 0xb007)
	model := &psiModel{Psi: ψ, p: p}
	if err := model.load(keep); err != nil {
		return nil, nil, err
	}
	topts := train.Options{Optimizer: "adam", LearningRate: o.LearningRate, MicroBatch: o.Batch, Seed: o.Seed, Engine: o.Engine}
	rep := &BootstrapReport{Examples: data.Len(), Units: data.Units, Epochs: o.Epochs}
	if d := o.DP; d != nil {
		if d.MaxPerUnit == 0 {
			d2 := *d
			d2.MaxPerUnit = 16
			d = &d2
		}
		// A unit's examples share one micro-batch.
		topts.MicroBatch = max(o.Batch, d.MaxPerUnit)
		dpo, err := dpOptions(*d, data, o.Batch)
		if err != nil {
			return nil, nil, err
		}
		rep.Delta = d.Delta
		steps := o.Epochs * stepsPerEpoch(dpo.SamplingRate)
		sigma := d.NoiseMultiplier
		if !(sigma > 0) {
			if sigma, err = train.NoiseForTarget(dpo, train.NoisedDimension(p, nil), steps, d.Epsilon); err != nil {
				return nil, nil, fmt.Errorf("collab: %w", err)
			}
		}
		dpo.NoiseMultiplier = sigma
		rep.NoiseMultiplier = sigma
		topts.DP = &dpo
	}
	tr, err := train.New(model, head, topts)
	if err != nil {
		return nil, nil, fmt.Errorf("collab: %w", err)
	}
	if o.DP != nil && o.Charge != nil {
		ev, err := tr.EventOf(o.Epochs * tr.StepsPerEpoch(data.Len(), o.Batch))
		if err != nil {
			return nil, nil, fmt.Errorf("collab: %w", err)
		}
		if err := o.Charge(ev); err != nil {
			return nil, nil, fmt.Errorf("collab: the ledgers refused the training: %w", err)
		}
	}
	for e := range o.Epochs {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		l, err := tr.Epoch(data, train.EpochOptions{Epoch: e, Batch: o.Batch, Seed: o.Seed})
		if err != nil {
			return nil, nil, fmt.Errorf("collab: bootstrapping epoch %d: %w", e+1, err)
		}
		rep.Loss = l
		if o.Progress != nil {
			o.Progress(e+1, l)
		}
	}
	rep.Steps = tr.Steps()
	if o.DP != nil {
		rep.Epsilon = tr.Privacy().Epsilon
	}
	w := map[string][]float32{}
	for n := range keep {
		i, _ := p.Index(n)
		w[n] = p.Values(i)
	}
	if err := ψ.SetWeights(w); err != nil {
		return nil, nil, err
	}
	φ := &classifier{in: ψ.o.Out, out: o.Classes}
	for _, n := range []string{"head/fc/w", "head/fc/b"} {
		i, ok := p.Index(n)
		if !ok {
			return nil, nil, fmt.Errorf("collab: no parameter %q", n)
		}
		v := append([]float32(nil), p.Values(i)...)
		if n == "head/fc/w" {
			φ.u = v
		} else {
			φ.b = v
		}
	}
	return rep, φ, nil
}

// stepsPerEpoch is nn/train's ⌈1/q⌉ DP steps per epoch.
func stepsPerEpoch(q float64) int { return int(math.Ceil(1 / q)) }

func dpOptions(d BootstrapDP, data *Tagged, batch int) (train.DPOptions, error) {
	if !(d.Epsilon > 0 || d.NoiseMultiplier > 0) || !(d.Delta > 0 && d.Delta < 1) {
		return train.DPOptions{}, fmt.Errorf("collab: DP needs ε > 0 (or a noise multiplier) and δ in (0, 1), got %g and %g", d.Epsilon, d.Delta)
	}
	if d.Clip == 0 {
		d.Clip = 1
	}
	if d.SamplingRate == 0 {
		d.SamplingRate = min(1, float64(batch)/float64(data.Units))
	}
	if d.Source == nil {
		s, err := dp.NewSource()
		if err != nil {
			return train.DPOptions{}, fmt.Errorf("collab: %w", err)
		}
		d.Source = s
	}
	return train.DPOptions{Unit: train.UnitIdentity, Clip: d.Clip, SamplingRate: d.SamplingRate, Delta: d.Delta,
		DatasetSize: data.Units, MaxPerIdentity: d.MaxPerUnit, Source: d.Source}, nil
}

// psiModel is ψ over another parameter set (ψ's and φ's).
type psiModel struct {
	*Psi
	p *nn.Params
}

func (m *psiModel) Params() *nn.Params { return m.p }

func (m *psiModel) load(w map[string][]float32) error {
	for n, v := range w {
		i, ok := m.p.Index(n)
		if !ok {
			return fmt.Errorf("collab: no parameter %q", n)
		}
		copy(m.p.Values(i), v)
	}
	return nil
}
