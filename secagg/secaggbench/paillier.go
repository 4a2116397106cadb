package secaggbench

import (
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"runtime"
	"time"

	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// Reference figures for python-paillier, measured (not by this package)
// with secagg/paillier/testdata/phe_baseline.py: python-paillier 1.5.0
// (its git tag 1.5.0) with gmpy2 2.1.2 on GMP 6.2.1 (Debian bookworm's
// python3-gmpy2 2.1.2-2+b1) under CPython 3.11.2, one process, 2048-bit
// key, raw operations (encryption with fresh r, CRT decryption, one
// homomorphic addition), on 2026-11-23 on the project's 2-core AMD EPYC
// virtual machine: the median of three runs of process CPU time per
// operation, which is the wall time of one idle core (the machine was
// shared, load average about 20, so wall times were 3–4× longer).
const (
	pyEncryptS = 12.25e-3
	pyDecryptS = 3.67e-3
	pyAddS     = 12.1e-6
)

// BaselineNote describes the python-paillier reference figures.
const BaselineNote = "python-paillier 1.5.0 with gmpy2 2.1.2 (GMP 6.2.1), CPython 3.11.2, 2048-bit key, one core: 12.25 ms encrypt, 3.67 ms decrypt, 12.1 µs add (CPU time per raw operation, median of 3 runs of secagg/paillier/testdata/phe_baseline.py on a 2-core AMD EPYC VM, 2026-11-23); not measured by this command"

// PaillierParams configure a measurement of the Paillier primitives.
type PaillierParams struct {
	Key paillier.KeyOptions
	// Samples is the operations timed per measurement (precomputed and
	// additive operations use 10× more).
	Samples int
	// Kind is the randomness variant reported as EncryptPerS (both are
	// always measured).
	Kind paillier.RandomnessKind
	Reporter
}

// PaillierReport is the report of veil bench paillier.
type PaillierReport struct {
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
	Baseline                 string  `json:"baseline"`
	EncryptRatio             float64 `json:"encrypt_vs_baseline"`
	EncryptFullRatio         float64 `json:"encrypt_full_vs_baseline"`
	EncryptPrecomputedRatio  float64 `json:"encrypt_precomputed_vs_baseline"`
	DecryptRatio             float64 `json:"decrypt_vs_baseline"`
	AddRatio                 float64 `json:"add_vs_baseline"`
	// CPU holds operations per CPU-second of this process: what one core
	// does when it is not shared. PerCoreRatio compares those with the
	// single-process baseline.
	CPU          CPURates `json:"per_cpu_second"`
	PerCoreRatio CPURates `json:"per_core_vs_baseline"`
}

// CPURates are operations per process CPU-second.
type CPURates struct {
	EncryptFull          float64 `json:"encrypt_full"`
	EncryptShortExponent float64 `json:"encrypt_short_exponent"`
	EncryptPrecomputed   float64 `json:"encrypt_precomputed"`
	Decrypt              float64 `json:"decrypt"`
	Add                  float64 `json:"add"`
	ScalarMul            float64 `json:"scalar_mul"`
}

// paillierRun is one measurement in progress.
type paillierRun struct {
	p     PaillierParams
	r     *PaillierReport
	sk    *paillier.PrivateKey
	rng   *mrand.Rand
	plain []*big.Int
	cts   []*paillier.Ciphertext
}

// rate returns operations per wall second and per process CPU-second
// since (t0, c0).
func rate(n int, t0 time.Time, c0 time.Duration) (wall, cpu float64) {
	return float64(n) / time.Since(t0).Seconds(), float64(n) / (cputime.Process() - c0).Seconds()
}

// RunPaillier measures key generation, both encryption variants, the
// online step with precomputed randomness, decryption, addition and
// scalar multiplication, and compares them with python-paillier.
func RunPaillier(p PaillierParams) (*PaillierReport, error) {
	if p.Samples < 1 {
		return nil, fmt.Errorf("secaggbench: samples must be at least 1, got %d", p.Samples)
	}
	run := &paillierRun{p: p, rng: mrand.New(mrand.NewPCG(1, 2)), r: &PaillierReport{Bits: p.Key.Bits, Randomness: p.Kind.String(),
		Cores: runtime.GOMAXPROCS(0), Samples: p.Samples, Baseline: BaselineNote, ScalarBits: 64}}
	for _, step := range []func() error{run.keygen, run.encrypt, run.online, run.decrypt, run.homomorphic} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	run.ratios()
	return run.r, nil
}

// keygen generates the key and fixed-point plaintexts, half of them
// negative (encoded as n − |v|).
func (run *paillierRun) keygen() error {
	run.p.status("generating a %d-bit key...", run.p.Key.Bits)
	t0 := time.Now()
	var err error
	if run.sk, err = paillier.GenerateKey(run.p.Key); err != nil {
		return err
	}
	run.r.KeygenS = time.Since(t0).Seconds()
	fp, err := paillier.NewFixedPoint(run.sk.Public(), 32)
	if err != nil {
		return err
	}
	run.plain = make([]*big.Int, run.p.Samples)
	for i := range run.plain {
		if run.plain[i], err = fp.Encode(run.rng.NormFloat64()); err != nil {
			return err
		}
	}
	return nil
}

// encrypt times both randomness variants on every core.
func (run *paillierRun) encrypt() error {
	r, n := run.r, run.p.Samples
	for _, k := range []paillier.RandomnessKind{paillier.RandomnessFull, paillier.RandomnessShortExponent} {
		enc, err := paillier.NewEncrypter(run.sk.Public(), paillier.EncrypterOptions{Randomness: k, PoolSize: 1})
		if err != nil {
			return err
		}
		report, finish := run.p.progress(fmt.Sprintf("encrypting %d values (%s randomness, every core)", n, k))
		t0, c0 := time.Now(), cputime.Process()
		_, err = enc.EncryptVectorProgress(run.plain, report)
		wall, cpu := rate(n, t0, c0)
		finish()
		if err != nil {
			return err
		}
		if k == paillier.RandomnessFull {
			r.EncryptFullPerS, r.CPU.EncryptFull = wall, cpu
		} else {
			r.EncryptShortExponentPerS, r.CPU.EncryptShortExponent = wall, cpu
			r.ShortExponentBits = (r.Bits + 1) / 2
		}
		if k == run.p.Kind {
			r.EncryptPerS = wall
		}
	}
	return nil
}

// online precomputes randomness (every core), then times Encrypt alone
// on one goroutine.
func (run *paillierRun) online() error {
	nPre := 10 * run.p.Samples
	enc, err := paillier.NewEncrypter(run.sk.Public(), paillier.EncrypterOptions{Randomness: run.p.Kind, PoolSize: nPre})
	if err != nil {
		return err
	}
	run.p.status("precomputing %d randomness values...", nPre)
	if err := enc.Precompute(nPre); err != nil {
		return err
	}
	run.cts = make([]*paillier.Ciphertext, nPre)
	t0, c0 := time.Now(), cputime.Process()
	for i := range run.cts {
		if run.cts[i], err = enc.Encrypt(run.plain[i%run.p.Samples]); err != nil {
			return err
		}
	}
	run.r.EncryptPrecomputedPerS, run.r.CPU.EncryptPrecomputed = rate(nPre, t0, c0)
	return nil
}

// decrypt times vector decryption (every core), checks it, and times
// single decryptions.
func (run *paillierRun) decrypt() error {
	n := run.p.Samples
	report, finish := run.p.progress(fmt.Sprintf("decrypting %d values (every core)", n))
	t0, c0 := time.Now(), cputime.Process()
	got, err := run.sk.DecryptVectorProgress(run.cts[:n], report)
	run.r.DecryptPerS, run.r.CPU.Decrypt = rate(n, t0, c0)
	finish()
	if err != nil {
		return err
	}
	for i, m := range got {
		if m.Cmp(run.plain[i]) != 0 {
			return fmt.Errorf("decryption self-check failed at element %d", i)
		}
	}
	single := min(n, 20)
	t0 = time.Now()
	for i := 0; i < single; i++ {
		if _, err := run.sk.Decrypt(run.cts[i]); err != nil {
			return err
		}
	}
	run.r.DecryptSingleMS = time.Since(t0).Seconds() * 1000 / float64(single)
	return nil
}

// homomorphic times additions and multiplications by 64-bit scalars.
func (run *paillierRun) homomorphic() error {
	pk := run.sk.Public()
	acc := run.cts[0]
	t0, c0 := time.Now(), cputime.Process()
	for _, c := range run.cts[1:] {
		acc = pk.Add(acc, c)
	}
	run.r.AddPerS, run.r.CPU.Add = rate(len(run.cts)-1, t0, c0)
	scalars := make([]*big.Int, run.p.Samples)
	for i := range scalars {
		scalars[i] = new(big.Int).SetUint64(run.rng.Uint64() | 1<<63)
	}
	t0, c0 = time.Now(), cputime.Process()
	for i, k := range scalars {
		_ = pk.MulScalar(run.cts[i], k)
	}
	run.r.ScalarMulPerS, run.r.CPU.ScalarMul = rate(len(scalars), t0, c0)
	return nil
}

// ratios compares the rates with python-paillier's.
func (run *paillierRun) ratios() {
	r := run.r
	r.EncryptRatio = r.EncryptPerS * pyEncryptS
	r.EncryptFullRatio = r.EncryptFullPerS * pyEncryptS
	r.EncryptPrecomputedRatio = r.EncryptPrecomputedPerS * pyEncryptS
	r.DecryptRatio = r.DecryptPerS * pyDecryptS
	r.AddRatio = r.AddPerS * pyAddS
	r.PerCoreRatio = CPURates{
		EncryptFull:          r.CPU.EncryptFull * pyEncryptS,
		EncryptShortExponent: r.CPU.EncryptShortExponent * pyEncryptS,
		EncryptPrecomputed:   r.CPU.EncryptPrecomputed * pyEncryptS,
		Decrypt:              r.CPU.Decrypt * pyDecryptS,
		Add:                  r.CPU.Add * pyAddS,
	}
}
