package training

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/train"
)

// Examples are training examples: inputs and labels (train.Data) and the
// number of classes the loss head distinguishes.
type Examples interface {
	train.Data
	Classes() int
}

// Data is a prepared training set and, optionally, the verification pairs
// a trained embedding is scored on.
type Data struct {
	// Name names the data ("lfw", "mtfl"): the principal of the privacy
	// ledger and the checkpoint's record of what the weights have seen.
	Name string
	// Public says that every example is public, so training on it spends
	// no privacy.
	Public bool
	// Train are the training examples. Labelled by identity, they also
	// implement train.Identified (identity-level DP-SGD).
	Train Examples
	// Identities counts the people of the training examples (0 for
	// unlabelled public faces).
	Identities int
	// Targets are the distillation targets, one per example (loss
	// distill); Train is then labelled by example index.
	Targets [][]float32
	// Pairs, if set, score the trained embedding.
	Pairs *Pairs
	// People and ImageIDs name the person and the image ("person/file")
	// of each training example, in Train's order: the members a privacy
	// ledger charges (Members).
	People, ImageIDs []string
}

// Members returns the distinct members of the training examples in
// unit: people (train.UnitIdentity) or images (train.UnitExample), sorted.
func (d *Data) Members(unit train.Unit) []string {
	src := d.People
	if unit == train.UnitExample {
		src = d.ImageIDs
	}
	out := slices.Clone(src)
	slices.Sort(out)
	return slices.Compact(out)
}

// Pairs are verification pairs and the model inputs of their images.
type Pairs struct {
	// Tune chooses the similarity threshold, Test is scored with it.
	Tune, Test []dataset.Pair
	lfw        dataset.LFW
	// images are the distinct pair images and paths their files; inputs
	// returns their model inputs back to back (computed on the first call).
	images []dataset.Image
	paths  []string
	inputs func() ([]float32, error)
	// raw are the pair images' input vectors (head only): the accuracy of
	// the features the head starts from.
	raw map[string][]float32
}

// identified labels examples by identity for identity-level DP-SGD: the
// identity of example i is its class label (dataset.Set and
// dataset.Vectors number identities densely).
type identified struct {
	Examples
	labels []int32
}

// Identity implements train.Identified.
func (d identified) Identity(i int) int { return int(d.labels[i]) }

// Identities implements train.Identified.
func (d identified) Identities() int { return d.Classes() }

// indexLabelled labels each example by its index in the set (distillation
// targets are per image, not per identity), keeping the identities.
type indexLabelled struct{ identified }

// Batch returns the set's inputs with the examples' indices as labels.
func (s indexLabelled) Batch(idx []int, rng *rand.Rand) ([]float32, []int32, error) {
	x, _, err := s.identified.Batch(idx, rng)
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

// Identities implements train.Identified: the people, not the images.
func (s indexLabelled) Identities() int { return s.identified.Examples.Classes() }

// loader prepares data for a validated Options.
type loader struct {
	o        *Options
	progress func(Event)
}

// describe runs desc on every path with the configured parallelism and
// returns the vectors by path and how many came from a fallback box.
func (l *loader) describe(label string, paths []string, desc eval.Describer) (map[string][]float32, int, error) {
	workers := l.o.Workers
	if workers < 1 {
		workers = engine.Parallelism()
		if l.o.Optim.Engine != nil {
			workers = l.o.Optim.Engine.Parallelism()
		}
	}
	done := 0
	l.progress(Event{Kind: EventDescribe, Label: label, Total: len(paths)})
	got, err := eval.DescribeAll(paths, workers, desc, func() {
		done++
		l.progress(Event{Kind: EventDescribe, Label: label, Done: done, Total: len(paths)})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("train: describing %s: %w", label, err)
	}
	out := make(map[string][]float32, len(got))
	fallback := 0
	for p, d := range got {
		out[p] = d.Descriptor
		if d.Fallback {
			fallback++
		}
	}
	return out, fallback, nil
}

// LoadData reads the training images and the development pairs of o and
// computes what the model reads (crops, or the head's input vectors, and
// distillation targets). o must have been validated (Validate, or
// ValidateData when no run of Job follows; New validates).
func LoadData(o *Options) (*Data, error) {
	l := &loader{o: o, progress: o.progress}
	lfw := dataset.LFW{Dir: o.Data.LFW}
	var images []dataset.Image
	var err error
	if o.Data.Set == "mtfl" {
		images, err = dataset.MTFL{Dir: o.Data.MTFL}.PublicImages()
	} else {
		images, err = lfw.TrainImages("peopleDevTrain.txt", o.Data.MinImages, o.Data.MaxPeople)
	}
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if p := o.Data.Part; p != nil {
		if images, err = partImages(images, *p); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
	}
	tune, err := lfw.Pairs("pairsDevTrain.txt")
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	test, err := lfw.Pairs("pairsDevTest.txt")
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if n := o.Data.TunePairs; n > 0 && n < len(tune) {
		half := len(tune) / 2
		k := max(n/2, 1)
		tune = append(tune[:k:k], tune[half:half+k]...)
	}
	if err := dataset.CheckDisjoint(images, test); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	pairs := &Pairs{Tune: tune, Test: test, lfw: lfw}
	pairs.images = lfw.PairImages(append(append([]dataset.Pair{}, tune...), test...))
	for _, im := range pairs.images {
		pairs.paths = append(pairs.paths, im.Path)
	}
	d := &Data{Name: o.Data.Set, Public: o.Data.Set == "mtfl", Pairs: pairs}
	for _, im := range images {
		d.People = append(d.People, im.Identity)
		d.ImageIDs = append(d.ImageIDs, im.Identity+"/"+filepath.Base(im.Path))
	}
	if o.Model.Kind == "head" {
		err = l.headData(d, images)
	} else {
		err = l.imageData(d, images)
	}
	if err != nil {
		return nil, err
	}
	if o.Data.Set == "lfw" {
		d.Identities = d.Train.Classes()
	}
	if o.Model.Loss == "distill" {
		if err := l.withTeacher(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// imageData loads LightFace's training crops; the pair images' crops are
// loaded on the first evaluation.
func (l *loader) imageData(d *Data, images []dataset.Image) error {
	o := l.o
	l.note(fmt.Sprintf("loading %d training images", len(images)))
	set, err := dataset.Load(images, dataset.LoadOptions{Side: o.Model.Input, Crop: o.Data.Crop, Augment: o.Optim.Augment})
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	d.Train = identified{set, set.Labels}
	var x []float32
	d.Pairs.inputs = func() ([]float32, error) {
		if x != nil {
			return x, nil
		}
		ps, err := dataset.Load(d.Pairs.images, dataset.LoadOptions{Side: o.Model.Input, Crop: o.Data.Crop})
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		idx := make([]int, ps.Len())
		for i := range idx {
			idx[i] = i
		}
		// Load keeps the order of the images, which is that of paths.
		if x, _, err = ps.Batch(idx, nil); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		return x, nil
	}
	return nil
}

// headData describes the training images and the pair images with the
// head's input describer.
func (l *loader) headData(d *Data, images []dataset.Image) error {
	o := l.o
	if o.Describers.Inputs == nil {
		return errors.New("train: the head needs a describer of its input vectors")
	}
	desc, dim, err := o.Describers.Inputs()
	if err != nil {
		return err
	}
	paths := make([]string, len(images))
	for i, im := range images {
		paths[i] = im.Path
	}
	got, fb, err := l.describe("training images", paths, desc)
	if err != nil {
		return err
	}
	vecs := make([][]float32, len(images))
	for i, im := range images {
		vecs[i] = got[im.Path]
	}
	set, err := dataset.NewVectors(images, vecs)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if set.Dim != dim {
		return fmt.Errorf("train: input vectors have %d values, the head takes %d", set.Dim, dim)
	}
	d.Train = identified{set, set.Labels}
	raw, pfb, err := l.describe("pair images", d.Pairs.paths, desc)
	if err != nil {
		return err
	}
	if o.Model.Features == "descriptor" {
		l.note(fmt.Sprintf("%d training and %d pair images described (%d and %d without a detected face: central box)", len(paths), len(d.Pairs.paths), fb, pfb))
	}
	d.Pairs.raw = raw
	d.Pairs.inputs = func() ([]float32, error) {
		x := make([]float32, 0, len(d.Pairs.paths)*dim)
		for _, p := range d.Pairs.paths {
			v := raw[p]
			if len(v) != dim {
				return nil, fmt.Errorf("train: no input vector for pair image %s", p)
			}
			x = append(x, v...)
		}
		return x, nil
	}
	return nil
}

// withTeacher computes the face pipeline's descriptor of every training
// image (cached by the caller's describer) as its distillation target and
// relabels the set so that an example's label is its image's index.
//
// The targets are centred on the mean descriptor of public photos: dlib's
// descriptors share a large common component (two strangers' descriptors
// are far from orthogonal), and a student pulled towards raw targets can
// lower the loss by emitting that one direction for every face. The mean
// comes from public images (MTFL's web faces, none in LFW) so that it
// reveals nothing about the private training set and costs no privacy.
func (l *loader) withTeacher(d *Data) error {
	var paths []string
	id, ok := d.Train.(identified)
	if !ok {
		return fmt.Errorf("train: distillation needs identified examples, not %T", d.Train)
	}
	switch s := id.Examples.(type) {
	case *dataset.Set:
		paths = s.Paths
	case *dataset.Vectors:
		paths = s.Paths
	default:
		return fmt.Errorf("train: distillation needs images' paths, not %T", id.Examples)
	}
	if l.o.Describers.Teacher == nil {
		return errors.New("train: distillation needs the face pipeline's describer")
	}
	public, err := imageFiles(l.o.Data.CentreImages, l.o.Data.CentreCount)
	if err != nil {
		return fmt.Errorf("train: centre images: %w", err)
	}
	desc, err := l.o.Describers.Teacher()
	if err != nil {
		return err
	}
	pub, _, err := l.describe("public descriptors", public, desc)
	if err != nil {
		return err
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
	got, fb, err := l.describe("teacher descriptors", paths, desc)
	if err != nil {
		return err
	}
	l.note(fmt.Sprintf("%d teacher descriptors (%d from a central box: no face detected), centred on the mean of %d public ones", len(got), fb, len(pub)))
	targets := make([][]float32, len(paths))
	for i, p := range paths {
		t := got[p]
		if len(t) != len(mean) {
			return fmt.Errorf("train: no teacher descriptor for %s", p)
		}
		targets[i] = make([]float32, len(t))
		for j, x := range t {
			targets[i][j] = float32(float64(x) - mean[j])
		}
	}
	d.Train = indexLabelled{id}
	d.Targets = targets
	return nil
}

// note sends a note to the progress callback.
func (l *loader) note(msg string) { l.progress(Event{Kind: EventNote, Message: msg}) }

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

// accuracy scores pairs by the cosine similarity of their images' vectors
// and returns the test accuracy at the threshold that is best on the
// tuning pairs (package eval's threshold rule, via train.VerifyAccuracy).
func (p *Pairs) accuracy(vecs map[string][]float32) (acc, threshold float64, err error) {
	var missing error
	sims := func(pairs []dataset.Pair) ([]float64, []bool) {
		var s []float64
		var same []bool
		for _, q := range pairs {
			a, okA := vecs[p.lfw.ImagePath(q.Name1, q.Num1)]
			b, okB := vecs[p.lfw.ImagePath(q.Name2, q.Num2)]
			if !okA || !okB || len(a) != len(b) {
				missing = fmt.Errorf("train: no vector for pair %s %d / %s %d", q.Name1, q.Num1, q.Name2, q.Num2)
				return nil, nil
			}
			s = append(s, eval.Cosine(a, b))
			same = append(same, q.Same)
		}
		return s, same
	}
	ts, tsame := sims(p.Tune)
	es, esame := sims(p.Test)
	if missing != nil {
		return 0, 0, missing
	}
	return train.VerifyAccuracy(ts, tsame, es, esame)
}

// RawAccuracy is the accuracy of the head's input vectors themselves
// (cosine, threshold from the tuning pairs), or ok false when the model
// reads images.
func (p *Pairs) RawAccuracy() (acc float64, ok bool, err error) {
	if p.raw == nil {
		return 0, false, nil
	}
	acc, _, err = p.accuracy(p.raw)
	return acc, err == nil, err
}
