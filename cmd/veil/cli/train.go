package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/internal/atomicfile"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/internal/progress"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// defaultCheckpoint is where veil train writes its checkpoint unless told.
var defaultCheckpoint = filepath.Join("out", "veil-train.ckpt")

type trainFlags struct {
	model, lossKind, data, optimizer, norm, out, resume, report  string
	input, epochs, batch, microBatch, minImages, maxPeople, crop int
	tunePairs, centreCount, freezeBlocks, maxPerIdentity         int
	centreDir, trainSet, mtflDir, init, unit, ledgerDir          string
	width, lr, momentum, weightDecay, scale, margin              float64
	dp                                                           bool
	sigma, clip, q, targetEps, delta, ema, budget                float64
	seed                                                         uint64
	json                                                         bool
	head                                                         headFlags
}

// trainHelp is veil train's --help.
const trainHelp = `Train LightFace on the LFW development training identities (peopleDevTrain.txt,
identities with at least --min-images images) and report the verification
accuracy of the embedding on the development test pairs (pairsDevTest.txt,
threshold chosen on pairsDevTrain.txt). No training identity appears in the
test pairs.

With --dp, training uses DP-SGD: Poisson sampling with rate q, gradients
clipped to --clip, noise σ·C, and the RDP accountant; give --noise-multiplier
or --target-epsilon (σ is then calibrated for --epochs). Under DP the network
uses group normalisation and triplet loss is refused.

The privacy unit (--privacy-unit) is identity by default: neighbouring data
sets differ by all the images of one person, people are sampled (each with
probability q = --batch / number of people unless --sampling-rate is given)
and the sum of a sampled person's gradients is clipped. --privacy-unit
example protects one image (q = --batch / number of images); a person with
m images is then protected only at group-privacy cost. Every report that
states ε states its unit.

Every epoch is charged to the privacy ledger of the data set (lfw, or mtfl,
per --privacy-unit) in the ledger folder (--ledger-dir; default
$VEIL_LEDGERS, else ~/.local/share/veil/ledgers), shared with veil privacy
dplc and veil fed client: the ledger belongs to the people, not to the
checkpoint, so another --checkpoint, a copied checkpoint or a copied data
folder does not give a fresh budget, and a --max-people run composes with
a run on all people for the people they share. Its budget (--budget-epsilon;
on the data set's first charge, default --target-epsilon, else what the
run's epochs spend) can only be lowered once anything is charged: a raise
needs veil privacy ledger reset. Each epoch is charged, and the ledger
saved, before the epoch touches the data; a run (--resume with more
--epochs included) that would take one of its people past the budget is
refused before anything is written. A resumed checkpoint whose spending
the ledger does not cover is refused; on resume σ and q are the
checkpoint's. See veil privacy ledger show.

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
that have seen private data without accounting would void the guarantee.`

func newTrainCmd(e *env) *cobra.Command {
	f := &trainFlags{}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a face embedding network (LightFace) on LFW's training identities, optionally with DP-SGD",
		Long:  trainHelp,
		Example: `  veil train --epochs 5
  veil train --model head --features agegender --loss distill --dp --target-epsilon 8 --epochs 20
  veil train --dp --noise-multiplier 1.1 --privacy-unit identity --checkpoint out/lightface-dp.ckpt --json`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error { return runTrain(e, cmd, f) },
	}
	f.register(cmd)
	return cmd
}

// register adds veil train's flags.
func (f *trainFlags) register(cmd *cobra.Command) {
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
	fl.IntVar(&f.batch, "batch", 64, "batch size (with --dp: the expected number of privacy units, images or people, per step when --sampling-rate is not given)")
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
	fl.Float64Var(&f.clip, "clip", 1, "DP-SGD clipping norm C of one unit's gradient")
	fl.Float64Var(&f.q, "sampling-rate", 0, "DP-SGD Poisson sampling rate q in (0, 1] of the privacy units (default: batch/N)")
	fl.Float64Var(&f.targetEps, "target-epsilon", 0, "calibrate σ to reach this ε after --epochs")
	fl.Float64Var(&f.delta, "delta", 1e-5, "δ of the reported (ε, δ)")
	fl.StringVar(&f.unit, "privacy-unit", string(train.UnitIdentity), "what DP protects: identity (all of a person's images) or example (one image)")
	fl.Float64Var(&f.budget, "budget-epsilon", 0, "ε budget of the data set's privacy ledger (on its first charge; default --target-epsilon, else what --epochs spend; afterwards it can only be lowered: a raise needs veil privacy ledger reset)")
	addLedgerDirFlag(fl, &f.ledgerDir)
	fl.IntVar(&f.maxPerIdentity, "max-per-identity", 0, "--privacy-unit identity: at most this many of a sampled person's images per step (0: --micro-batch)")
	fl.StringVar(&f.out, "checkpoint", "", "checkpoint file written after every epoch (default: "+defaultCheckpoint+", folder created)")
	fl.StringVar(&f.report, "report", "", "also write the JSON report to this file (the summary still goes to the terminal)")
	fl.StringVar(&f.resume, "resume", "", "resume from this checkpoint")
	fl.Uint64Var(&f.seed, "seed", 1, "seed for initialisation, data order and augmentation (not privacy noise)")
	fl.IntVar(&f.tunePairs, "tune-pairs", 0, "choose the threshold on this many pairsDevTrain pairs, half same, half different (0: all 2200)")
	fl.BoolVar(&f.json, "json", false, "print a JSON report")
	fl.StringVar(&f.centreDir, "centre-images", "", "--loss distill: folder of public face photos (none of them in LFW) whose mean descriptor is subtracted from every target (default: <data>/mtfl/net_7876)")
	fl.IntVar(&f.centreCount, "centre-count", 512, "--loss distill: how many of --centre-images (in name order) to average")
	f.head.register(cmd)
}

// check checks every flag's value on its own, naming the offending flag;
// what depends on several flags is left to training.Options.Validate.
func (f *trainFlags) check(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	checks := []flagCheck{
		oneOf("model", f.model, "lightface", "head"),
		oneOf("loss", f.lossKind, "softmax", "cosface", "arcface", "triplet", "irene", "distill"),
		oneOf("optimizer", f.optimizer, "sgd", "adam"),
		oneOf("train-set", f.trainSet, "lfw", "mtfl"),
		atLeast("epochs", f.epochs, 1),
		atLeast("batch", f.batch, 1),
		atLeast("micro-batch", f.microBatch, 1),
		intIn("input", f.input, 32, 1024),
		flagCheck{"width", f.width > 0 && f.width <= 4, "in (0, 4]", f.width},
		intIn("crop", f.crop, 8, 250),
		positive("lr", f.lr),
		flagCheck{"momentum", f.momentum >= 0 && f.momentum < 1, "in [0, 1)", f.momentum},
		nonNegative("weight-decay", f.weightDecay),
		positive("scale", f.scale),
		nonNegative("margin", f.margin),
		flagCheck{"ema", f.ema >= 0 && f.ema < 1, "in [0, 1) (0: no moving average)", f.ema},
		atLeast("min-images", f.minImages, 1),
		atLeast("max-people", f.maxPeople, 0),
		atLeast("tune-pairs", f.tunePairs, 0),
		atLeast("centre-count", f.centreCount, 1),
		intIn("freeze-blocks", f.freezeBlocks, 0, arch.LightFaceBlocks),
	}
	if changed("norm") {
		checks = append(checks, oneOf("norm", f.norm, "batch", "group", "none"))
	}
	if f.dp {
		checks = append(checks,
			oneOf("privacy-unit", f.unit, string(train.UnitIdentity), string(train.UnitExample)),
			positive("clip", f.clip),
			openUnit("delta", f.delta),
			atLeast("max-per-identity", f.maxPerIdentity, 0))
		for _, fl := range []struct {
			name string
			v    float64
		}{{"noise-multiplier", f.sigma}, {"target-epsilon", f.targetEps}, {"budget-epsilon", f.budget}} {
			if changed(fl.name) {
				checks = append(checks, positive(fl.name, fl.v))
			}
		}
	}
	if err := checkFlags(checks...); err != nil {
		return err
	}
	if f.dp {
		switch sigma, target := changed("noise-multiplier"), changed("target-epsilon"); {
		case sigma && target:
			return errors.New("give --noise-multiplier or --target-epsilon, not both (σ is calibrated from the target)")
		case !sigma && !target:
			return errors.New("--dp needs the noise: --noise-multiplier σ, or --target-epsilon ε to calibrate σ for --epochs")
		}
	}
	return nil
}

// options turns the flags into the library's options; Validate (via
// training.New) checks them.
func (f *trainFlags) options(cmd *cobra.Command) (training.Options, error) {
	if err := f.check(cmd); err != nil {
		return training.Options{}, err
	}
	changed := cmd.Flags().Changed
	if err := f.conflicts(changed); err != nil {
		return training.Options{}, err
	}
	o := training.Options{
		Model: training.ModelOptions{Kind: f.model, Input: f.input, Width: f.width, Norm: f.norm, Loss: f.lossKind, Scale: f.scale, Margin: f.margin},
		Data: training.DataOptions{Set: f.trainSet, LFW: f.data, MTFL: f.mtflDir, MinImages: f.minImages, MaxPeople: f.maxPeople, Crop: f.crop,
			TunePairs: f.tunePairs, CentreImages: f.centreDir, CentreCount: f.centreCount},
		Optim: training.OptimOptions{Batch: f.batch, MicroBatch: f.microBatch, Optimizer: f.optimizer, LearningRate: f.lr, Momentum: f.momentum,
			WeightDecay: f.weightDecay, EMA: f.ema, FreezeBlocks: f.freezeBlocks, Seed: f.seed, Augment: true},
		Epochs:     f.epochs,
		Checkpoint: f.out,
		Resume:     f.resume,
		Init:       f.init,
		Describers: training.Describers{
			Inputs:  f.head.openInputs,
			Teacher: f.head.openDescriber,
		},
	}
	if f.model == "head" || changed("features") {
		o.Model.Features = f.head.features
	}
	o.Data.DefaultFolders(datadir.Default())
	if o.Checkpoint == "" {
		o.Checkpoint = defaultCheckpoint
	}
	// Every run is evaluated on LFW's development pairs: say at once when
	// the folder is not LFW's, rather than from deep in the data loader.
	if _, err := os.Stat(filepath.Join(o.Data.LFW, "peopleDevTrain.txt")); err != nil {
		flag := "--data"
		if !changed("data") {
			flag = "the default LFW folder (give --data)"
		}
		return training.Options{}, fmt.Errorf("%s %s is not LFW's folder: it has no peopleDevTrain.txt (LFW's development identities)", flag, o.Data.LFW)
	}
	if f.dp {
		o.DP = &training.DPOptions{Unit: train.Unit(f.unit), NoiseMultiplier: f.sigma, TargetEpsilon: f.targetEps, Clip: f.clip,
			SamplingRate: f.q, Delta: f.delta, BudgetEpsilon: f.budget, MaxPerIdentity: f.maxPerIdentity}
		if !changed("privacy-unit") && f.trainSet == "mtfl" {
			o.DP.Unit = train.UnitExample // public faces without identity labels
		}
		dir, err := ledgerDir(f.ledgerDir)
		if err != nil {
			return training.Options{}, err
		}
		o.LedgerDir = dir
	}
	return o, nil
}

// conflicts refuses flags that do not apply with the others given
// (changed says which were).
func (f *trainFlags) conflicts(changed func(string) bool) error {
	if f.trainSet == "mtfl" {
		for _, n := range []string{"min-images", "max-people"} {
			if changed(n) {
				return fmt.Errorf("train: --%s selects LFW identities; it does not apply to --train-set mtfl", n)
			}
		}
	}
	if f.model != "head" && changed("features") {
		return errors.New("train: --features chooses --model head's input; LightFace reads images")
	}
	if f.model == "head" && changed("norm") {
		return errors.New("train: --norm applies to LightFace; the head has no normalisation layers")
	}
	if !f.dp {
		for _, n := range []string{"noise-multiplier", "sampling-rate", "target-epsilon", "budget-epsilon", "privacy-unit", "max-per-identity"} {
			if changed(n) {
				return fmt.Errorf("train: --%s needs --dp", n)
			}
		}
	}
	if f.dp && changed("sampling-rate") && !(f.q > 0 && f.q <= 1) {
		return fmt.Errorf("train: --sampling-rate must be in (0, 1], got %g", f.q)
	}
	return nil
}

func runTrain(e *env, cmd *cobra.Command, f *trainFlags) error {
	o, err := f.options(cmd)
	if err != nil {
		return err
	}
	if o.Optim.Engine, err = e.engine(); err != nil {
		return err
	}
	f.head.engine = o.Optim.Engine
	quiet := f.head.quiet
	draw := &trainProgress{w: e.stderr, quiet: quiet}
	o.Progress = draw.event
	job, err := training.New(o)
	if err != nil {
		return err
	}
	if o.Checkpoint == defaultCheckpoint {
		if err := os.MkdirAll(filepath.Dir(o.Checkpoint), 0o755); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	if !quiet {
		fmt.Fprintf(e.stderr, "checkpoint after every epoch: %s\n", o.Checkpoint)
	}
	rep, err := job.Run(cmd.Context())
	draw.finish()
	if err != nil {
		return err
	}
	if f.report != "" {
		err := atomicfile.Write(f.report, 0o600, func(w io.Writer) error { return writeJSON(w, rep) })
		if err != nil {
			return fmt.Errorf("train: writing the report %s: %w", f.report, err)
		}
	}
	if f.json {
		return writeJSON(e.stdout, rep)
	}
	printTrainSummary(e.stdout, rep, job.Options())
	if f.report != "" {
		fmt.Fprintf(e.stdout, "report: %s\n", f.report)
	}
	return nil
}

// printTrainSummary prints the readable summary of a run.
func printTrainSummary(w io.Writer, r *training.Report, o training.Options) {
	people := fmt.Sprintf("%d identities", r.Identities)
	if r.TrainSet == "mtfl" {
		people = "public faces without identity labels"
	}
	fmt.Fprintf(w, "trained %s (%s loss) on %d images of %s, %d epochs (%d steps): final loss %.4f\n", r.Model.Kind, r.Loss, r.Images, people, r.Epochs, r.Steps, r.FinalLoss)
	switch {
	case r.Epsilon != nil:
		units := "images"
		if r.PrivacyUnit == string(train.UnitIdentity) {
			units = "people"
		}
		fmt.Fprintf(w, "privacy: ε = %s at δ = %g per %s (DP-SGD on N = %d %s, sampling rate q = %.4f, noise σ = %.3f, clip C = %g)\n",
			dp.FormatEpsilon(*r.Epsilon), r.Delta, r.PrivacyUnit, r.PrivacyUnits, units, r.SamplingQ, r.NoiseMult, r.Clip)
	case r.NonPrivateSteps > 0 && r.TrainSet != "mtfl":
		fmt.Fprintf(w, "privacy: none: trained on private data without DP, ε is unbounded\n")
	case r.TrainSet == "mtfl" && !r.DP:
		fmt.Fprintf(w, "privacy: public data only, nothing private spent\n")
	}
	if r.Ledger != "" {
		fmt.Fprintf(w, "privacy ledger: %s, budget ε = %g; the people of this run have spent up to ε = %s (every command on them counted)\n", r.Ledger, r.BudgetEpsilon, dp.FormatEpsilon(r.LedgerEpsilon))
	}
	fmt.Fprintf(w, "LFW development pairs: accuracy %.4f (threshold %.3f)", r.DevAccuracy, r.Threshold)
	if r.InitAccuracy != nil {
		fmt.Fprintf(w, "; as initialised %.4f", *r.InitAccuracy)
	}
	if r.DescriptorAccuracy != nil {
		fmt.Fprintf(w, "; the head's raw %s inputs (cosine) %.4f", o.Model.Features, *r.DescriptorAccuracy)
	}
	fmt.Fprintf(w, "\ncheckpoint: %s (%.0f s)\n", r.Checkpoint, r.WallS)
}

// trainProgress draws a run's progress on stderr: a bar per set of images
// described, a bar per epoch and a line per finished epoch. Quiet draws
// nothing.
type trainProgress struct {
	w     io.Writer
	quiet bool
	bars  map[string]*progress.Bar
	step  bool // an epoch bar is on the current line
	// plain is set when w is not a terminal (a log file, a pipe): no bar
	// redrawn with carriage returns, only the lines of finished epochs.
	plain, checked bool
}

func (p *trainProgress) event(ev training.Event) {
	if p.quiet {
		return
	}
	if !p.checked {
		p.plain, p.checked = !progress.IsTerminal(p.w), true
	}
	switch ev.Kind {
	case training.EventDescribe:
		if p.bars == nil {
			p.bars = map[string]*progress.Bar{}
		}
		b, ok := p.bars[ev.Label]
		if !ok {
			b = progress.New(p.w, "describing "+ev.Label, ev.Total, false)
			p.bars[ev.Label] = b
		}
		if ev.Done > 0 {
			b.Add(1)
		}
		if ev.Done == ev.Total {
			b.Done()
			delete(p.bars, ev.Label)
		}
	case training.EventStep:
		if p.plain {
			return
		}
		fmt.Fprintf(p.w, "\repoch %d/%d %s step %d/%d loss %.4f   ", ev.Epoch, ev.Epochs, bar(ev.Done, ev.Total, 20), ev.Done, ev.Total, ev.Loss)
		p.step = true
	case training.EventEpoch:
		line := fmt.Sprintf("epoch %d/%d mean loss %.4f", ev.Epoch, ev.Epochs, ev.Loss)
		if pr := ev.Privacy; pr.Steps > 0 && pr.Bounded() {
			line += fmt.Sprintf(" ε = %s per %s", dp.FormatEpsilon(pr.Epsilon), pr.Unit)
		}
		if p.plain {
			fmt.Fprintln(p.w, line)
		} else {
			fmt.Fprintf(p.w, "\r%s%s\n", line, strings.Repeat(" ", 20))
		}
		p.step = false
	case training.EventNote:
		p.endLine()
		fmt.Fprintln(p.w, ev.Message)
	}
}

// endLine ends an epoch bar's line.
func (p *trainProgress) endLine() {
	if p.step {
		fmt.Fprintln(p.w)
		p.step = false
	}
}

// finish ends the output of an interrupted run cleanly.
func (p *trainProgress) finish() {
	if !p.quiet {
		p.endLine()
	}
}

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
