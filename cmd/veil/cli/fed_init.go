package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/fed/ops"
)

func newFedInitModelCmd(e *env) *cobra.Command {
	var out, features string
	var seed uint64
	var force, asJSON bool
	cmd := &cobra.Command{
		Use:   "init-model",
		Short: "Write a new federation's initial model (the head veil fed client trains)",
		Long: `Write the initial model of a new federation to --out: a checkpoint of the
embedding head that veil fed client trains (on --features, agegender by
default: face-api's public age/gender features; with the distillation loss),
initialised from --seed as veil train and veil fed sim initialise a new run.
Give it to veil fed coordinator --init. It has seen no data, so it is marked
public and spends no privacy.

  veil fed init-model --out init.ckpt
  veil fed coordinator --init init.ckpt --state coord.db --pki pki ...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out is required: where to write the checkpoint")
			}
			if _, err := os.Stat(out); err == nil && !force {
				return fmt.Errorf("%s exists; give --force to replace it", out)
			}
			ck, err := ops.InitialHead(ops.InitialHeadOptions{Features: features, Seed: seed})
			if err != nil {
				return fmt.Errorf("--features: %w", err)
			}
			if err := ck.Save(out); err != nil {
				return err
			}
			w, err := ops.WeightsFromCheckpoint(ck)
			if err != nil {
				return err
			}
			info := struct {
				Out      string `json:"out"`
				Features string `json:"features"`
				Seed     uint64 `json:"seed"`
				Params   int    `json:"params"`
			}{out, ck.Header.Model.Features, seed, w.Len()}
			if info.Features == "" {
				info.Features = "descriptor"
			}
			if asJSON {
				return writeJSON(e.stdout, info)
			}
			fmt.Fprintf(e.stdout, "initial model written to %s: embedding head on %s features, %d parameters, seed %d\n",
				out, info.Features, info.Params, seed)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "the checkpoint to write (required)")
	fl.StringVar(&features, "features", "agegender", "what the head reads: agegender (what veil fed client trains on) or descriptor")
	fl.Uint64Var(&seed, "seed", 1, "seed of the initialisation")
	fl.BoolVar(&force, "force", false, "replace --out if it exists")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
