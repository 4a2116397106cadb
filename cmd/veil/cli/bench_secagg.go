package cli

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/internal/progress"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
	"github.com/veil-privacy/veil/secagg/secaggbench"
)

// paillierBenchReport is the JSON output of `veil bench paillier`.
type paillierBenchReport struct {
	*secaggbench.PaillierReport
	LoadAverage string `json:"load_average,omitempty"`
}

// keyBitsCheck checks --bits: at least paillier.MinBits, unless the
// command's --insecure-test-key-size allows smaller (test) keys.
func keyBitsCheck(bits int, insecure bool) flagCheck {
	min := paillier.MinBits
	if insecure {
		min = paillier.MinInsecureTestBits
	}
	return flagCheck{"bits", bits >= min, fmt.Sprintf("at least %d (a smaller modulus can be factored)", min), bits}
}

func newBenchPaillierCmd(e *env) *cobra.Command {
	var (
		bits, samples         int
		randomness            string
		asJSON, quiet, unsafe bool
	)
	cmd := &cobra.Command{
		Use:   "paillier",
		Short: "Measure Paillier key generation, encryption, decryption and homomorphic operations",
		Example: `  veil bench paillier
  veil bench paillier --bits 3072 --samples 50 --json`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFlags(oneOf("randomness", randomness, "full", "short-exponent"), atLeast("samples", samples, 1), keyBitsCheck(bits, unsafe)); err != nil {
				return err
			}
			kind, err := paillier.ParseRandomnessKind(randomness)
			if err != nil {
				return err
			}
			rep, err := secaggbench.RunPaillier(secaggbench.PaillierParams{Key: paillier.KeyOptions{Bits: bits, AllowInsecureTestKeySize: unsafe},
				Samples: samples, Kind: kind, Reporter: reporter(e, quiet)})
			if err != nil {
				return err
			}
			r := paillierBenchReport{PaillierReport: rep, LoadAverage: loadAverage()}
			if asJSON {
				return writeJSON(e.stdout, r)
			}
			fmt.Fprintf(e.stdout, "Paillier %d-bit on %d cores (baseline: %s)\n", r.Bits, r.Cores, r.Baseline)
			fmt.Fprintf(e.stdout, "  key generation            %10.3f s\n", r.KeygenS)
			fmt.Fprintf(e.stdout, "  encrypt, full             %10.1f /s  (%.2f× baseline)\n", r.EncryptFullPerS, r.EncryptFullRatio)
			fmt.Fprintf(e.stdout, "  encrypt, short exponent   %10.1f /s  (%d-bit exponent)\n", r.EncryptShortExponentPerS, r.ShortExponentBits)
			fmt.Fprintf(e.stdout, "  encrypt, precomputed      %10.0f /s  (%.0f× baseline)\n", r.EncryptPrecomputedPerS, r.EncryptPrecomputedRatio)
			fmt.Fprintf(e.stdout, "  decrypt                   %10.1f /s  (%.2f× baseline; one decryption %.2f ms)\n", r.DecryptPerS, r.DecryptRatio, r.DecryptSingleMS)
			fmt.Fprintf(e.stdout, "  add                       %10.0f /s  (%.2f× baseline)\n", r.AddPerS, r.AddRatio)
			fmt.Fprintf(e.stdout, "  scalar multiply (%d-bit)  %10.0f /s\n", r.ScalarBits, r.ScalarMulPerS)
			return nil
		},
	}
	cmd.Flags().IntVar(&bits, "bits", paillier.DefaultBits, "modulus size in bits (2048 or 3072)")
	cmd.Flags().IntVar(&samples, "samples", 200, "operations timed per measurement (precomputed and additive operations use 10× more)")
	cmd.Flags().StringVar(&randomness, "randomness", "short-exponent", "variant reported as encrypt_per_s: full or short-exponent (both are always measured)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON report")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress output on stderr")
	insecureKeyFlag(cmd, &unsafe)
	return cmd
}

// insecureKeyFlag registers the hidden --insecure-test-key-size flag, which
// lets the CLI tests time small (factorable) keys quickly. It is hidden
// from --help and named for what it is; the benchmarks protect no data.
func insecureKeyFlag(cmd *cobra.Command, v *bool) {
	cmd.Flags().BoolVar(v, "insecure-test-key-size", false, "allow moduli below 2048 bits (tests only: such keys can be factored)")
	_ = cmd.Flags().MarkHidden("insecure-test-key-size")
}

// status prints a line about the next step on stderr unless quiet.
func status(e *env, quiet bool, format string, args ...any) {
	if !quiet {
		fmt.Fprintf(e.stderr, format+"\n", args...)
	}
}

// barProgress returns a paillier.Progress that drives a progress bar on
// stderr, started at the first report (when the total is known), and a
// function that finishes the bar once the operation has returned.
func barProgress(e *env, label string, quiet bool) (paillier.Progress, func()) {
	var (
		once sync.Once
		bar  *progress.Bar
	)
	report := func(done, total int) {
		once.Do(func() { bar = progress.New(e.stderr, label, total, quiet) })
		bar.Add(1)
	}
	return report, func() { bar.Done() }
}

// dpheBenchReport is the JSON output of `veil bench dphe`.
type dpheBenchReport struct {
	*secaggbench.DPHEReport
	LoadAverage string `json:"load_average,omitempty"`
}

// loadAverage returns the 1-, 5- and 15-minute load averages on Linux, so
// readers can tell figures measured on a busy machine; empty elsewhere.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func newBenchDPHECmd(e *env) *cobra.Command {
	var (
		dim, classes, users, bits, denseSample, fracBits int
		sparsity                                         float64
		randomness                                       string
		asJSON, quiet, unsafe                            bool
	)
	cmd := &cobra.Command{
		Use:   "dphe",
		Short: "Measure DPHE secure aggregation of sparse updates against dense element-wise Paillier",
		Example: `  veil bench dphe
  veil bench dphe --users 10 --sparsity 0.99 --json`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := checkFlags(oneOf("randomness", randomness, "full", "short-exponent"), atLeast("dim", dim, 1), atLeast("classes", classes, 1),
				keyBitsCheck(bits, unsafe), intIn("frac-bits", fracBits, 0, paillier.MaxFracBits))
			if err != nil {
				return err
			}
			kind, err := paillier.ParseRandomnessKind(randomness)
			if err != nil {
				return err
			}
			switch {
			case users < dphe.MinUsers:
				return fmt.Errorf("--users must be at least %d, got %d", dphe.MinUsers, users)
			case !(sparsity >= 0 && sparsity < 1):
				return fmt.Errorf("--sparsity must be in [0, 1), got %v", sparsity)
			case denseSample < 2000:
				return fmt.Errorf("--dense-sample must be at least 2000, got %d", denseSample)
			}
			rep, err := secaggbench.RunDPHE(secaggbench.DPHEParams{Dim: dim, Classes: classes, Users: users, DenseSample: denseSample, FracBits: fracBits,
				Sparsity: sparsity, Kind: kind, Key: paillier.KeyOptions{Bits: bits, AllowInsecureTestKeySize: unsafe}, Reporter: reporter(e, quiet)})
			if err != nil {
				return err
			}
			r := dpheBenchReport{DPHEReport: rep, LoadAverage: loadAverage()}
			if asJSON {
				return writeJSON(e.stdout, r)
			}
			printDPHEBench(e, rep)
			return nil
		},
	}
	cmd.Flags().IntVar(&dim, "dim", 2048, "feature dimension of the classifier")
	cmd.Flags().IntVar(&classes, "classes", 101, "number of classes (weights = dim × classes)")
	cmd.Flags().IntVar(&users, "users", 5, "number of users (at least 3)")
	cmd.Flags().Float64Var(&sparsity, "sparsity", 0.9, "fraction of zero weights in each user's update")
	cmd.Flags().IntVar(&bits, "bits", paillier.DefaultBits, "Paillier modulus size")
	cmd.Flags().IntVar(&denseSample, "dense-sample", 2000, "dense encryptions measured to extrapolate the dense figures (at least 2000)")
	cmd.Flags().IntVar(&fracBits, "frac-bits", dphe.DefaultFracBits, "fixed-point scale 2^frac-bits")
	cmd.Flags().StringVar(&randomness, "randomness", "short-exponent", "Paillier randomness variant: full or short-exponent")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON report")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress output on stderr")
	insecureKeyFlag(cmd, &unsafe)
	return cmd
}

// reporter drives progress bars and status lines on stderr unless quiet.
func reporter(e *env, quiet bool) secaggbench.Reporter {
	return secaggbench.Reporter{
		Progress: func(label string) (paillier.Progress, func()) { return barProgress(e, label, quiet) },
		Status:   func(format string, args ...any) { status(e, quiet, format, args...) },
	}
}

func printDPHEBench(e *env, r *secaggbench.DPHEReport) {
	fmt.Fprintf(e.stdout, "DPHE: %d×%d weights, %d users, sparsity %.2f, capacity M=%d, %d-bit key, %s randomness, %d cores\n",
		r.Dim, r.Classes, r.Users, r.Sparsity, r.Capacity, r.Bits, r.Randomness, r.Cores)
	fmt.Fprintf(e.stdout, "  per user: encrypt %.2f s, %d bytes in %d message(s)\n", r.UserEncryptS, r.UserBytes, r.UserMessages)
	fmt.Fprintf(e.stdout, "  each contribution: clip %g, noise σ = %g, threshold %g·σC: ε = %s per user's whole update at δ = 1e-5\n", r.Clip, r.NoiseMultiplier, r.Threshold, dp.FormatEpsilon(r.ContributionEpsilon))
	fmt.Fprintf(e.stdout, "  aggregate %.2f s, decrypt %.2f s, max |sum − noiseless sum| %.3g (the noise)\n", r.AggregateS, r.DecryptS, r.SumMaxAbsError)
	fmt.Fprintf(e.stdout, "  dense element-wise per user: encrypt %.2f s, %d bytes (extrapolated from %d encryptions)\n", r.DenseUserEncryptS, r.DenseUserBytes, r.DenseSample)
	fmt.Fprintf(e.stdout, "  speed-up of user encryption: %.1f×\n", r.Speedup)
}
