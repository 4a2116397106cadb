package cli

import (
	"fmt"
	"io"
	"sort"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/internal/progress"
	"github.com/veil-privacy/veil/nn/trained"
)

// headFlagUsage documents --head on embed, verify and compare.
const headFlagUsage = "checkpoint of an embedding head trained by veil train --model head: faces are embedded by the head (with its moving-average weights when it kept them) instead of described by the pretrained descriptor alone"

// headRunner is a trained head with what it needs to turn a detected face
// into the head's input.
type headRunner struct {
	path string
	head *trained.Head
	ag   *nets.AgeGender // heads on age/gender region features only
}

// openHead loads the head at path; models is the face-api model folder
// ("" for the default), needed by heads on age/gender features.
func openHead(e *env, path, models string) (*headRunner, error) {
	eng, err := e.engine()
	if err != nil {
		return nil, err
	}
	h, err := trained.LoadHead(path, eng)
	if err != nil {
		return nil, fmt.Errorf("--head: %w", err)
	}
	r := &headRunner{path: path, head: h}
	if h.Input() == trained.InputAgeGender {
		if models == "" {
			models = nets.DefaultModelDir()
		}
		if r.ag, err = nets.NewAgeGenderOn(models, eng); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// needsDescriptors says whether the pipeline must compute descriptors
// (the head reads them).
func (r *headRunner) needsDescriptors() bool { return r.head.Input() == trained.InputDescriptor }

// embedFaces returns the head's embedding of each face of img, whose
// landmarks (and descriptors, for a descriptor head) are set: the head
// reads the descriptor, or the age/gender network's region features of
// the face's region box (face.RegionCrop).
func (r *headRunner) embedFaces(img *imaging.RGB, faces []face.Face) ([][]float32, error) {
	if len(faces) == 0 {
		return nil, nil
	}
	var in [][]float32
	if r.ag == nil {
		for i := range faces {
			if len(faces[i].Descriptor) == 0 {
				return nil, fmt.Errorf("face %d has no descriptor for the head", i)
			}
			in = append(in, faces[i].Descriptor)
		}
	} else {
		crops := make([]*imaging.Float, len(faces))
		for i := range faces {
			c, err := face.RegionCrop(img, &faces[i].Landmarks)
			if err != nil {
				return nil, err
			}
			crops[i] = nets.AgeGenderInput(c)
		}
		var err error
		if in, err = r.ag.RegionFeatures(crops); err != nil {
			return nil, fmt.Errorf("age/gender features: %w", err)
		}
	}
	return r.head.Embed(in)
}

// headInfo describes the head in JSON output.
type headInfo struct {
	Checkpoint string `json:"checkpoint"`
	// Input is what the head reads: descriptor or agegender.
	Input    string `json:"input"`
	InputDim int    `json:"input_dim"`
	Dim      int    `json:"dim"`
	// EMA says the weights are the training run's moving average.
	EMA bool `json:"ema_weights"`
}

func (r *headRunner) info() headInfo {
	return headInfo{Checkpoint: r.path, Input: r.head.Input(), InputDim: r.head.InputDim(), Dim: r.head.Dim(), EMA: r.head.UsesEMA()}
}

// describe says in words what the head reads and returns.
func (i headInfo) describe() string {
	w := "last weights"
	if i.EMA {
		w = "moving-average weights"
	}
	in := "the face descriptor"
	if i.Input == trained.InputAgeGender {
		in = "age/gender region features"
	}
	return fmt.Sprintf("head %s (%s, %d values → %d-d embedding, %s)", i.Checkpoint, in, i.InputDim, i.Dim, w)
}

// headImage is one image's entry in `veil embed --head`'s JSON output.
type headImage struct {
	Path   string     `json:"path"`
	Width  int        `json:"width"`
	Height int        `json:"height"`
	Faces  []headFace `json:"faces"`
	Error  string     `json:"error,omitempty"`
}

type headFace struct {
	// Number is the face's number, from 1, as veil detect numbers it.
	Number    int          `json:"number"`
	Box       face.Box     `json:"box"`
	Score     float64      `json:"score"`
	Landmarks [][2]float64 `json:"landmarks"`
	Embedding []float32    `json:"embedding"`
}

// runEmbedHead is `veil embed --head CKPT`: every face of every image
// through the head. Exit statuses are embed's.
// printEmbedHead prints the head and the embeddings of the faces of each
// image read.
func printEmbedHead(w io.Writer, head headInfo, images []headImage) {
	fmt.Fprintln(w, head.describe())
	for _, im := range images {
		if im.Error != "" {
			continue
		}
		fmt.Fprintf(w, "%s (%dx%d): %d face(s)\n", im.Path, im.Width, im.Height, len(im.Faces))
		for _, f := range im.Faces {
			fmt.Fprintf(w, "  face %d: box x=%.1f y=%.1f w=%.1f h=%.1f score=%.3f embedding=[%.4f %.4f %.4f ...] (%d values)\n",
				f.Number, f.Box.X, f.Box.Y, f.Box.Width, f.Box.Height, f.Score, f.Embedding[0], f.Embedding[1], f.Embedding[2], len(f.Embedding))
		}
	}
}

func runEmbedHead(e *env, pf *pipelineFlags, headPath string, paths []string) error {
	r, err := openHead(e, headPath, pf.models)
	if err != nil {
		return err
	}
	opt, err := pf.options()
	if err != nil {
		return err
	}
	opt.Descriptors = r.needsDescriptors()
	p, err := e.pipeline(opt)
	if err != nil {
		return err
	}
	results := runImages(e, p, paths, pf.quiet)
	doc := struct {
		Head   headInfo    `json:"head"`
		Images []headImage `json:"images"`
	}{Head: r.info(), Images: make([]headImage, len(paths))}
	var failed, noFace []string
	for i, res := range results {
		im := headImage{Path: paths[i], Faces: []headFace{}}
		err := res.err // names the file (runImages)
		var emb [][]float32
		if err == nil {
			im.Width, im.Height = res.img.W, res.img.H
			if emb, err = r.embedFaces(res.img, res.faces); err != nil {
				err = fmt.Errorf("%s: %w", paths[i], err)
			}
		}
		if err != nil {
			im.Error = err.Error()
			failed = append(failed, im.Error)
			doc.Images[i] = im
			continue
		}
		for k := range res.faces {
			f := &res.faces[k]
			im.Faces = append(im.Faces, headFace{Number: k + 1, Box: f.Box, Score: f.Score, Landmarks: f.Landmarks[:], Embedding: emb[k]})
		}
		if len(res.faces) == 0 {
			noFace = append(noFace, paths[i])
		}
		doc.Images[i] = im
	}
	if pf.json {
		if err := writeJSON(e.stdout, doc); err != nil {
			return err
		}
	} else {
		printEmbedHead(e.stdout, doc.Head, doc.Images)
	}
	return imagesOutcome(e, failed, noFace, len(paths), "embed")
}

// verifyHead runs the verification protocol opt on a head's embeddings of
// the inputs veil train gives it, so that the accuracy is the one the
// training report states: the central face's descriptor (veil verify's
// rule and cache) or the age/gender region features of LFW's fixed face
// box (deep-funnelled 250×250 images only). Pairs are scored by cosine
// similarity, as veil train scores them.
func verifyHead(e *env, r *headRunner, hf headFlags, opt eval.VerifyOptions) (*eval.VerifyResult, error) {
	hf.features = r.head.Input()
	var err error
	if hf.engine, err = e.engine(); err != nil {
		return nil, err
	}
	desc, dim, err := hf.openInputs()
	if err != nil {
		return nil, err
	}
	if dim != r.head.InputDim() {
		return nil, fmt.Errorf("the head reads %d values, but %s inputs have %d", r.head.InputDim(), hf.features, dim)
	}
	seen := map[string]bool{}
	var paths []string
	for _, pf := range []*dataset.PairsFile{opt.Test, opt.Train} {
		if pf == nil {
			continue
		}
		for _, p := range pf.Pairs {
			for _, second := range []bool{false, true} {
				if path := p.ImagePath(opt.ImagesDir, second); !seen[path] {
					seen[path] = true
					paths = append(paths, path)
				}
			}
		}
	}
	sort.Strings(paths)
	bar := progress.New(e.stderr, "describing", len(paths), hf.quiet)
	raw, err := eval.DescribeAll(paths, engine.Parallelism(), desc, func() { bar.Add(1) })
	bar.Done()
	if err != nil {
		return nil, err
	}
	in := make([][]float32, len(paths))
	for i, p := range paths {
		in[i] = raw[p].Descriptor
	}
	emb, err := r.head.Embed(in)
	if err != nil {
		return nil, err
	}
	byPath := make(map[string]eval.Described, len(paths))
	for i, p := range paths {
		d := raw[p]
		d.Descriptor = emb[i]
		byPath[p] = d
	}
	opt.Metric = eval.CosineDistance
	opt.Workers, opt.Progress = 1, nil
	return eval.Verify(opt, func(path string) (eval.Described, error) {
		d, ok := byPath[path]
		if !ok {
			return eval.Described{}, fmt.Errorf("no embedding for %s", path)
		}
		return d, nil
	})
}
