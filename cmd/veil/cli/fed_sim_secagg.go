package cli

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/ddpsim"
	"github.com/veil-privacy/veil/fed/sim"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// fedSimSecagg are veil fed sim's secure-aggregation flags.
type fedSimSecagg struct {
	mode                 string
	dropPerRound, honest int
	network              bool
	dphe                 fedSimDPHE
}

func (s *fedSimSecagg) register(fl *pflag.FlagSet) {
	fl.StringVar(&s.mode, "secagg", "off", "off (each client's update in plaintext, all of its DP noise its own) or masking: distributed DP-SGD as secure aggregation by masking reveals it (each round, each client's Poisson-sampled, per-identity-clipped gradient sum with its discrete Gaussian noise share, summed modulo 2^32; the coordinator takes veil train's step with the sum). Masking defaults: --batch 512 over the federation, --rounds 20·⌈1/q⌉, --ema 0.95 of the steps, as veil train's main job. dphe: FedAvg through a key generator, coordinator and clients over mutual TLS, each client's whole update clipped to --clip, sparsified by a DP selection and noised by the client, encrypted with DPHE (Paillier), only the sum decrypted (in one process, the releases added as the key generator reveals their sum; --network: through the real protocol); defaults --rounds 4, --local-epochs 5, --round-timeout 2h")
	s.dphe.register(fl)
	fl.IntVar(&s.dropPerRound, "drop-per-round", 1, "--secagg masking: clients that drop out of each round before sending")
	fl.BoolVar(&s.network, "network", false, "--secagg dphe: run the same rounds through a key generator, a coordinator and one client per part over gRPC with mutual TLS (a 2048-bit Paillier key; each contribution encrypted). --secagg masking: run the same distributed DP-SGD through the real protocol (a coordinator and one client per part over gRPC with mutual TLS, SecAgg+ masking, each client's own ledger) instead of summing the encodings in one process; no drop-outs (--drop-per-round 0), every round needs T clients")
	fl.IntVar(&s.honest, "min-honest", 0, "--secagg masking: T, the honest clients each client trusts to be in every unmasked sum (the threshold; 0: clients − drop-per-round)")
}

// check refuses settings that do not apply to the mode, before any data
// are read.
func (s *fedSimSecagg) check(changed func(string) bool, clients int) error {
	switch s.mode {
	case "off":
		for _, n := range []string{"drop-per-round", "min-honest"} {
			if changed(n) {
				return fmt.Errorf("fed sim: --%s applies to --secagg masking only", n)
			}
		}
		if changed("network") {
			return errors.New("fed sim: --network applies to --secagg masking or dphe only")
		}
		return s.dphe.refuse(changed, "off")
	case "dphe":
		return s.dphe.check(changed)
	case "masking":
		if err := s.dphe.refuse(changed, "masking"); err != nil {
			return err
		}
	default:
		return fmt.Errorf("fed sim: --secagg %q: want off, masking or dphe", s.mode)
	}
	for _, n := range []string{"strategy", "local-epochs", "server-lr", "momentum", "dropout", "stragglers", "alone", "no-dp", "alpha", "curve", "round-timeout", "min-updates", "parallel", "privacy-unit"} {
		if changed(n) {
			return fmt.Errorf("fed sim: --%s does not apply to --secagg masking (one DP-SGD step per round per identity, veil train's optimiser on the coordinator)", n)
		}
	}
	if s.network {
		if changed("drop-per-round") && s.dropPerRound != 0 {
			return errors.New("fed sim: --network simulates no drop-outs: --drop-per-round must be 0")
		}
		s.dropPerRound = 0
	}
	if s.dropPerRound < 0 || s.dropPerRound >= clients {
		return fmt.Errorf("fed sim: --drop-per-round must be in [0, %d) (the --clients), got %d", clients, s.dropPerRound)
	}
	if s.honest < 0 || s.honest > clients-s.dropPerRound {
		return fmt.Errorf("fed sim: --min-honest must be in [0, %d] (the clients left after --drop-per-round), got %d", clients-s.dropPerRound, s.honest)
	}
	return nil
}

// run runs veil fed sim --secagg masking (data loaded by the caller).
func (s *fedSimSecagg) run(cmd *cobra.Command, e *env, f *fedSimFlags, o sim.Options) error {
	changed := cmd.Flags().Changed
	optim := o.Optim
	optim.Augment = true
	if !changed("batch") {
		optim.Batch = 512
	}
	optim.EMA = 0.95
	if changed("ema") {
		optim.EMA = f.ema
	}
	rounds := 0
	if changed("rounds") {
		rounds = f.rounds
	}
	if s.network {
		return s.runNetwork(cmd, e, f, o, optim, rounds)
	}
	rep, err := ddpsim.Run(cmd.Context(), ddpsim.Options{Data: o.Data, Model: o.Model, Optim: optim, Clients: f.clients, PartitionSeed: f.partitionSeed,
		Epsilon: f.targetEps, Delta: f.delta, Clip: f.clip, Rounds: rounds, Drop: s.dropPerRound, MinHonest: s.honest,
		MaxPerIdentity: f.maxPerIdentity, Seed: f.seed, Dir: f.dir, Progress: o.Progress})
	if err != nil {
		return fmt.Errorf("fed sim: %w", err)
	}
	if f.json {
		return writeJSON(e.stdout, rep)
	}
	printMasking(e.stdout, rep)
	return nil
}

func printMasking(w io.Writer, r *ddpsim.Report) {
	fmt.Fprintf(w, "distributed DP-SGD under masking: %d clients, %d rounds, %d dropping out of each, T = %d\n", r.Clients, r.Rounds, r.Drop, r.MinHonest)
	fmt.Fprintf(w, "LFW development pairs: accuracy %.4f (threshold %.3f); as initialised %.4f\n", r.DevAccuracy, r.Threshold0, r.InitAccuracy)
	fmt.Fprintf(w, "q = %.4f, noise share σ = %d lattice units, effective σ = %.5f (central DP-SGD at the same ε: %.5f)\n",
		r.SamplingRate, r.NoiseShare, r.EffectiveMultiplier, r.CentralMultiplier)
	worst := 0.0
	for _, v := range r.EpsilonPerClient {
		worst = max(worst, v)
	}
	fmt.Fprintf(w, "privacy: ε ≤ %s at δ = %g per %s per client; %s\n", dp.FormatEpsilon(worst), r.Delta, r.PrivacyUnit, r.Assumption)
	fmt.Fprintf(w, "%d parameters (%d encoded, %d bits); %.0f s\n", r.Parameters, r.Padded, r.Bits, r.WallS)
}

// runNetwork runs veil fed sim --secagg masking --network: the same
// distributed DP-SGD through the real protocol (sim.Options.DDP).
func (s *fedSimSecagg) runNetwork(cmd *cobra.Command, e *env, f *fedSimFlags, o sim.Options, optim training.OptimOptions, rounds int) error {
	if rounds == 0 {
		id, ok := o.Data.Train.(train.Identified)
		if !ok {
			return errors.New("fed sim: the training data must be labelled by identity")
		}
		q := math.Min(1, float64(optim.Batch)/float64(id.Identities()))
		rounds = ddpsim.DefaultEpochs * int(math.Ceil(1/q))
	}
	o.Optim, o.Rounds, o.EMA, o.SecAgg = optim, rounds, optim.EMA, "masking"
	// A round needs its T clients (sim.DDP sets it).
	o.DDP, o.MinUpdates = &sim.DDP{Batch: optim.Batch, MinHonest: s.honest}, 0
	if o.DP != nil {
		o.DP.Unit = "identity"
	}
	rep, err := sim.Run(cmd.Context(), o)
	if err != nil {
		return fmt.Errorf("fed sim: %w", err)
	}
	if f.json {
		return writeJSON(e.stdout, rep)
	}
	printFedSim(e.stdout, rep)
	if m := rep.Mechanism; m != nil {
		fmt.Fprintf(e.stdout, "model: %d steps, ε = %s at δ = %g per identity; %s\n", m.Steps, dp.FormatEpsilon(m.Epsilon), rep.Delta, m.Mechanism)
	}
	return nil
}
