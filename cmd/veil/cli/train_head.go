package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/desccache"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/arch"
)

// headFlags configure the face pipeline that computes --model head's
// input descriptors.
type headFlags struct {
	features                string
	models, detector, align string
	minScore                float64
	cache                   string
	noCache, quiet          bool
	// engine runs the pipeline's SSD layers: the command's engine, set
	// by the command before it describes (nil: a private default one).
	engine *engine.Engine
}

func (h *headFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&h.features, "features", "descriptor", "--model head's input: descriptor (the face pipeline's 128-d descriptors) or agegender (face-api's age/gender network's 2048 region features of LFW's fixed face box: public features never trained on identities)")
	fl.StringVar(&h.models, "models", "", "--model head, --loss distill: folder of face-api's weight files (default: $"+nets.EnvModels+", else models/ of the checkout)")
	fl.StringVar(&h.detector, "detector", "tiny", "--model head, --loss distill: face detector, tiny or ssd (defaults match veil verify, so the two share cached descriptors)")
	fl.StringVar(&h.align, "align", "both", "--model head, --loss distill: face alignment before the descriptor, both, faceapi or dlib")
	fl.Float64Var(&h.minScore, "min-score", 0.5, "--model head, --loss distill: minimum detection score, in (0, 1)")
	fl.StringVar(&h.cache, "cache", "", "--model head, --loss distill: descriptor cache folder, shared with veil verify (default $"+desccache.EnvCache+", else the user's cache folder)")
	fl.BoolVar(&h.noCache, "no-cache", false, "--model head, --loss distill: do not read or write the descriptor cache")
	fl.BoolVarP(&h.quiet, "quiet", "q", false, "no progress output: no bars (describing images, epochs) and no notes")
}

// descCacheSettings is the cache settings string of a descriptor pipeline;
// it must stay the one veil verify builds (verify.go) so the two commands
// share cached descriptors.
func descCacheSettings(opt face.Options) string {
	return fmt.Sprintf("%s|%s|%s|%g|second=%v|%s", pipelineVersion, opt.Detector, opt.Align, opt.MinScore, opt.SecondDetector, nets.PinnedDigest())
}

// openDescriber builds the descriptor pipeline and its cache.
func (h *headFlags) openDescriber() (eval.Describer, error) {
	p, err := face.NewPipeline(face.Options{ModelDir: h.models, Detector: face.Detector(h.detector), Align: face.Align(h.align),
		MinScore: h.minScore, MaxFaces: 100, Descriptors: true, SecondDetector: true, Engine: h.engine})
	if err != nil {
		return nil, err
	}
	cache, err := h.openCache(descCacheSettings(p.Options()))
	if err != nil {
		return nil, err
	}
	return describer(p, cache), nil
}

// openCache opens the cache folder (--cache, else the default) for the
// given settings, or returns nil with --no-cache.
func (h *headFlags) openCache(settings string) (*desccache.Cache, error) {
	if h.noCache {
		return nil, nil
	}
	dir := h.cache
	if dir == "" {
		var err error
		if dir, err = desccache.DefaultDir(); err != nil {
			return nil, err
		}
	}
	return desccache.Open(dir, settings)
}

// ageGenderVersion changes whenever the code computing age/gender
// features changes, so that stale cache entries are not reused.
const ageGenderVersion = "veil-agegender-regions-1"

// openAgeGender returns a describer whose "descriptor" is the age/gender
// network's region features (nets.AgeGender.RegionFeatures) of the fixed
// face box of a
// deep-funnelled LFW image (dataset.LFWAgeGenderBox), cached like the
// pipeline's descriptors but under its own settings.
func (h *headFlags) openAgeGender() (eval.Describer, error) {
	dir := h.models
	if dir == "" {
		dir = nets.DefaultModelDir()
	}
	a, err := nets.NewAgeGender(dir)
	if err != nil {
		return nil, err
	}
	left, top, side := dataset.LFWAgeGenderBox()
	cache, err := h.openCache(fmt.Sprintf("%s|box=[%d %d %d]|%s", ageGenderVersion, left, top, side, nets.PinnedDigest()))
	if err != nil {
		return nil, err
	}
	return cachedDescriber(cache, func(img *imaging.RGB) (eval.Described, error) {
		if img.W != dataset.LFWFrame || img.H != dataset.LFWFrame {
			return eval.Described{}, fmt.Errorf("image is %d×%d, not a %d×%d deep-funnelled LFW image", img.W, img.H, dataset.LFWFrame, dataset.LFWFrame)
		}
		crop, err := img.Crop(left, top, side, side)
		if err != nil {
			return eval.Described{}, err
		}
		v, err := a.RegionFeatures([]*imaging.Float{nets.AgeGenderInput(crop)})
		if err != nil {
			return eval.Described{}, err
		}
		return eval.Described{Descriptor: v[0]}, nil
	}), nil
}

// openInputs returns the describer of --model head's input vectors and
// their length.
func (h *headFlags) openInputs() (eval.Describer, int, error) {
	switch h.features {
	case "descriptor":
		d, err := h.openDescriber()
		return d, 128, err
	case arch.HeadAgeGender:
		d, err := h.openAgeGender()
		return d, nets.AgeGenderRegionFeatures, err
	}
	return nil, 0, fmt.Errorf("train: unknown --features %q (want descriptor or %s)", h.features, arch.HeadAgeGender)
}
