package cli

import (
	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face/desccache"
	"github.com/veil-privacy/veil/face/describer"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/internal/engine"
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

// describerOptions are the options of the describers of the flags'
// pipeline and cache.
func (h *headFlags) describerOptions() describer.Options {
	return describer.Options{Models: h.models, Detector: h.detector, Align: h.align, MinScore: h.minScore,
		CacheDir: h.cache, NoCache: h.noCache, Engine: h.engine}
}

// openDescriber builds the descriptor pipeline and its cache.
func (h *headFlags) openDescriber() (eval.Describer, error) {
	return h.describerOptions().Descriptors()
}

// openInputs returns the describer of --model head's input vectors and
// their length.
func (h *headFlags) openInputs() (eval.Describer, int, error) {
	return h.describerOptions().Inputs(h.features)
}
