package cli

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

type trainFlags struct {
	model, lossKind, data, optimizer, norm, out, resume          string
	input, epochs, batch, microBatch, minImages, maxPeople, crop int
	tunePairs, centreCount, freezeBlocks                         int
	centreDir, trainSet, mtflDir, init                           string
	width, lr, momentum, weightDecay, scale, margin              float64
	dp                                                           bool
	sigma, clip, q, targetEps, delta, ema                        float64
	seed                                                         uint64
	json                                                         bool
	head                                                         headFlags
}

// trainReport is the --json output of veil train.
type trainReport struct {
	Model arch.Config `json:"model"`
	Loss  string      `json:"loss"`
	// TrainSet is lfw (the development training identities) or mtfl
	// (public web faces, no identity labels: Identities is 0).
	TrainSet    string    `json:"train_set"`
	Identities  int       `json:"identities"`
	Images      int       `json:"images"`
	Epochs      int       `json:"epochs"`
	Steps       int       `json:"steps"`
	LossCurve   []float64 `json:"loss_curve"`
	FinalLoss   float64   `json:"final_loss"`
	DP          bool      `json:"dp"`
	EMA         float64   `json:"ema,omitempty"`
	NoiseMult   float64   `json:"noise_multiplier,omitempty"`
	Clip        float64   `json:"clip,omitempty"`
	SamplingQ   float64   `json:"sampling_rate,omitempty"`
	Epsilon     float64   `json:"epsilon"`
	Delta       float64   `json:"delta"`
	DevAccuracy float64   `json:"dev_accuracy"`
	Threshold   float64   `json:"threshold"`
	// InitAccuracy is the same accuracy of the network as initialised,
	// before any step (absent when resuming): learning is measured
	// against it, since even random features score above chance.
	InitAccuracy *float64 `json:"init_accuracy,omitempty"`
	// DescriptorAccuracy is the accuracy of --model head's raw input
	// vectors (descriptors or age/gender features; cosine similarity,
	// threshold from the same tuning pairs): what the head starts from.
	DescriptorAccuracy *float64 `json:"descriptor_accuracy,omitempty"`
	// Init is the checkpoint the weights started from (--init), and
	// FrozenBlocks how many of LightFace's first blocks stayed fixed.
	Init         string `json:"init,omitempty"`
	FrozenBlocks int    `json:"frozen_blocks,omitempty"`
	// Trainable counts the parameters the optimiser (and, under DP,
	// clipping and noise) touches.
	Trainable  int     `json:"trainable_parameters"`
	Checkpoint string  `json:"checkpoint"`
	WallS      float64 `json:"wall_s"`
}

func newTrainCmd(e *env) *cobra.Command {
	f := &trainFlags{}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a face embedding network (LightFace) on LFW's training identities, optionally with DP-SGD",
		Long: `Train LightFace on the LFW development training identities (peopleDevTrain.txt,
identities with at least --min-images images) and report the verification
accuracy of the embedding on the development test pairs (pairsDevTest.txt,
threshold chosen on pairsDevTrain.txt). No training identity appears in the
test pairs.

With --dp, training uses DP-SGD: Poisson sampling with rate q, per-example
gradients clipped to --clip, Gaussian noise σ·C, and the RDP accountant; give
--noise-multiplier or --target-epsilon (σ is then calibrated for --epochs).
Under DP the network uses group normalisation and triplet loss is refused.

With --model head the network is a small residual dense head on the 128-d
descriptors of the face pipeline (detection, dlib alignment, face-api's
descriptor network; the central face of each image, or a central box when
none is detected). Descriptors are computed once and cached exactly as
veil verify caches them (same folder and keys), so the two commands share
the cache.

With --model head --features agegender the head instead reads 2,048
region features of face-api's age/gender network (its last feature map
averaged over four face quadrants, on a fixed 120-px box of the
deep-funnelled image): public features that were never trained to tell
people apart, so what the head learns about identity comes from the
training data. This is the setting in which DP-SGD learns at ε ≤ 8:
--loss distill (each training image's descriptor from the face pipeline
as the target, no identity labels) with --dp --target-epsilon 8 reaches
within about a point of the same run without DP.

Public pretraining, then private fine-tuning: --train-set mtfl trains
LightFace by distillation on MTFL's 5,849 net_7876 web faces (public, none
from LFW; aligned by their five annotated points to LFW's framing) and
marks its checkpoint public. --init CHECKPOINT starts a new run from such
weights (fresh optimiser, step 0), and --freeze-blocks N keeps LightFace's
first N of 14 convolution blocks fixed, so that DP-SGD clips and noises
only the rest. Under --dp, --init accepts only public checkpoints: weights
that have seen private data without accounting would void the guarantee.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTrain(e, cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "lightface", "model: lightface or head")
	fl.StringVar(&f.lossKind, "loss", "arcface", "loss: softmax, cosface, arcface, triplet, irene, or distill (LightFace, or the head on --features agegender, learns each training image's face-api descriptor: no identity labels)")
	fl.Float64Var(&f.scale, "scale", 32, "CosFace/ArcFace scale s (32 suits few classes; the papers use 64)")
	fl.Float64Var(&f.margin, "margin", 0, "CosFace/ArcFace/triplet margin (0: the paper's, 0.35 CosFace, 0.5 ArcFace, 0.2 triplet)")
	fl.StringVar(&f.data, "data", "", "LFW folder (default: <data>/lfw)")
	fl.StringVar(&f.trainSet, "train-set", "lfw", "training images: lfw (development training identities) or mtfl (public net_7876 web faces; --loss distill only)")
	fl.StringVar(&f.mtflDir, "mtfl", "", "MTFL folder for --train-set mtfl (default: <data>/mtfl)")
	fl.StringVar(&f.init, "init", "", "start from this checkpoint's weights (same model; fresh optimiser and step count)")
	fl.IntVar(&f.freezeBlocks, "freeze-blocks", 0, "keep LightFace's first N convolution blocks (conv1…convN of 14) fixed")
	fl.IntVar(&f.input, "input", 64, "input side in pixels (224, 112, 64)")
	fl.Float64Var(&f.width, "width", 0.25, "LightFace width multiplier")
	fl.StringVar(&f.norm, "norm", "", "normalisation: batch, group or none (default: group with --dp, else batch)")
	fl.IntVar(&f.epochs, "epochs", 5, "epochs")
	fl.IntVar(&f.batch, "batch", 64, "batch size (with --dp: the expected batch when --sampling-rate is not given)")
	fl.IntVar(&f.microBatch, "micro-batch", 32, "examples per graph execution")
	fl.IntVar(&f.minImages, "min-images", 4, "use training identities with at least this many images")
	fl.IntVar(&f.maxPeople, "max-people", 0, "use at most this many training identities (0: all)")
	fl.IntVar(&f.crop, "crop", 128, "side of the centred crop of the 250×250 deep-funnelled image")
	fl.StringVar(&f.optimizer, "optimizer", "adam", "optimizer: sgd or adam")
	fl.Float64Var(&f.lr, "lr", 0.002, "learning rate")
	fl.Float64Var(&f.momentum, "momentum", 0.9, "SGD momentum")
	fl.Float64Var(&f.weightDecay, "weight-decay", 5e-4, "weight decay")
	fl.Float64Var(&f.ema, "ema", 0, "evaluate with an exponential moving average of the weights with this decay, e.g. 0.99 (0: the last weights); averages out DP-SGD's noise at no privacy cost")
	fl.BoolVar(&f.dp, "dp", false, "train with DP-SGD")
	fl.Float64Var(&f.sigma, "noise-multiplier", 0, "DP-SGD noise multiplier σ")
	fl.Float64Var(&f.clip, "clip", 1, "DP-SGD per-example clipping norm C")
	fl.Float64Var(&f.q, "sampling-rate", 0, "DP-SGD Poisson sampling rate q in (0, 1] (default: batch/N)")
	fl.Float64Var(&f.targetEps, "target-epsilon", 0, "calibrate σ to reach this ε after --epochs")
	fl.Float64Var(&f.delta, "delta", 1e-5, "δ of the reported (ε, δ)")
	fl.StringVar(&f.out, "checkpoint", "veil-train.ckpt", "checkpoint file written after every epoch")
	fl.StringVar(&f.resume, "resume", "", "resume from this checkpoint")
	fl.Uint64Var(&f.seed, "seed", 1, "seed for initialisation, data order and augmentation (not privacy noise)")
	fl.IntVar(&f.tunePairs, "tune-pairs", 0, "choose the threshold on this many pairsDevTrain pairs, half same, half different (0: all 2200)")
	fl.BoolVar(&f.json, "json", false, "print a JSON report")
	fl.StringVar(&f.centreDir, "centre-images", "", "--loss distill: folder of public face photos (none of them in LFW) whose mean descriptor is subtracted from every target (default: <data>/mtfl/net_7876)")
	fl.IntVar(&f.centreCount, "centre-count", 512, "--loss distill: how many of --centre-images (in name order) to average")
	f.head.register(cmd)
	return cmd
}

// validate checks the flags before any data is read.
func (f *trainFlags) validate(cmd *cobra.Command) error {
	if f.model != "lightface" && f.model != "head" {
		return fmt.Errorf("train: unknown --model %q (want lightface or head)", f.model)
	}
	if f.epochs < 1 || f.batch < 1 || f.microBatch < 1 {
		return fmt.Errorf("train: --epochs, --batch and --micro-batch must be positive")
	}
	if !(f.ema >= 0 && f.ema < 1) {
		return fmt.Errorf("train: --ema must be in [0, 1), got %g", f.ema)
	}
	if f.model == "head" {
		if cmd.Flags().Changed("norm") {
			return errors.New("train: --norm applies to LightFace; the head has no normalisation layers")
		}
		f.norm = "none"
	} else if f.norm == "" {
		f.norm = "batch"
		if f.dp {
			f.norm = "group"
		}
	}
	if f.head.features != "descriptor" && f.head.features != arch.HeadAgeGender {
		return fmt.Errorf("train: unknown --features %q (want descriptor or %s)", f.head.features, arch.HeadAgeGender)
	}
	if f.model != "head" && cmd.Flags().Changed("features") {
		return errors.New("train: --features chooses --model head's input; LightFace reads images")
	}
	if f.lossKind == "distill" && f.model == "head" && f.head.features == "descriptor" {
		return errors.New("train: --loss distill teaches a network the pipeline's descriptors; a head on those descriptors already takes them as input (use --features agegender)")
	}
	if f.centreCount < 1 {
		return fmt.Errorf("train: --centre-count must be positive, got %d", f.centreCount)
	}
	switch f.trainSet {
	case "lfw":
	case "mtfl":
		if f.lossKind != "distill" {
			return errors.New("train: MTFL's faces have no identity labels; --train-set mtfl needs --loss distill")
		}
		for _, n := range []string{"min-images", "max-people"} {
			if cmd.Flags().Changed(n) {
				return fmt.Errorf("train: --%s selects LFW identities; it does not apply to --train-set mtfl", n)
			}
		}
	default:
		return fmt.Errorf("train: unknown --train-set %q (want lfw or mtfl)", f.trainSet)
	}
	if f.init != "" && f.resume != "" {
		return errors.New("train: give --init (new run from weights) or --resume (continue a run), not both")
	}
	if f.freezeBlocks < 0 || f.freezeBlocks > arch.LightFaceBlocks {
		return fmt.Errorf("train: --freeze-blocks must be in [0, %d], got %d", arch.LightFaceBlocks, f.freezeBlocks)
	}
	if f.freezeBlocks > 0 && f.model != "lightface" {
		return errors.New("train: --freeze-blocks applies to LightFace")
	}
	if !f.dp {
		for _, n := range []string{"noise-multiplier", "sampling-rate", "target-epsilon"} {
			if cmd.Flags().Changed(n) {
				return fmt.Errorf("train: --%s needs --dp", n)
			}
		}
		return nil
	}
	if f.norm == "batch" {
		return errors.New("train: batch normalisation mixes examples and breaks DP-SGD's per-example bound; use --norm group")
	}
	if f.lossKind == "triplet" {
		return errors.New("train: triplet mining couples the examples of a batch, so DP-SGD's per-example bound does not hold; use softmax, cosface, arcface or irene with --dp")
	}
	if cmd.Flags().Changed("sampling-rate") && !(f.q > 0 && f.q <= 1) {
		return fmt.Errorf("train: --sampling-rate must be in (0, 1], got %g", f.q)
	}
	if (f.sigma > 0) == (f.targetEps > 0) {
		return errors.New("train: with --dp give exactly one of --noise-multiplier or --target-epsilon (positive)")
	}
	if !(f.clip > 0) || !(f.delta > 0 && f.delta < 1) {
		return fmt.Errorf("train: need --clip > 0 and --delta in (0, 1), got %g and %g", f.clip, f.delta)
	}
	return nil
}

func runTrain(e *env, cmd *cobra.Command, f *trainFlags) error {
	start := time.Now()
	if err := f.validate(cmd); err != nil {
		return err
	}
	if f.data == "" {
		f.data = filepath.Join(datadir.Default(), "lfw")
	}
	lfw := dataset.LFW{Dir: f.data}
	var images []dataset.Image
	var err error
	if f.trainSet == "mtfl" {
		if f.mtflDir == "" {
			f.mtflDir = filepath.Join(datadir.Default(), "mtfl")
		}
		images, err = dataset.MTFL{Dir: f.mtflDir}.PublicImages()
	} else {
		images, err = lfw.TrainImages("peopleDevTrain.txt", f.minImages, f.maxPeople)
	}
	if err != nil {
		return err
	}
	tunePairs, err := lfw.Pairs("pairsDevTrain.txt")
	if err != nil {
		return err
	}
	testPairs, err := lfw.Pairs("pairsDevTest.txt")
	if err != nil {
		return err
	}
	if f.tunePairs > 0 && f.tunePairs < len(tunePairs) {
		half := len(tunePairs) / 2
		k := max(f.tunePairs/2, 1)
		tunePairs = append(tunePairs[:k:k], tunePairs[half:half+k]...)
	}
	if err := dataset.CheckDisjoint(images, testPairs); err != nil {
		return err
	}
	var mc arch.Config
	if f.model == "head" {
		mc = arch.Config{Kind: "head"}
		if f.head.features != "descriptor" {
			mc.Features = f.head.features
		}
	} else {
		mc = arch.Config{Kind: "lightface", Input: f.input, Width: f.width, Norm: f.norm}
	}
	model, err := arch.New(mc)
	if err != nil {
		return err
	}
	mc = model.Config()
	var ck, initCk *checkpoint.Checkpoint
	if f.resume != "" {
		if ck, err = checkpoint.Load(f.resume); err != nil {
			return err
		}
		if !ck.Header.Model.Equal(mc) {
			return fmt.Errorf("train: checkpoint %s holds another model (%+v), not %+v", f.resume, ck.Header.Model, mc)
		}
		if d := ck.Header.Data; d != "" && d != f.trainSet {
			return fmt.Errorf("train: checkpoint %s was trained on --train-set %s, not %s", f.resume, d, f.trainSet)
		}
	}
	if f.init != "" {
		if initCk, err = checkpoint.Load(f.init); err != nil {
			return err
		}
		if !initCk.Header.Model.Equal(mc) {
			return fmt.Errorf("train: --init %s holds another model (%+v), not %+v", f.init, initCk.Header.Model, mc)
		}
		if f.dp && !initCk.Header.Public {
			return fmt.Errorf("train: --init %s was trained on private data (%q); DP-SGD from it would not bound what the weights already hold: start from a checkpoint trained on public data only (--train-set mtfl)", f.init, initCk.Header.Data)
		}
	}
	// public: every example these weights will have seen is public.
	public := f.trainSet == "mtfl" && (initCk == nil || initCk.Header.Public) && (ck == nil || ck.Header.Public)
	var src trainSource
	if f.model == "head" {
		src, err = loadHeadData(e, f, lfw, images, append(append([]dataset.Pair{}, tunePairs...), testPairs...))
	} else {
		src, err = loadImageData(e, f, lfw, images, append(append([]dataset.Pair{}, tunePairs...), testPairs...))
	}
	if err != nil {
		return err
	}
	set := src.train
	people := set.Classes() // before distill relabels by image
	lc := loss.Config{Kind: f.lossKind, Classes: set.Classes()}
	if f.lossKind == "distill" {
		if src, lc.Targets, err = withTeacher(e, f, src); err != nil {
			return err
		}
		set = src.train
		lc.Classes = len(lc.Targets)
	}
	if f.lossKind == "cosface" || f.lossKind == "arcface" {
		lc.Scale = f.scale
	}
	if f.lossKind == "cosface" || f.lossKind == "arcface" || f.lossKind == "triplet" {
		lc.Margin = f.margin
	}
	lc = lc.Defaults()
	head, err := loss.New(model.Params(), lc, mc.Embedding)
	if err != nil {
		return err
	}
	model.Params().Init(f.seed)
	if initCk != nil {
		if _, err := initCk.ApplyInit(mc, model.Params(), loss.ParamPrefix); err != nil {
			return fmt.Errorf("train: --init %s: %w", f.init, err)
		}
	}
	opts := train.Options{Optimizer: f.optimizer, LearningRate: f.lr, Momentum: f.momentum, WeightDecay: f.weightDecay,
		MicroBatch: f.microBatch, Seed: f.seed, EMA: f.ema}
	if f.freezeBlocks > 0 {
		for b := 1; b <= f.freezeBlocks; b++ {
			model.Params().SetGroup(arch.LightFaceBlockName(b)+"/", "frozen")
		}
		opts.GroupLR = map[string]float64{"frozen": 0}
	}
	if f.dp {
		q := f.q
		if q == 0 {
			q = math.Min(1, float64(f.batch)/float64(set.Len()))
		}
		sigma := f.sigma
		steps := f.epochs * int(math.Ceil(1/q))
		if f.targetEps > 0 {
			calib := train.DPOptions{Unit: train.UnitExample, Clip: f.clip, SamplingRate: q, Delta: f.delta, DatasetSize: set.Len()}
			if sigma, err = train.NoiseForTarget(calib, train.NoisedDimension(model.Params(), opts.GroupLR), steps, f.targetEps); err != nil {
				return fmt.Errorf("train: calibrating σ for ε=%g: %w", f.targetEps, err)
			}
		}
		opts.DP = &train.DPOptions{Unit: train.UnitExample, NoiseMultiplier: sigma, Clip: f.clip, SamplingRate: q, Delta: f.delta,
			DatasetSize: set.Len()}
	}
	tr, err := train.New(model, head, opts)
	if err != nil {
		return err
	}
	firstEpoch := 0
	if ck != nil {
		if ck.Header.Loss.Kind != lc.Kind || ck.Header.Loss.Classes != lc.Classes {
			return fmt.Errorf("train: checkpoint %s was trained with loss %s on %d classes, not %s on %d", f.resume, ck.Header.Loss.Kind, ck.Header.Loss.Classes, lc.Kind, lc.Classes)
		}
		if err := ck.Apply(mc, tr.Params()); err != nil {
			return err
		}
		if err := tr.Restore(ck.State); err != nil {
			return err
		}
		firstEpoch = ck.Header.Epoch
	}
	if f.trainSet == "mtfl" {
		people = 0
	}
	rep := trainReport{Model: mc, Loss: lc.Kind, TrainSet: f.trainSet, Identities: people, Images: set.Len(), DP: f.dp, Delta: f.delta,
		Checkpoint: f.out, EMA: f.ema, Init: f.init, FrozenBlocks: f.freezeBlocks, Trainable: tr.NumTrainable()}
	// devAccuracy embeds the pair images with the trainer's current (or
	// averaged) weights and scores the development pairs.
	devAccuracy := func() (acc, thr float64, err error) {
		vecs, err := src.embed(tr)
		if err != nil {
			return 0, 0, err
		}
		return pairAccuracy(vecs, lfw, tunePairs, testPairs)
	}
	if ck == nil {
		a, _, err := devAccuracy()
		if err != nil {
			return err
		}
		rep.InitAccuracy = &a
		fmt.Fprintf(e.stderr, "development-pairs accuracy as initialised: %.4f\n", a)
	}
	for ep := firstEpoch; ep < f.epochs; ep++ {
		l, err := tr.Epoch(set, train.EpochOptions{Epoch: ep, Batch: f.batch, Seed: f.seed, Augment: true,
			Progress: func(s, n int, l float64) {
				fmt.Fprintf(e.stderr, "\repoch %d/%d %s step %d/%d loss %.4f   ", ep+1, f.epochs, bar(s, n, 20), s, n, l)
			}})
		if err != nil {
			return err
		}
		p := tr.Privacy()
		fmt.Fprintf(e.stderr, "\repoch %d/%d mean loss %.4f ε=%.3f %s\n", ep+1, f.epochs, l, p.Epsilon, time.Since(start).Round(time.Second))
		rep.LossCurve = append(rep.LossCurve, l)
		ck := checkpoint.FromTrainer(checkpoint.Header{Model: mc, Loss: lc, Optimizer: f.optimizer, Epoch: ep + 1, Seed: f.seed,
			Data: f.trainSet, Public: public}, tr.Params(), tr.State())
		if err := ck.Save(f.out); err != nil {
			return err
		}
	}
	acc, thr, err := devAccuracy()
	if err != nil {
		return err
	}
	if src.raw != nil {
		a, _, err := pairAccuracy(src.raw, lfw, tunePairs, testPairs)
		if err != nil {
			return err
		}
		rep.DescriptorAccuracy = &a
	}
	p := tr.Privacy()
	rep.Epochs, rep.Steps = f.epochs, tr.Steps()
	if n := len(rep.LossCurve); n > 0 {
		rep.FinalLoss = rep.LossCurve[n-1]
	}
	rep.Epsilon, rep.NoiseMult, rep.Clip, rep.SamplingQ = p.Epsilon, p.NoiseMultiplier, p.Clip, p.SamplingRate
	rep.DevAccuracy, rep.Threshold = acc, thr
	rep.WallS = time.Since(start).Seconds()
	if f.json {
		return writeJSON(e.stdout, rep)
	}
	fmt.Fprintf(e.stdout, "trained %s (%s loss) on %d images of %d identities for %d epochs: final loss %.4f\n", mc.Kind, lc.Kind, rep.Images, rep.Identities, rep.Epochs, rep.FinalLoss)
	if f.dp {
		fmt.Fprintf(e.stdout, "DP-SGD σ=%.3f C=%g q=%.4f: ε=%.3f at δ=%g\n", p.NoiseMultiplier, p.Clip, p.SamplingRate, p.Epsilon, f.delta)
	}
	fmt.Fprintf(e.stdout, "LFW development pairs accuracy %.4f (threshold %.3f); checkpoint %s; %.0f s\n", acc, thr, f.out, rep.WallS)
	if rep.InitAccuracy != nil {
		fmt.Fprintf(e.stdout, "the same network as initialised: accuracy %.4f\n", *rep.InitAccuracy)
	}
	if rep.DescriptorAccuracy != nil {
		fmt.Fprintf(e.stdout, "the head's raw input vectors (%s, cosine) on the same pairs: accuracy %.4f\n", f.head.features, *rep.DescriptorAccuracy)
	}
	return nil
}

// withTeacher computes the face pipeline's descriptor of every training
// image (cached as veil verify caches them) as its distillation target and
// relabels the set so that an example's label is its image's index.
//
// The targets are centred on the mean descriptor of public photos: dlib's
// descriptors share a large common component (two strangers' descriptors
// are far from orthogonal), and a student pulled towards raw targets can
// lower the loss by emitting that one direction for every face. The mean
// comes from public images (MTFL's web faces, none in LFW) so that it
// reveals nothing about the private training set and costs no privacy.
func withTeacher(e *env, f *trainFlags, src trainSource) (trainSource, [][]float32, error) {
	var paths []string
	switch s := src.train.(type) {
	case *dataset.Set:
		paths = s.Paths
	case *dataset.Vectors:
		paths = s.Paths
	default:
		return trainSource{}, nil, fmt.Errorf("train: --loss distill needs images' paths, not %T", src.train)
	}
	dir := f.centreDir
	if dir == "" {
		dir = filepath.Join(datadir.Default(), "mtfl", "net_7876")
	}
	public, err := imageFiles(dir, f.centreCount)
	if err != nil {
		return trainSource{}, nil, fmt.Errorf("train: --centre-images: %w", err)
	}
	desc, err := f.head.openDescriber()
	if err != nil {
		return trainSource{}, nil, err
	}
	pub, _, err := describeAll(e, "public descriptors", public, desc, f.head.quiet)
	if err != nil {
		return trainSource{}, nil, err
	}
	var mean []float64
	for _, v := range pub {
		if mean == nil {
			mean = make([]float64, len(v))
		}
		for i, x := range v {
			mean[i] += float64(x) / float64(len(pub))
		}
	}
	got, fb, err := describeAll(e, "teacher descriptors", paths, desc, f.head.quiet)
	if err != nil {
		return trainSource{}, nil, err
	}
	fmt.Fprintf(e.stderr, "%d teacher descriptors (%d from a central box: no face detected), centred on the mean of %d public ones\n", len(got), fb, len(pub))
	targets := make([][]float32, len(paths))
	for i, p := range paths {
		t := got[p]
		if len(t) != len(mean) {
			return trainSource{}, nil, fmt.Errorf("train: no teacher descriptor for %s", p)
		}
		targets[i] = make([]float32, len(t))
		for j, x := range t {
			targets[i][j] = float32(float64(x) - mean[j])
		}
	}
	src.train = indexLabelled{src.train}
	return src, targets, nil
}

// imageFiles lists up to n JPEG or PNG files of dir in name order.
func imageFiles(dir string, n int) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, en := range ents {
		ext := strings.ToLower(filepath.Ext(en.Name()))
		if en.Type().IsRegular() && (ext == ".jpg" || ext == ".jpeg" || ext == ".png") {
			out = append(out, filepath.Join(dir, en.Name()))
			if len(out) == n {
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no JPEG or PNG images in %s", dir)
	}
	return out, nil
}

// indexLabelled labels each example by its index in the set (distillation
// targets are per image, not per identity).
type indexLabelled struct{ train.Data }

// Batch returns the set's inputs with the examples' indices as labels.
func (s indexLabelled) Batch(idx []int, rng *rand.Rand) ([]float32, []int32, error) {
	x, _, err := s.Data.Batch(idx, rng)
	if err != nil {
		return nil, nil, err
	}
	l := make([]int32, len(idx))
	for k, i := range idx {
		l[k] = int32(i)
	}
	return x, l, nil
}

// Classes is the number of targets: one per image.
func (s indexLabelled) Classes() int { return s.Len() }

func bar(done, total, width int) string {
	n := done * width / max(total, 1)
	b := make([]byte, width)
	for i := range b {
		b[i] = '.'
		if i < n {
			b[i] = '#'
		}
	}
	return "[" + string(b) + "]"
}

// trainSource is the training data of one model kind and how to embed
// the development pairs' images with a trainer.
type trainSource struct {
	train interface {
		train.Data
		Classes() int
	}
	// embed returns the trained model's embedding of every pair image,
	// by path.
	embed func(tr *train.Trainer) (map[string][]float32, error)
	// raw, if set, are the pair images' input descriptors (head only).
	raw map[string][]float32
}

// loadImageData loads LightFace's training crops; its embed runs the
// network on the centred crops of the pair images.
func loadImageData(e *env, f *trainFlags, lfw dataset.LFW, images []dataset.Image, pairs []dataset.Pair) (trainSource, error) {
	fmt.Fprintf(e.stderr, "loading %d training images…\n", len(images))
	set, err := dataset.Load(images, dataset.LoadOptions{Side: f.input, Crop: f.crop, Augment: true})
	if err != nil {
		return trainSource{}, err
	}
	var ps *dataset.Set // the pair images, loaded on the first call
	embed := func(tr *train.Trainer) (map[string][]float32, error) {
		if ps == nil {
			if ps, err = dataset.Load(lfw.PairImages(pairs), dataset.LoadOptions{Side: f.input, Crop: f.crop}); err != nil {
				return nil, err
			}
		}
		idx := make([]int, ps.Len())
		for i := range idx {
			idx[i] = i
		}
		x, _, err := ps.Batch(idx, nil)
		if err != nil {
			return nil, err
		}
		emb, err := tr.Embed(x, ps.Len())
		if err != nil {
			return nil, err
		}
		out := make(map[string][]float32, len(emb))
		for i, p := range ps.Paths {
			out[p] = emb[i]
		}
		return out, nil
	}
	return trainSource{train: set, embed: embed}, nil
}

// pairAccuracy scores pairs by the cosine similarity of their images'
// vectors and returns the test accuracy at the threshold that is best on
// the tuning pairs (package eval's threshold rule, via train.VerifyAccuracy).
func pairAccuracy(vecs map[string][]float32, lfw dataset.LFW, tune, test []dataset.Pair) (float64, float64, error) {
	var missing error
	sims := func(pairs []dataset.Pair) ([]float64, []bool) {
		var s []float64
		var same []bool
		for _, p := range pairs {
			a, okA := vecs[lfw.ImagePath(p.NameA, p.A)]
			b, okB := vecs[lfw.ImagePath(p.NameB, p.B)]
			if !okA || !okB || len(a) != len(b) {
				missing = fmt.Errorf("train: no vector for pair %s %d / %s %d", p.NameA, p.A, p.NameB, p.B)
				return nil, nil
			}
			s = append(s, eval.Cosine(a, b))
			same = append(same, p.Same)
		}
		return s, same
	}
	ts, tsame := sims(tune)
	es, esame := sims(test)
	if missing != nil {
		return 0, 0, missing
	}
	return train.VerifyAccuracy(ts, tsame, es, esame)
}
