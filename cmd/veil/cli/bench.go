package cli

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/internal/engine"
)

// benchCommands lists the constructors of `veil bench` subcommands.
// Each lives in its own file; add a line here when adding one.
var benchCommands = []func(*env) *cobra.Command{
	newBenchFacesCmd, newBenchDetectCmd, newBenchPaillierCmd, newBenchDPHECmd, newBenchSecaggCmd, newBenchTrainCmd, newBenchFedCmd, newBenchUnlinkCmd, newBenchMetricCmd, newBenchTaggingCmd, newBenchCollabCmd}

func newBenchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Veil's components: speed, detection recall, secure aggregation (use --json for machine-readable reports)",
	}
	for _, b := range benchCommands {
		cmd.AddCommand(b(e))
	}
	return cmd
}

// lfwFlags choose the LFW folder and the descriptor pipeline (the one veil
// verify and veil train use, so their cached descriptors are reused).
type lfwFlags struct {
	data string
	head headFlags
}

func (f *lfwFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", "", "LFW folder (default: <data>/lfw)")
	fl.StringVar(&f.head.models, "models", "", "folder of face-api's weight files (default: $VEIL_MODELS, else models/ of the checkout)")
	fl.StringVar(&f.head.cache, "cache", "", "descriptor cache folder, shared with veil verify and veil train (default $VEIL_CACHE, else the user's cache folder)")
	fl.BoolVar(&f.head.noCache, "no-cache", false, "do not read or write the descriptor cache")
	fl.BoolVarP(&f.head.quiet, "quiet", "q", false, "no progress output")
	// The pipeline settings veil verify and veil train default to, so
	// that their cache entries are found.
	f.head.detector, f.head.align, f.head.minScore = "tiny", "both", 0.5
}

func (f *lfwFlags) dir() string {
	if f.data != "" {
		return f.data
	}
	return filepath.Join(datadir.Default(), "lfw")
}

// source opens the describer of the flags' pipeline and cache, and the LFW
// folder's photos described by it (with a progress bar unless --quiet).
func (f *lfwFlags) source(e *env) (*eval.LFWSource, error) {
	eng, err := e.engine()
	if err != nil {
		return nil, err
	}
	f.head.engine = eng
	desc, err := f.head.openDescriber()
	if err != nil {
		return nil, err
	}
	o := eval.LFWSourceOptions{Dir: f.dir(), Describe: desc, Workers: engine.Parallelism()}
	if !f.head.quiet {
		o.Progress = e.stderr
	}
	return eval.NewLFWSource(o)
}
