package cli

import (
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/internal/progress"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
	"github.com/veil-privacy/veil/secagg/secaggbench"
)

// Reference figures for python-paillier, measured (not by this command) with
// secagg/paillier/testdata/phe_baseline.py: python-paillier 1.5.0 (its git
// tag 1.5.0) with gmpy2 2.1.2 on GMP 6.2.1 (Debian bookworm's
// python3-gmpy2 2.1.2-2+b1) under CPython 3.11.2, one process, 2048-bit key,
// raw operations (encryption with fresh r, CRT decryption, one homomorphic
// addition), on 2026-11-23 on the project's 2-core AMD EPYC virtual
// machine: the median of three runs of process CPU time per operation,
// which is the wall time of one idle core (the machine was shared, load
// average about 20, so wall times were 3–4× longer).
const (
	pyEncryptS = 12.25e-3
	pyDecryptS = 3.67e-3
	pyAddS     = 12.1e-6
)

// paillierBenchReport is the JSON output of `veil bench paillier`.
type paillierBenchReport struct {
	Bits       int     `json:"bits"`
	Randomness string  `json:"randomness"`
	Cores      int     `json:"cores"`
	KeygenS    float64 `json:"keygen_s"`
	// EncryptPerS is full encryption with fresh randomness on every core, for Randomness.
	EncryptPerS              float64 `json:"encrypt_per_s"`
	EncryptFullPerS          float64 `json:"encrypt_full_per_s"`
	EncryptShortExponentPerS float64 `json:"encrypt_short_exponent_per_s"`
	ShortExponentBits        int     `json:"short_exponent_bits"`
	EncryptPrecomputedPerS   float64 `json:"encrypt_precomputed_per_s"`
	DecryptPerS              float64 `json:"decrypt_per_s"`
	DecryptSingleMS          float64 `json:"decrypt_single_ms"`
	AddPerS                  float64 `json:"add_per_s"`
	ScalarMulPerS            float64 `json:"scalar_mul_per_s"`
	ScalarBits               int     `json:"scalar_bits"`
	Samples                  int     `json:"samples"`
	LoadAverage              string  `json:"load_average,omitempty"`
	Baseline                 string  `json:"baseline"`
	EncryptRatio             float64 `json:"encrypt_vs_baseline"`
	EncryptFullRatio         float64 `json:"encrypt_full_vs_baseline"`
	EncryptPrecomputedRatio  float64 `json:"encrypt_precomputed_vs_baseline"`
	DecryptRatio             float64 `json:"decrypt_vs_baseline"`
	AddRatio                 float64 `json:"add_vs_baseline"`
	// CPU holds operations per CPU-second of this process: what one core
	// does when it is not shared. PerCoreRatio compares those with the
	// single-process baseline.
	CPU          paillierCPURates `json:"per_cpu_second"`
	PerCoreRatio paillierCPURates `json:"per_core_vs_baseline"`
}

// paillierCPURates are operations per process CPU-second.
type paillierCPURates struct {
	EncryptFull          float64 `json:"encrypt_full"`
	EncryptShortExponent float64 `json:"encrypt_short_exponent"`
	EncryptPrecomputed   float64 `json:"encrypt_precomputed"`
	Decrypt              float64 `json:"decrypt"`
	Add                  float64 `json:"add"`
	ScalarMul            float64 `json:"scalar_mul"`
}

const baselineNote = "python-paillier 1.5.0 with gmpy2 2.1.2 (GMP 6.2.1), CPython 3.11.2, 2048-bit key, one core: 12.25 ms encrypt, 3.67 ms decrypt, 12.1 µs add (CPU time per raw operation, median of 3 runs of secagg/paillier/testdata/phe_baseline.py on a 2-core AMD EPYC VM, 2026-11-23); not measured by this command"

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
			r, err := benchPaillier(e, paillier.KeyOptions{Bits: bits, AllowInsecureTestKeySize: unsafe}, samples, kind, quiet)
			if err != nil {
				return err
			}
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

func perSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func benchPaillier(e *env, keyOpts paillier.KeyOptions, samples int, kind paillier.RandomnessKind, quiet bool) (*paillierBenchReport, error) {
	bits := keyOpts.Bits
	r := &paillierBenchReport{Bits: bits, Randomness: kind.String(), Cores: runtime.GOMAXPROCS(0), Samples: samples, Baseline: baselineNote, ScalarBits: 64}
	status(e, quiet, "generating a %d-bit key...", bits)
	t0 := time.Now()
	var c0 time.Duration
	sk, err := paillier.GenerateKey(keyOpts)
	if err != nil {
		return nil, err
	}
	r.KeygenS = time.Since(t0).Seconds()
	pk := sk.Public()
	rng := mrand.New(mrand.NewPCG(1, 2))
	// Fixed-point style plaintexts, half of them negative (encoded as n − |v|).
	fp, err := paillier.NewFixedPoint(pk, 32)
	if err != nil {
		return nil, err
	}
	plain := make([]*big.Int, samples)
	for i := range plain {
		if plain[i], err = fp.Encode(rng.NormFloat64()); err != nil {
			return nil, err
		}
	}
	for _, k := range []paillier.RandomnessKind{paillier.RandomnessFull, paillier.RandomnessShortExponent} {
		enc, err := paillier.NewEncrypter(pk, paillier.EncrypterOptions{Randomness: k, PoolSize: 1})
		if err != nil {
			return nil, err
		}
		report, finish := barProgress(e, fmt.Sprintf("encrypting %d values (%s randomness, every core)", samples, k), quiet)
		t0, c0 = time.Now(), processCPU()
		_, err = enc.EncryptVectorProgress(plain, report)
		rate := perSecond(samples, time.Since(t0))
		cpuRate := perSecond(samples, processCPU()-c0)
		finish()
		if err != nil {
			return nil, err
		}
		if k == paillier.RandomnessFull {
			r.EncryptFullPerS = rate
			r.CPU.EncryptFull = cpuRate
		} else {
			r.EncryptShortExponentPerS = rate
			r.CPU.EncryptShortExponent = cpuRate
			r.ShortExponentBits = (bits + 1) / 2
		}
		if k == kind {
			r.EncryptPerS = rate
		}
	}
	// Online step: precompute randomness (every core), then time Encrypt alone on one goroutine.
	nPre := 10 * samples
	enc, err := paillier.NewEncrypter(pk, paillier.EncrypterOptions{Randomness: kind, PoolSize: nPre})
	if err != nil {
		return nil, err
	}
	status(e, quiet, "precomputing %d randomness values...", nPre)
	if err := enc.Precompute(nPre); err != nil {
		return nil, err
	}
	cts := make([]*paillier.Ciphertext, nPre)
	t0, c0 = time.Now(), processCPU()
	for i := 0; i < nPre; i++ {
		if cts[i], err = enc.Encrypt(plain[i%samples]); err != nil {
			return nil, err
		}
	}
	r.EncryptPrecomputedPerS = perSecond(nPre, time.Since(t0))
	r.CPU.EncryptPrecomputed = perSecond(nPre, processCPU()-c0)
	report, finish := barProgress(e, fmt.Sprintf("decrypting %d values (every core)", samples), quiet)
	t0, c0 = time.Now(), processCPU()
	got, err := sk.DecryptVectorProgress(cts[:samples], report)
	r.DecryptPerS = perSecond(samples, time.Since(t0))
	r.CPU.Decrypt = perSecond(samples, processCPU()-c0)
	finish()
	if err != nil {
		return nil, err
	}
	for i, m := range got {
		if m.Cmp(plain[i]) != 0 {
			return nil, fmt.Errorf("decryption self-check failed at element %d", i)
		}
	}
	single := min(samples, 20)
	t0, c0 = time.Now(), processCPU()
	for i := 0; i < single; i++ {
		if _, err := sk.Decrypt(cts[i]); err != nil {
			return nil, err
		}
	}
	r.DecryptSingleMS = time.Since(t0).Seconds() * 1000 / float64(single)
	_ = c0
	acc := cts[0]
	t0, c0 = time.Now(), processCPU()
	for i := 1; i < nPre; i++ {
		acc = pk.Add(acc, cts[i])
	}
	r.AddPerS = perSecond(nPre-1, time.Since(t0))
	r.CPU.Add = perSecond(nPre-1, processCPU()-c0)
	scalars := make([]*big.Int, samples)
	for i := range scalars {
		scalars[i] = new(big.Int).SetUint64(rng.Uint64() | 1<<63)
	}
	t0, c0 = time.Now(), processCPU()
	for i := 0; i < samples; i++ {
		_ = pk.MulScalar(cts[i], scalars[i])
	}
	r.ScalarMulPerS = perSecond(samples, time.Since(t0))
	r.CPU.ScalarMul = perSecond(samples, processCPU()-c0)
	r.EncryptRatio = r.EncryptPerS * pyEncryptS
	r.EncryptFullRatio = r.EncryptFullPerS * pyEncryptS
	r.EncryptPrecomputedRatio = r.EncryptPrecomputedPerS * pyEncryptS
	r.DecryptRatio = r.DecryptPerS * pyDecryptS
	r.AddRatio = r.AddPerS * pyAddS
	r.PerCoreRatio = paillierCPURates{
		EncryptFull:          r.CPU.EncryptFull * pyEncryptS,
		EncryptShortExponent: r.CPU.EncryptShortExponent * pyEncryptS,
		EncryptPrecomputed:   r.CPU.EncryptPrecomputed * pyEncryptS,
		Decrypt:              r.CPU.Decrypt * pyDecryptS,
		Add:                  r.CPU.Add * pyAddS,
	}
	r.LoadAverage = loadAverage()
	return r, nil
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
			fmt.Fprintf(e.stdout, "DPHE: %d×%d weights, %d users, sparsity %.2f, capacity M=%d, %d-bit key, %s randomness, %d cores\n",
				r.Dim, r.Classes, r.Users, r.Sparsity, r.Capacity, r.Bits, r.Randomness, r.Cores)
			fmt.Fprintf(e.stdout, "  per user: encrypt %.2f s, %d bytes in %d message(s)\n", r.UserEncryptS, r.UserBytes, r.UserMessages)
			fmt.Fprintf(e.stdout, "  each contribution: clip %g, noise σ = %g, threshold %g·σC: ε = %s per user at δ = 1e-5\n", r.Clip, r.NoiseMultiplier, r.Threshold, dp.FormatEpsilon(r.ContributionEpsilon))
			fmt.Fprintf(e.stdout, "  aggregate %.2f s, decrypt %.2f s, max |sum − noiseless sum| %.3g (the noise)\n", r.AggregateS, r.DecryptS, r.SumMaxAbsError)
			fmt.Fprintf(e.stdout, "  dense element-wise per user: encrypt %.2f s, %d bytes (extrapolated from %d encryptions)\n", r.DenseUserEncryptS, r.DenseUserBytes, r.DenseSample)
			fmt.Fprintf(e.stdout, "  speed-up of user encryption: %.1f×\n", r.Speedup)
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
