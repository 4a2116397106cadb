package training

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/train"
)

// ModelOptions choose the network and its loss.
type ModelOptions struct {
	// Kind is "lightface" (a CNN on image crops) or "head" (a residual
	// dense head on precomputed vectors).
	Kind string
	// Features is the head's input: "descriptor" (the face pipeline's
	// 128-d descriptors) or arch.HeadAgeGender (the age/gender network's
	// region features, public features never trained on identities).
	Features string
	// Input and Width are LightFace's input side and width multiplier.
	Input int
	Width float64
	// Hidden is the head's hidden width (0: the architecture's 256); a
	// federated client builds a dropout-thinned head of the kept units
	// with it (fed/local).
	Hidden int
	// Norm is LightFace's normalisation: "batch", "group" or "none"; ""
	// picks group under DP and batch otherwise. The head has none.
	Norm string
	// Loss is softmax, cosface, arcface, triplet, irene or distill; Scale
	// and Margin configure the margin losses (0: the paper's).
	Loss          string
	Scale, Margin float64
}

// DataOptions choose the training images and the evaluation pairs.
type DataOptions struct {
	// Set is "lfw" (LFW's development training identities, private) or
	// "mtfl" (MTFL's net_7876 web faces, public, no identity labels;
	// distillation only).
	Set string
	// LFW and MTFL are the data folders.
	LFW, MTFL string
	// MinImages and MaxPeople select LFW identities (MaxPeople 0: all).
	MinImages, MaxPeople int
	// Crop is the side of the centred crop of the 250×250 image LightFace
	// reads.
	Crop int
	// TunePairs, if positive, chooses the threshold on this many of
	// pairsDevTrain's pairs (half same, half different) instead of all.
	TunePairs int
	// CentreImages is a folder of public face photos (none in LFW) whose
	// mean descriptor is subtracted from every distillation target;
	// CentreCount how many of them (in name order) to average.
	CentreImages string
	CentreCount  int
	// Part, if set, keeps only one part of a split of the training
	// identities (LFW only), before any image is read or described: a
	// federated client's own data, without describing everybody else's.
	Part *DataPart
}

// DefaultFolders fills the data folders left empty with their places in
// the data folder root (the commands' datadir.Default()): root/lfw,
// root/mtfl, and root/mtfl/net_7876 for the centre images.
func (d *DataOptions) DefaultFolders(root string) {
	if d.LFW == "" {
		d.LFW = filepath.Join(root, "lfw")
	}
	if d.MTFL == "" {
		d.MTFL = filepath.Join(root, "mtfl")
	}
	if d.CentreImages == "" {
		d.CentreImages = filepath.Join(root, "mtfl", "net_7876")
	}
}

// DataPart is part Index (from 0) of the split of the training
// identities that dataset.PartitionIdentities makes with Options, the
// identities numbered as the loaded set numbers them (sorted names): the
// same examples as part Index of fed/local.Split on the whole set.
type DataPart struct {
	Index   int
	Options dataset.PartitionOptions
}

// OptimOptions configure the optimiser and the passes over the data.
type OptimOptions struct {
	// Batch is the batch size; under DP the expected number of privacy
	// units (images or identities) per step when DPOptions.SamplingRate
	// is not given.
	Batch int
	// MicroBatch is the number of examples per graph execution.
	MicroBatch int
	// Optimizer is "sgd" or "adam".
	Optimizer                           string
	LearningRate, Momentum, WeightDecay float64
	// EMA, in [0, 1), evaluates with a moving average of the weights.
	EMA float64
	// FreezeBlocks keeps LightFace's first blocks fixed.
	FreezeBlocks int
	// Seed seeds initialisation, data order and augmentation (never the
	// privacy noise or DP-SGD's sampling, which come from a CSPRNG).
	Seed uint64
	// Augment turns on random crops and flips (LightFace).
	Augment bool
	// Engine runs the training graphs, and its parallelism is Options.
	// Workers' default; nil means a new default engine per session (see
	// engine.OrDefault). A process should create one and share it.
	Engine *engine.Engine
}

// DPOptions turn on DP-SGD.
type DPOptions struct {
	// Unit is what the guarantee protects: train.UnitIdentity (all the
	// images of one person; the default for face data) or
	// train.UnitExample (one image).
	Unit train.Unit
	// NoiseMultiplier σ, or TargetEpsilon to calibrate σ so that the
	// run's epochs spend exactly that ε: give exactly one.
	NoiseMultiplier, TargetEpsilon float64
	// Clip is the clipping norm C of one unit's gradient.
	Clip float64
	// SamplingRate q of Poisson sampling of units; 0 means Batch/N with N
	// the number of units.
	SamplingRate float64
	// Delta is δ.
	Delta float64
	// BudgetEpsilon is the ε budget of the data set's ledger (every
	// charge on its members, by any command). For a data set without a
	// ledger, 0 means TargetEpsilon when given, else what the run's
	// epochs will spend; afterwards 0 keeps the ledger's budget, and a
	// different value may only lower it once anything is charged.
	BudgetEpsilon float64
	// MaxPerIdentity caps the images one sampled identity contributes to
	// a step (identity unit; 0: the micro-batch).
	MaxPerIdentity int
}

// Describers build the functions that turn image files into vectors. The
// caller builds them (which networks, which cache): the library only
// calls them, and only when the run needs them.
type Describers struct {
	// Inputs returns the describer of the head's input vectors and their
	// length (ModelOptions.Features).
	Inputs func() (eval.Describer, int, error)
	// Teacher returns the face pipeline's descriptor, the distillation
	// target of --loss distill.
	Teacher func() (eval.Describer, error)
}

// Options configure a whole run as veil train does it: data, model,
// optimiser, DP, checkpoints and the privacy ledger, evaluation on the
// development pairs.
type Options struct {
	Model ModelOptions
	Data  DataOptions
	Optim OptimOptions
	// Epochs is the total number of epochs, counting those of a resumed
	// checkpoint.
	Epochs int
	// DP, if set, trains with DP-SGD.
	DP *DPOptions
	// Checkpoint is written after every epoch. Required.
	Checkpoint string
	// LedgerDir is the privacy ledger folder (dp.LedgerDir; commands
	// default to dp.DefaultLedgerDir): a DP run charges the ledger of its
	// data set (Data.Set and DP.Unit) there, shared with every other
	// command that spends on the same people. Required under DP.
	LedgerDir string
	// Resume continues the run of this checkpoint; Init starts a new run
	// from this checkpoint's weights. At most one.
	Resume, Init string
	// Describers compute the head's inputs and distillation targets.
	Describers Describers
	// Workers is how many images are described at once (0: the
	// parallelism of Optim.Engine, or engine.Parallelism() without one).
	Workers int
	// Progress, if set, is called as the run advances (notes included).
	Progress func(Event)
}

// validate checks the model options and fills defaults; dp says whether
// DP-SGD will run.
func (m *ModelOptions) validate(dp bool) error {
	switch m.Kind {
	case "lightface":
		if m.Norm == "" {
			m.Norm = "batch"
			if dp {
				m.Norm = "group"
			}
		}
		if m.Features != "" && m.Features != "descriptor" {
			return errors.New("--features chooses the head's input; LightFace reads images")
		}
		if m.Hidden != 0 {
			return errors.New("a hidden width applies to the head; LightFace has none")
		}
	case "head":
		if m.Norm != "" && m.Norm != "none" {
			return errors.New("--norm applies to LightFace; the head has no normalisation layers")
		}
		m.Norm = "none"
		if m.Features == "" {
			m.Features = "descriptor"
		}
		if m.Hidden < 0 {
			return fmt.Errorf("the head's hidden width must be positive, got %d", m.Hidden)
		}
		if m.Features != "descriptor" && m.Features != arch.HeadAgeGender {
			return fmt.Errorf("unknown features %q (want descriptor or %s)", m.Features, arch.HeadAgeGender)
		}
		if m.Loss == "distill" && m.Features == "descriptor" {
			return errors.New("distillation teaches a network the pipeline's descriptors; a head on those descriptors already takes them as input (use the agegender features)")
		}
	default:
		return fmt.Errorf("unknown model %q (want lightface or head)", m.Kind)
	}
	if dp && m.Norm == "batch" {
		return errors.New("batch normalisation mixes examples and breaks DP-SGD's per-unit bound; use group normalisation")
	}
	if dp && m.Loss == "triplet" {
		return errors.New("triplet mining couples the examples of a batch, so DP-SGD's per-unit bound does not hold; use softmax, cosface, arcface, irene or distill under DP")
	}
	return nil
}

// validate checks the optimiser options.
func (o *OptimOptions) validate(model string) error {
	if o.Batch < 1 || o.MicroBatch < 1 {
		return errors.New("the batch and micro-batch sizes must be positive")
	}
	if !(o.EMA >= 0 && o.EMA < 1) {
		return fmt.Errorf("the moving-average decay must be in [0, 1), got %g", o.EMA)
	}
	if o.FreezeBlocks < 0 || o.FreezeBlocks > arch.LightFaceBlocks {
		return fmt.Errorf("the number of frozen blocks must be in [0, %d], got %d", arch.LightFaceBlocks, o.FreezeBlocks)
	}
	if o.FreezeBlocks > 0 && model != "lightface" {
		return errors.New("freezing blocks applies to LightFace")
	}
	return nil
}

// validate checks the DP options and fills the unit's default.
func (d *DPOptions) validate() error {
	if d.Unit == "" {
		d.Unit = train.UnitIdentity
	}
	if d.Unit != train.UnitIdentity && d.Unit != train.UnitExample {
		return fmt.Errorf("unknown privacy unit %q (want identity or example)", d.Unit)
	}
	if d.SamplingRate != 0 && !(d.SamplingRate > 0 && d.SamplingRate <= 1) {
		return fmt.Errorf("the sampling rate must be in (0, 1], got %g", d.SamplingRate)
	}
	if (d.NoiseMultiplier > 0) == (d.TargetEpsilon > 0) || d.NoiseMultiplier < 0 || d.TargetEpsilon < 0 {
		return errors.New("DP-SGD needs exactly one of a noise multiplier or a target ε (positive)")
	}
	if math.IsInf(d.NoiseMultiplier, 0) || math.IsInf(d.TargetEpsilon, 0) {
		return errors.New("the noise multiplier and target ε must be finite")
	}
	if !(d.Clip > 0) || math.IsInf(d.Clip, 0) || !(d.Delta > 0 && d.Delta < 1) {
		return fmt.Errorf("DP-SGD needs a clipping norm > 0 and δ in (0, 1), got %g and %g", d.Clip, d.Delta)
	}
	if !(d.BudgetEpsilon >= 0) || math.IsInf(d.BudgetEpsilon, 0) {
		return fmt.Errorf("the ε budget must be positive and finite (0: the default), got %g", d.BudgetEpsilon)
	}
	if d.TargetEpsilon > 0 && d.BudgetEpsilon > 0 && d.BudgetEpsilon < d.TargetEpsilon {
		return fmt.Errorf("the ε budget %g is below the target ε %g: the run could not finish", d.BudgetEpsilon, d.TargetEpsilon)
	}
	if d.MaxPerIdentity < 0 || (d.MaxPerIdentity > 0 && d.Unit != train.UnitIdentity) {
		return errors.New("a cap on images per identity applies to identity-level DP only, and must be positive")
	}
	return nil
}

// Validate checks every option and fills defaults, without reading any
// file. New calls it.
func (o *Options) Validate() error {
	if err := o.ValidateData(); err != nil {
		return err
	}
	wrap := func(err error) error { return fmt.Errorf("train: %w", err) }
	if o.Epochs < 1 {
		return wrap(fmt.Errorf("the number of epochs must be positive, got %d", o.Epochs))
	}
	if o.Init != "" && o.Resume != "" {
		return wrap(errors.New("give an initial checkpoint (new run from weights) or one to resume (continue a run), not both"))
	}
	if o.Checkpoint == "" {
		return wrap(errors.New("no checkpoint path"))
	}
	if o.Checkpoint == o.Init {
		return wrap(errors.New("the new checkpoint would overwrite the one the run starts from; choose another path"))
	}
	if d := o.DP; d != nil {
		if o.Model.Kind == "lightface" && o.Model.Norm == "" {
			o.Model.Norm = "group"
		}
		if d.Unit == "" && o.Data.Set == "mtfl" {
			d.Unit = train.UnitExample
		}
		if err := d.validate(); err != nil {
			return wrap(err)
		}
		if o.LedgerDir == "" {
			return wrap(errors.New("a DP run needs a privacy ledger folder (LedgerDir)"))
		}
		if d.MaxPerIdentity > o.Optim.MicroBatch {
			return wrap(fmt.Errorf("the cap on images per identity (%d) exceeds the micro-batch (%d)", d.MaxPerIdentity, o.Optim.MicroBatch))
		}
	}
	return nil
}

// ValidateData checks the options LoadData and NewSession read (model,
// optimiser and data) and fills their defaults, without reading any file
// and without asking for what only a run of Job needs (epochs, a
// checkpoint path): for callers that load data to train or score models
// themselves, such as a federation's clients and its coordinator's
// evaluation. Validate calls it.
func (o *Options) ValidateData() error {
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("train: %w", err)
	}
	if err := o.Model.validate(o.DP != nil); err != nil {
		return wrap(err)
	}
	if err := o.Optim.validate(o.Model.Kind); err != nil {
		return wrap(err)
	}
	switch o.Data.Set {
	case "lfw":
		if o.Data.LFW == "" {
			return wrap(errors.New("no LFW folder"))
		}
	case "mtfl":
		if o.Model.Loss != "distill" {
			return wrap(errors.New("MTFL's faces have no identity labels; training on them needs the distill loss"))
		}
		if o.Data.MTFL == "" {
			return wrap(errors.New("no MTFL folder"))
		}
		if o.DP != nil && o.DP.Unit == train.UnitIdentity {
			return wrap(errors.New("MTFL's faces have no identity labels, so identity-level DP cannot be accounted on them (they are public: train without DP, or use the example unit)"))
		}
	default:
		return wrap(fmt.Errorf("unknown training set %q (want lfw or mtfl)", o.Data.Set))
	}
	if p := o.Data.Part; p != nil {
		switch {
		case o.Data.Set != "lfw":
			return wrap(errors.New("a part of the data is a split of its identities: LFW only"))
		case p.Options.Clients < 1 || p.Index < 0 || p.Index >= p.Options.Clients:
			return wrap(fmt.Errorf("part %d of %d: want 0 ≤ part < parts", p.Index, p.Options.Clients))
		}
	}
	if o.Data.LFW == "" {
		return wrap(errors.New("no LFW folder (the evaluation pairs are LFW's)"))
	}
	if o.Model.Loss == "distill" && o.Data.CentreCount < 1 {
		return wrap(fmt.Errorf("the number of centre images must be positive, got %d", o.Data.CentreCount))
	}
	return nil
}
