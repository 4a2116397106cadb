// Package cli implements the commands of the veil binary: one file per
// command group. It parses flags, calls the library packages and prints
// human-readable text or, with --json, machine-readable JSON.
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/internal/engine"
)

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// commandGroups lists the constructors of the top-level command groups.
// Each group lives in its own file; add a line here when adding a group.
var commandGroups = []func(*env) *cobra.Command{
	newDetectCmd,
	newEmbedCmd,
	newVerifyCmd,
	newCompareCmd,
	newTrainCmd,
	newPrivacyCmd,
	newBenchCmd,
	newFedCmd,
	newLibraryCmd,
	newPeopleCmd,
	newFacesCmd,
	newSuggestCmd,
	newSearchCmd,
	newServeCmd,
}

// buildCommit is the commit the binary was built from, for builds without
// Go's version-control stamping (the scripts build with -buildvcs=false and
// set it with -ldflags "-X github.com/veil-privacy/veil/cmd/veil/cli.buildCommit=...").
// It is set at link time only, never written at run time.
var buildCommit string

// versionString is what veil --version prints: the module version, the
// commit (from the build's VCS stamp, else from buildCommit), whether the
// work tree had changes, and the Go version.
func versionString() string {
	version, commit, modified := "(devel)", buildCommit, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && commit == "":
				commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				modified = " with uncommitted changes"
			}
		}
	}
	if commit == "" {
		commit = "unknown (built without version-control information)"
	}
	return fmt.Sprintf("veil %s, commit %s%s, %s", version, commit, modified, runtime.Version())
}

// env is what every command needs from the process: its streams, logger
// and compute engine.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
	// eng returns the command's one compute engine, created on first use
	// (commands that run no network never start one) from $VEIL_BACKEND,
	// and shared by every network the command runs.
	eng func() (*engine.Engine, error)
}

// engine returns the command's compute engine (a new default one for an
// env built without it, as some tests build theirs).
func (e *env) engine() (*engine.Engine, error) {
	if e.eng == nil {
		return engine.New(engine.Options{})
	}
	return e.eng()
}

// pipeline creates a face pipeline with opt on the command's engine.
func (e *env) pipeline(opt face.Options) (*face.Pipeline, error) {
	eng, err := e.engine()
	if err != nil {
		return nil, err
	}
	opt.Engine = eng
	return face.NewPipeline(opt)
}

// NewRoot builds the veil command tree writing to the given streams.
func NewRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		eng: sync.OnceValues(func() (*engine.Engine, error) {
			return engine.New(engine.Options{Backend: os.Getenv(engine.EnvBackend)})
		})}
	root := &cobra.Command{
		Use:   "veil",
		Short: "Privacy-preserving face recognition and face tagging",
		Long: `Veil finds faces in photos, turns them into descriptors with pretrained
networks, and trains and aggregates face models under differential privacy
and secure aggregation, so photos, faceprints and tags stay on their owners' devices.

Every command that reports results takes --json for machine-readable output.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	for _, g := range commandGroups {
		root.AddCommand(g(e))
	}
	requireSubcommands(root)
	return root
}

// requireSubcommands makes every command group below root (a command with
// subcommands and nothing of its own to run) refuse an unknown subcommand
// with a suggestion, instead of printing its help and exiting 0 as cobra
// does for a mistyped `veil fed statsu`.
func requireSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.HasSubCommands() {
			if c.Run == nil && c.Args == nil {
				requireSubcommand(c)
			}
			requireSubcommands(c)
		}
	}
}

// Main runs the veil command line and returns the process exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(stderr, "veil: %v\n", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}
