package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/collab"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/tagging/fedjoin"
)

func newFedInitModelCmd(e *env) *cobra.Command {
	var out, features, model string
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
public and spends no privacy. With --model psi it is instead ψ(x) = x + r(x) on
the 128-value face descriptor, at the identity (r's last layer zero): the model
libraries train with veil library join.

  veil fed init-model --out init.ckpt
  veil fed coordinator --init init.ckpt --state coord.db --pki pki ...
  veil fed init-model --model psi --out psi.ckpt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out is required: where to write the checkpoint")
			}
			if _, err := os.Stat(out); err == nil && !force {
				return fmt.Errorf("%s exists; give --force to replace it", out)
			}
			ck, err := initialModel(model, features, seed)
			if err != nil {
				return err
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
			what := "embedding head"
			if model == fedjoin.ModelKind {
				what = "ψ at the identity"
			}
			fmt.Fprintf(e.stdout, "initial model written to %s: %s on %s features, %d parameters, seed %d\n",
				out, what, info.Features, info.Params, seed)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "the checkpoint to write (required)")
	fl.StringVar(&model, "model", "head", "the network: head (what veil fed client trains) or psi (ψ on the face descriptor, at the identity: what veil library join trains)")
	fl.StringVar(&features, "features", "agegender", "what the head reads: agegender (what veil fed client trains on) or descriptor")
	fl.Uint64Var(&seed, "seed", 1, "seed of the initialisation")
	fl.BoolVar(&force, "force", false, "replace --out if it exists")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// initialModel makes the initial checkpoint of --model.
func initialModel(model, features string, seed uint64) (*checkpoint.Checkpoint, error) {
	switch model {
	case "head":
		ck, err := ops.InitialHead(ops.InitialHeadOptions{Features: features, Seed: seed})
		if err != nil {
			return nil, fmt.Errorf("--features: %w", err)
		}
		return ck, nil
	case fedjoin.ModelKind:
		return fedjoin.InitialModel(collab.PsiOptions{Seed: seed})
	}
	return nil, fmt.Errorf("--model %q: want head or psi", model)
}
