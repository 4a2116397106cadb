package cli

import (
	"fmt"
	"math"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/secagg/paillier"
	"github.com/veil-privacy/veil/secagg/quant"
	"github.com/veil-privacy/veil/secagg/secaggbench"
)

// secaggBenchReport is the JSON output of `veil bench secagg`.
type secaggBenchReport struct {
	Length      int                          `json:"length"`
	Cores       int                          `json:"cores"`
	Masking     []*secaggbench.MaskingReport `json:"masking,omitempty"`
	DPHE        *secaggbench.PackedReport    `json:"dphe,omitempty"`
	LoadAverage string                       `json:"load_average,omitempty"`
}

// secaggBenchFlags are veil bench secagg's flags.
type secaggBenchFlags struct {
	clients                                     []int
	length, block, timed, dpheUsers, bits, frac int
	fraction, selectEps                         float64
	randomness                                  string
	noMasking, noDPHE, asJSON, quiet, unsafe    bool
}

func newBenchSecaggCmd(e *env) *cobra.Command {
	f := &secaggBenchFlags{clients: []int{8, 20, 100}, length: 557824, block: 1 << 14, timed: 2, dpheUsers: 8, bits: paillier.DefaultBits,
		frac: 24, fraction: 0.1, selectEps: 1, randomness: "short-exponent"}
	cmd := &cobra.Command{
		Use:   "secagg",
		Short: "Measure secure aggregation per client and per round: masking (SecAgg+) and DPHE on DP-selected, packed sparse updates",
		Long: `Measure both secure-aggregation schemes in one process (no network), for
head-sized updates: masking secure aggregation (secagg/quant's encoding with
distributed discrete Gaussian noise, then secagg/masking) for each --clients n,
with SecAgg+'s graph degree k = min(n−1, 2⌈log₂ n⌉) and threshold
t = ⌊2(k+1)/3⌋ + 1, one client in ten dropping out after sharing its keys; and
DPHE on sparse updates whose blocks each user selects by Irene's sparse
vector, with several values packed per Paillier plaintext, against the same
unpacked and with the support in the clear.`,
		Example: `  veil bench secagg
  veil bench secagg --clients 8 --no-dphe --json`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchSecagg(e, f) },
	}
	fl := cmd.Flags()
	fl.IntSliceVar(&f.clients, "clients", f.clients, "numbers of clients of the masking rounds measured")
	fl.IntVar(&f.length, "length", f.length, "values per update (the head: 557,824)")
	fl.IntVar(&f.block, "block", f.block, "Walsh–Hadamard block size of the masking encoding (a power of two; 0: one block)")
	fl.IntVar(&f.timed, "timed", f.timed, "clients whose work is timed per masking round (the others run untimed)")
	fl.IntVar(&f.dpheUsers, "dphe-users", f.dpheUsers, "users of the DPHE round (at least 3)")
	fl.Float64Var(&f.fraction, "block-fraction", f.fraction, "fraction of the packed blocks a DPHE user selects at most")
	fl.Float64Var(&f.selectEps, "select-epsilon", f.selectEps, "ε of each DPHE user's selection (Irene's parameter; the charge is its proven cost)")
	fl.IntVar(&f.bits, "bits", f.bits, "Paillier modulus size")
	fl.IntVar(&f.frac, "frac-bits", f.frac, "DPHE's fixed-point scale 2^frac-bits")
	fl.StringVar(&f.randomness, "randomness", f.randomness, "Paillier randomness variant: full or short-exponent")
	fl.BoolVar(&f.noMasking, "no-masking", false, "skip the masking rounds")
	fl.BoolVar(&f.noDPHE, "no-dphe", false, "skip the DPHE round")
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON report")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress output on stderr")
	insecureKeyFlag(cmd, &f.unsafe)
	return cmd
}

func runBenchSecagg(e *env, f *secaggBenchFlags) error {
	err := checkFlags(atLeast("length", f.length, 1), atLeast("timed", f.timed, 1), atLeast("dphe-users", f.dpheUsers, 3),
		keyBitsCheck(f.bits, f.unsafe), intIn("frac-bits", f.frac, 1, 40), oneOf("randomness", f.randomness, "full", "short-exponent"))
	if err != nil {
		return err
	}
	for _, n := range f.clients {
		if n < 3 {
			return fmt.Errorf("--clients: a round needs at least 3 clients, got %d", n)
		}
	}
	r := &secaggBenchReport{Length: f.length, Cores: runtime.GOMAXPROCS(0)}
	if !f.noMasking {
		if r.Masking, err = benchMaskingRounds(e, f); err != nil {
			return err
		}
	}
	if !f.noDPHE {
		kind, err := paillier.ParseRandomnessKind(f.randomness)
		if err != nil {
			return err
		}
		r.DPHE, err = secaggbench.RunPackedDPHE(secaggbench.PackedParams{Users: f.dpheUsers, Coordinates: f.length, BlockFraction: f.fraction,
			Bound: 8, MaxUsers: max(100, f.dpheUsers), FracBits: f.frac, SelectEpsilon: f.selectEps, UnpackedSample: 200, Kind: kind,
			Key: paillier.KeyOptions{Bits: f.bits, AllowInsecureTestKeySize: f.unsafe}, Reporter: reporter(e, f.quiet)})
		if err != nil {
			return err
		}
	}
	r.LoadAverage = loadAverage()
	if f.asJSON {
		return writeJSON(e.stdout, r)
	}
	printSecaggBench(e, r)
	return nil
}

// benchMaskingRounds measures one masking round per --clients value.
func benchMaskingRounds(e *env, f *secaggBenchFlags) ([]*secaggbench.MaskingReport, error) {
	var out []*secaggbench.MaskingReport
	for _, n := range f.clients {
		k, t := secaggbench.Graph(n)
		rep, err := secaggbench.RunMasking(secaggbench.MaskingParams{Clients: n, Degree: k, Threshold: t, Length: f.length, Dropped: n / 10,
			Sample: min(f.timed, n-n/10), Seed: uint64(n),
			Quant:  quant.Config{Block: f.block, ClipNorm: 1, Gamma: 1e-4, Beta: math.Exp(-0.5), Bits: 32, Noise: 20, WrapProb: 1e-9},
			Status: func(format string, args ...any) { status(e, f.quiet, format, args...) }})
		if err != nil {
			return nil, err
		}
		out = append(out, rep)
	}
	return out, nil
}

func printSecaggBench(e *env, r *secaggBenchReport) {
	w := e.stdout
	fmt.Fprintf(w, "secure aggregation of %d values, %d cores (processor seconds)\n", r.Length, r.Cores)
	for _, m := range r.Masking {
		fmt.Fprintf(w, "  masking n=%d k=%d t=%d (%d dropped, tolerates %d colluding neighbours): client %.3f s (encode %.3f, protocol %.3f), %d bytes = %.3f× plaintext; server unmask %.3f s, decode %.3f s\n",
			m.Clients, m.Degree, m.Threshold, m.Dropped, m.ToleratedColluders, m.ClientCPUS, m.ClientEncodeCPUS, m.ClientProtocolCPUS,
			m.ClientBytes, m.BytesRatio, m.ServerUnmaskCPUS, m.ServerDecodeCPUS)
	}
	if d := r.DPHE; d != nil {
		fmt.Fprintf(w, "  DPHE %d users, %d lanes of %d bits per %d-bit plaintext, ≤%d of %d blocks each (union %d), ε = %.4g per user's whole update at δ = 1e-5\n",
			d.Users, d.Lanes, d.LaneBits, d.Bits, d.SelectBlocks, d.Blocks, d.UnionBlocks, d.ContributionEpsilon)
		fmt.Fprintf(w, "    packed:   user %.2f s, %d bytes; aggregate %.2f s, %d bytes; decrypt %.2f s\n",
			d.UserEncryptCPUS, d.UserBytes, d.AggregateCPUS, d.AggregateBytes, d.DecryptCPUS)
		fmt.Fprintf(w, "    unpacked: user %.2f s, %d bytes; aggregate %d bytes; decrypt %.2f s (derived)\n",
			d.UnpackedUserEncryptCPUS, d.UnpackedUserBytes, d.UnpackedAggregateBytes, d.UnpackedDecryptCPUS)
		fmt.Fprintf(w, "    support in the clear: user %d bytes; aggregate %d bytes; decrypt %.2f s (derived)\n",
			d.ClearUserBytes, d.ClearAggregateBytes, d.ClearDecryptCPUS)
	}
}
