package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/veil-privacy/veil/fed/sim"
)

// fedSimDPHE are veil fed sim's --secagg dphe flags.
type fedSimDPHE struct {
	count             int
	selEps, threshold float64
	noise             float64
}

// fedSimDPHEFlags are the flags that apply to --secagg dphe only.
var fedSimDPHEFlags = []string{"dphe-count", "dphe-selection-epsilon", "dphe-threshold", "dphe-noise-multiplier"}

func (d *fedSimDPHE) register(fl *pflag.FlagSet) {
	fl.IntVar(&d.count, "dphe-count", 0, "--secagg dphe: blocks of coordinates each client's DP selection sends per round (0: a tenth of the blocks)")
	fl.Float64Var(&d.selEps, "dphe-selection-epsilon", 0.1, "--secagg dphe: Irene's ε of each client's selection of blocks (charged every round; see docs/dphe-settings.md)")
	fl.Float64Var(&d.threshold, "dphe-threshold", 0, "--secagg dphe: the selection's threshold on a block's norm")
	fl.Float64Var(&d.noise, "dphe-noise-multiplier", 0, "--secagg dphe: σ of each client's release, noise σ·--clip (0: the smallest with which --rounds rounds spend --target-epsilon)")
}

// refuse refuses the DPHE flags under another mode.
func (d *fedSimDPHE) refuse(changed func(string) bool, mode string) error {
	for _, n := range fedSimDPHEFlags {
		if changed(n) {
			return fmt.Errorf("fed sim: --%s applies to --secagg dphe only, not %s", n, mode)
		}
	}
	return nil
}

// check refuses the flags that do not apply to --secagg dphe.
func (d *fedSimDPHE) check(changed func(string) bool) error {
	for _, n := range []string{"strategy", "momentum", "alone", "no-dp", "drop-per-round", "min-honest", "max-per-identity"} {
		if changed(n) {
			return fmt.Errorf("fed sim: --%s does not apply to --secagg dphe (FedAvg rounds, each client's whole update released with its own noise through the key generator)", n)
		}
	}
	return nil
}

// apply makes o a DPHE simulation, in one process unless network: 4
// rounds of 5 local epochs, rounds of at least 3 contributions and a
// round's deadline of 2 hours unless given (docs/dphe-settings.md).
func (d *fedSimDPHE) apply(o *sim.Options, changed func(string) bool, network bool) {
	o.SecAgg = "dphe"
	o.DPHE = &sim.DPHE{Count: d.count, NoiseMultiplier: d.noise, SelectionEpsilon: d.selEps, SelectionThreshold: d.threshold, InProcess: !network}
	if !changed("rounds") {
		o.Rounds = 4
	}
	if !changed("local-epochs") {
		o.LocalEpochs = 5
	}
	if !changed("min-updates") {
		o.MinUpdates = 0 // the key generator's 3
	}
	if !changed("round-timeout") {
		// 8 clients' 5 local epochs, 2 at a time, took over 10 minutes a
		// round on a loaded 2-core machine: a round waits for its clients.
		o.RoundTimeout = 2 * time.Hour
	}
}

// printDPHE prints a DPHE simulation's release.
func printDPHE(w io.Writer, d *sim.DPHEReport) {
	key := fmt.Sprintf("%d-bit key", d.KeyBits)
	if d.KeyBits == 0 {
		key = "in one process, nothing encrypted"
	}
	fmt.Fprintf(w, "DPHE: %d of %d blocks of %d coordinates per client and round, σ = %.4f, C = %g, selection ε = %g, %s; each release protects %s\n",
		d.Count, d.Blocks, d.Lanes, d.NoiseMultiplier, d.Clip, d.SelectionEpsilon, key, d.Unit)
}
