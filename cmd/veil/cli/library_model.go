package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/tagging"
)

// maxModelFile bounds a model file read by veil library model import.
const maxModelFile = 64 << 20

func newLibraryModelCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "List, import, adopt or roll back shared models (ψ) of the library",
		Long: `A shared model ψ (trained by collaborative tagging, see veil bench collab) maps
each face descriptor before suggestions compare faces. A library keeps every
imported version encrypted, and adopts one only if it measures at least as good
on your own names: each face you named is matched, leave-one-out, against your
other named faces under the library's suggestion rule, at the setting with the
most suggestions at 98% precision; the version is adopted only if it makes no
fewer suggestions and no more wrong ones than the space in use. Both
measurements and the decision are recorded (veil library model list).

Adopting re-computes every face's mapped descriptor from the stored one, in one
transaction (an interruption leaves the old or the new state), and changes none
of your decisions: names, rejections and accepted suggestions stay as they are.
rollback returns to the version in use before, exactly.`,
		Example: `  veil library model import --library lib psi.vpsi
  veil library model use --library lib 1
  veil library model use --library lib plain
  veil library model rollback --library lib
  veil library model list --library lib --json`,
	}
	cmd.AddCommand(newModelListCmd(e), newModelImportCmd(e), newModelUseCmd(e), newModelRollbackCmd(e))
	return cmd
}

type jsonModels struct {
	Active    int64                   `json:"active"`
	Models    []tagging.ModelInfo     `json:"models"`
	Decisions []tagging.ModelDecision `json:"decisions"`
}

func newModelListCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the model versions, the one in use (0: plain descriptors) and the decisions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				var out jsonModels
				var err error
				if out.Active, err = l.ActiveModel(cmd.Context()); err != nil {
					return err
				}
				if out.Models, err = l.Models(cmd.Context()); err != nil {
					return err
				}
				if out.Decisions, err = l.ModelLog(cmd.Context()); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, out)
				}
				fmt.Fprintf(e.stdout, "in use: %s\n", modelName(out.Active))
				for _, m := range out.Models {
					mark := " "
					if m.Active {
						mark = "*"
					}
					fmt.Fprintf(e.stdout, "%s version %d  imported %s  %d layer(s)  sha256 %.16s…\n", mark, m.Version, m.ImportedAt.Format("2006-01-02 15:04"), m.Layers, m.SHA256)
				}
				for _, d := range out.Decisions {
					printModelDecision(e, d)
				}
				return nil
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func modelName(v int64) string {
	if v == 0 {
		return "plain descriptors"
	}
	return "version " + strconv.FormatInt(v, 10)
}

func printModelDecision(e *env, d tagging.ModelDecision) {
	verdict := "refused"
	if d.Adopted {
		verdict = "adopted"
	}
	fmt.Fprintf(e.stdout, "%s %s %s → %s: %s: %s\n", d.At.Format("2006-01-02 15:04"), d.Action, modelName(d.From), modelName(d.To), verdict, d.Reason)
}

func newModelImportCmd(e *env) *cobra.Command {
	var lf libraryFlags
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Store a ψ model file as a new version (not yet in use)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			b, err := io.ReadAll(io.LimitReader(f, maxModelFile+1))
			f.Close()
			if err != nil {
				return fmt.Errorf("reading %s: %w", args[0], err)
			}
			if len(b) > maxModelFile {
				return fmt.Errorf("%s is larger than %d bytes: not a model file", args[0], maxModelFile)
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				info, err := l.ImportModel(cmd.Context(), b)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "imported %s as version %d (not in use: veil library model use %d)\n", args[0], info.Version, info.Version)
				return nil
			})
		},
	}
	lf.register(cmd)
	return cmd
}

func newModelUseCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "use VERSION",
		Short: "Adopt a version (or plain) if it measures at least as good on your names",
		Long: `use measures VERSION (a number from veil library model list, or plain for the
plain descriptors) against the space in use and adopts it only if it is at least
as good; either way it prints the decision with both measurements. A refusal
exits with status 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var v int64
			if args[0] != "plain" {
				var err error
				if v, err = strconv.ParseInt(args[0], 10, 64); err != nil || v < 1 {
					return fmt.Errorf("model version %q: want a version number from veil library model list, or plain", args[0])
				}
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				d, err := l.UseModel(cmd.Context(), v)
				if err != nil {
					return err
				}
				if asJSON {
					if err := writeJSON(e.stdout, d); err != nil {
						return err
					}
				} else {
					printModelDecision(e, d)
				}
				if !d.Adopted {
					return errors.New("not adopted: " + d.Reason)
				}
				return nil
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the decision as JSON")
	return cmd
}

func newModelRollbackCmd(e *env) *cobra.Command {
	var lf libraryFlags
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Return to the version in use before the current one was adopted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				d, err := l.RollbackModel(cmd.Context())
				if err != nil {
					return err
				}
				printModelDecision(e, d)
				return nil
			})
		},
	}
	lf.register(cmd)
	return cmd
}
