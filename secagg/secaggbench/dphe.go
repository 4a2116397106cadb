package secaggbench

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"runtime"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// The DP step of the bench's DPHE contributions (dphe.Privacy).
const (
	DPHEClip      = 1.0
	DPHESigma     = 1.0
	DPHEThreshold = 3.0
)

// PrivacyUnit is the unit of the ε the DPHE reports state: dphe.Privacy
// protects a user's whole update (present or absent), which covers every
// person and example in it.
const PrivacyUnit = "update"

// Reporter tells the caller about long steps: Progress returns a
// paillier.Progress for a labelled step and a function to call when it
// ends; Status announces a step. Either may be nil.
type Reporter struct {
	Progress func(label string) (paillier.Progress, func())
	Status   func(format string, args ...any)
}

func (r Reporter) progress(label string) (paillier.Progress, func()) {
	if r.Progress == nil {
		return nil, func() {}
	}
	return r.Progress(label)
}

func (r Reporter) status(format string, args ...any) {
	if r.Status != nil {
		r.Status(format, args...)
	}
}

// DPHEParams are the settings of a DPHE measurement: sparse updates
// (unpacked) against dense element-wise Paillier.
type DPHEParams struct {
	Dim, Classes, Users, DenseSample, FracBits int
	Sparsity                                   float64
	Kind                                       paillier.RandomnessKind
	Key                                        paillier.KeyOptions
	Reporter
}

// DPHEReport is the report of veil bench dphe.
type DPHEReport struct {
	Dim        int     `json:"dim"`
	Classes    int     `json:"classes"`
	Weights    int     `json:"weights"`
	Users      int     `json:"users"`
	Sparsity   float64 `json:"sparsity"`
	Capacity   int     `json:"capacity"`
	NonZeros   int     `json:"nonzeros_per_user"`
	Bits       int     `json:"bits"`
	Randomness string  `json:"randomness"`
	Cores      int     `json:"cores"`
	SetupS     float64 `json:"setup_s"`
	// Per-user figures are means over users; the per-user lists follow.
	UserEncryptS    float64   `json:"user_encrypt_s"`
	UserEncryptCPUS float64   `json:"user_encrypt_cpu_s"`
	UserEncryptEach []float64 `json:"user_encrypt_s_each"`
	UserSetupS      float64   `json:"user_setup_s"`
	UserBytes       int       `json:"user_bytes"`
	UserMessages    int       `json:"user_messages"`
	AggregateS      float64   `json:"aggregate_s"`
	DecryptS        float64   `json:"decrypt_s"`
	SumMaxAbsError  float64   `json:"sum_max_abs_error"`
	FracBits        int       `json:"frac_bits"`
	// Every contribution carries DP noise (dphe.Privacy): the clip, noise
	// multiplier and threshold used, and one contribution's ε at δ = 1e-5.
	Clip                float64 `json:"clip"`
	NoiseMultiplier     float64 `json:"noise_multiplier"`
	Threshold           float64 `json:"threshold"`
	ContributionEpsilon float64 `json:"contribution_epsilon"`
	// PrivacyUnit is what the ε protects: a user's whole update.
	PrivacyUnit string `json:"privacy_unit"`
	// Dense element-wise Paillier: every one of the weights encrypted.
	DenseUserEncryptS    float64 `json:"dense_user_encrypt_s"`
	DenseUserEncryptCPUS float64 `json:"dense_user_encrypt_cpu_s"`
	DenseUserBytes       int     `json:"dense_user_bytes"`
	DenseDecryptS        float64 `json:"dense_decrypt_s"`
	DenseExtrapolated    bool    `json:"dense_extrapolated"`
	DenseSample          int     `json:"dense_sample"`
	Speedup              float64 `json:"speedup"`
	SpeedupCPU           float64 `json:"speedup_cpu"`
	Note                 string  `json:"note"`
}

// dpheRun is one DPHE measurement in progress.
type dpheRun struct {
	p     DPHEParams
	r     *DPHEReport
	d, nz int
	sk    *paillier.PrivateKey
	kg    *dphe.KeyGenerator
	setup *dphe.RoundSetup
	dense *paillier.Encrypter
	fp    *paillier.FixedPoint
	rng   *mrand.Rand
	priv  *dphe.Privacy
	want  []float64
	msgs  [][]byte
}

// RunDPHE measures DPHE on sparse updates of Dim×Classes weights against
// dense element-wise Paillier (extrapolated from DenseSample encryptions).
func RunDPHE(p DPHEParams) (*DPHEReport, error) {
	run, err := newDPHERun(p)
	if err != nil {
		return nil, err
	}
	for _, step := range []func() error{run.keys, run.users, run.aggregate, run.epsilon, run.denseDecrypt} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	r := run.r
	if r.UserEncryptS <= 0 {
		return nil, errors.New("secaggbench: user encryption took no measurable time")
	}
	r.Speedup = r.DenseUserEncryptS / r.UserEncryptS
	if r.UserEncryptCPUS > 0 {
		r.SpeedupCPU = r.DenseUserEncryptCPUS / r.UserEncryptCPUS
	}
	return r, nil
}

func newDPHERun(p DPHEParams) (*dpheRun, error) {
	d := p.Dim * p.Classes
	if d > dphe.MaxDim || d < 1 {
		return nil, fmt.Errorf("dim × classes = %d outside [1, %d]", d, dphe.MaxDim)
	}
	if p.Users < dphe.MinUsers || !(p.Sparsity >= 0 && p.Sparsity < 1) || p.DenseSample < 1 {
		return nil, fmt.Errorf("secaggbench: %d users (at least %d), sparsity %v (in [0, 1)), dense sample %d", p.Users, dphe.MinUsers, p.Sparsity, p.DenseSample)
	}
	nz := int(math.Round((1 - p.Sparsity) * float64(d)))
	capacity := max(1, int(math.Ceil((1-p.Sparsity)*float64(d)))) // the paper's M = ⌈0.1·D·NC⌉ at 90% sparsity
	perUser := (p.DenseSample + p.Users - 1) / p.Users
	r := &DPHEReport{Dim: p.Dim, Classes: p.Classes, Weights: d, Users: p.Users, Sparsity: p.Sparsity, Capacity: capacity, NonZeros: nz,
		Bits: p.Key.Bits, Randomness: p.Kind.String(), Cores: runtime.GOMAXPROCS(0), FracBits: p.FracBits, DenseExtrapolated: true,
		DenseSample: perUser * p.Users, Clip: DPHEClip, NoiseMultiplier: DPHESigma, Threshold: DPHEThreshold, PrivacyUnit: PrivacyUnit,
		Note: "sparse (DPHE) figures are measured in full, including each message's checksum encryption and tag and the key generator's checks; dense figures are extrapolated from dense_sample encryptions (encode, encrypt, serialize; measured in equal parts right after each user) and decryptions; *_cpu_s are process CPU seconds, less distorted by other load than wall seconds"}
	return &dpheRun{p: p, r: r, d: d, nz: nz, rng: mrand.New(mrand.NewPCG(uint64(d), uint64(p.Users))), want: make([]float64, d)}, nil
}

// keys generates the key and the round, the dense baseline's encrypter
// and the users' Privacy, charged to a ledger of the bench's own.
func (run *dpheRun) keys() error {
	p, r := run.p, run.r
	run.p.status("key generator: %d-bit key and permutations of %d weights...", p.Key.Bits, run.d)
	t0 := time.Now()
	var err error
	if run.sk, err = paillier.GenerateKey(p.Key); err != nil {
		return err
	}
	if run.kg, err = dphe.NewKeyGenerator(dphe.KeyGeneratorOptions{Key: run.sk, FracBits: p.FracBits}); err != nil {
		return err
	}
	if run.setup, err = run.kg.NewRound(dphe.RoundParams{Round: 1, Dim: run.d, Capacity: r.Capacity, Users: userIDs(p.Users)}); err != nil {
		return err
	}
	r.SetupS = time.Since(t0).Seconds()
	pk := run.kg.PublicKey()
	if run.dense, err = paillier.NewEncrypter(pk, paillier.EncrypterOptions{Randomness: p.Kind, PoolSize: 1}); err != nil {
		return err
	}
	if run.fp, err = paillier.NewFixedPoint(pk, p.FracBits); err != nil {
		return err
	}
	r.DenseUserBytes = run.d * pk.CiphertextSize() // exact: one fixed-width ciphertext per weight
	run.priv, err = benchPrivacy(&dphe.Privacy{Clip: DPHEClip, NoiseMultiplier: DPHESigma, Threshold: DPHEThreshold})
	return err
}

// benchPrivacy gives p a ledger of the bench's own with an unbounded budget.
func benchPrivacy(p *dphe.Privacy) (*dphe.Privacy, error) {
	ledger, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		return nil, err
	}
	if err := ledger.SetBudget("bench", dp.Budget{Epsilon: 1e300, Delta: 1e-5}); err != nil {
		return nil, err
	}
	p.Ledger, p.Principal = ledger, "bench"
	return p, nil
}

func userIDs(n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(i + 1)
	}
	return ids
}

// sparseUpdate draws a user's update: nz values N(0, 0.01²) as float32 at
// random coordinates, and adds its clipped version to run.want.
func (run *dpheRun) sparseUpdate() []float64 {
	upd := make([]float64, run.d)
	var ss float64
	for _, i := range run.rng.Perm(run.d)[:run.nz] {
		upd[i] = float64(float32(run.rng.NormFloat64() * 0.01))
		if upd[i] == 0 {
			upd[i] = 1e-3
		}
		ss += upd[i] * upd[i]
	}
	clip := min(1, DPHEClip/math.Sqrt(ss))
	for i, x := range upd {
		run.want[i] += x * clip // what the sum would be without noise
	}
	return upd
}

// users has every user encrypt its update, each followed by its share of
// the dense baseline, measured right after it under the same load.
func (run *dpheRun) users() error {
	p, r := run.p, run.r
	n := float64(p.Users)
	perUser := r.DenseSample / p.Users
	encOpts := paillier.EncrypterOptions{Randomness: p.Kind, PoolSize: 1}
	for _, id := range userIDs(p.Users) {
		upd := run.sparseUpdate()
		report, finish := p.progress(fmt.Sprintf("user %d: encrypting %d non-zeros of %d (with padding)", id, run.nz, run.d))
		t0 := time.Now()
		u, err := dphe.NewUser(run.setup.Users[id], dphe.UserOptions{Encrypter: encOpts, Progress: report, Privacy: run.priv})
		if err != nil {
			finish()
			return err
		}
		r.UserSetupS += time.Since(t0).Seconds() / n
		t0, c0 := time.Now(), cputime.Process()
		msgs, err := u.Encrypt(upd)
		finish()
		if err != nil {
			return err
		}
		sec := time.Since(t0).Seconds()
		r.UserEncryptEach = append(r.UserEncryptEach, sec)
		r.UserEncryptS += sec / n
		r.UserEncryptCPUS += (cputime.Process() - c0).Seconds() / n
		report, finish = p.progress(fmt.Sprintf("user %d: dense baseline, %d encryptions", id, perUser))
		wall, cpu, err := DenseSample(run.dense, run.fp, run.rng, perUser, report)
		finish()
		if err != nil {
			return err
		}
		r.DenseUserEncryptS += wall / float64(perUser) * float64(run.d) / n
		r.DenseUserEncryptCPUS += cpu / float64(perUser) * float64(run.d) / n
		r.UserBytes, r.UserMessages = totalLen(msgs), len(msgs)
		run.msgs = append(run.msgs, msgs...)
	}
	return nil
}

func totalLen(msgs [][]byte) int {
	n := 0
	for _, m := range msgs {
		n += len(m)
	}
	return n
}

// aggregate sums the messages, decrypts the sum and checks it against
// the noiseless sum: each user's released coordinate is its clipped value
// plus noise, or 0 when that is within threshold·σC, so off by at most
// (threshold + 7)·σC (noise beyond 7σC has probability 2.6e-12 per
// coordinate). The package's tests check that sums are exact.
func (run *dpheRun) aggregate() error {
	p, r := run.p, run.r
	agg, err := dphe.NewAggregator(run.setup.Aggregator, dphe.AggregatorOptions{Encrypter: paillier.EncrypterOptions{Randomness: p.Kind, PoolSize: 1}})
	if err != nil {
		return err
	}
	p.status("aggregating %d messages...", len(run.msgs))
	t0 := time.Now()
	for _, m := range run.msgs {
		if err := agg.Receive(m); err != nil {
			return err
		}
	}
	sum, err := agg.Sum()
	if err != nil {
		return err
	}
	r.AggregateS = time.Since(t0).Seconds()
	report, finish := p.progress(fmt.Sprintf("key generator: decrypting the sum of %d positions", run.d))
	t0 = time.Now()
	res, err := run.kg.DecryptWithProgress(sum, report)
	finish()
	if err != nil {
		return err
	}
	r.DecryptS = time.Since(t0).Seconds()
	sd := DPHESigma * DPHEClip
	tol := float64(p.Users) * ((DPHEThreshold+7)*sd + math.Ldexp(1, -p.FracBits))
	for i := range run.want {
		r.SumMaxAbsError = max(r.SumMaxAbsError, math.Abs(res.Sum[i]-run.want[i]))
	}
	if r.SumMaxAbsError > tol {
		return fmt.Errorf("DPHE sum is wrong: max |error| %g exceeds %g", r.SumMaxAbsError, tol)
	}
	return nil
}

// epsilon is one contribution's ε at δ = 1e-5.
func (run *dpheRun) epsilon() error {
	var err error
	run.r.ContributionEpsilon, err = contributionEpsilon(*run.priv, run.d, 1)
	return err
}

// contributionEpsilon composes one contribution's events at δ = 1e-5.
func contributionEpsilon(p dphe.Privacy, dim, lanes int) (float64, error) {
	evs, err := dphe.ContributionEvents(p, dim, lanes)
	if err != nil {
		return 0, err
	}
	acct, err := dp.NewAccountant(nil)
	if err != nil {
		return 0, err
	}
	if err := acct.Add(evs...); err != nil {
		return 0, err
	}
	eps, _, err := acct.Epsilon(1e-5)
	return eps, err
}

// denseDecrypt decrypts a sample of dense ciphertexts and extrapolates.
func (run *dpheRun) denseDecrypt() error {
	p, r := run.p, run.r
	sample := make([]*big.Int, r.DenseSample)
	var err error
	for i := range sample {
		if sample[i], err = run.fp.Encode(run.rng.NormFloat64() * 0.01); err != nil {
			return err
		}
	}
	report, finish := p.progress(fmt.Sprintf("dense baseline: encrypting %d values to decrypt", r.DenseSample))
	cts, err := run.dense.EncryptVectorProgress(sample, report)
	finish()
	if err != nil {
		return err
	}
	report, finish = p.progress(fmt.Sprintf("dense baseline: decrypting %d values", r.DenseSample))
	t0 := time.Now()
	_, err = run.sk.DecryptVectorProgress(cts, report)
	finish()
	if err != nil {
		return err
	}
	r.DenseDecryptS = time.Since(t0).Seconds() / float64(len(cts)) * float64(run.d)
	return nil
}

// DenseSample encodes, encrypts (every core, reporting to progress) and
// serializes n random weights and returns the wall and process-CPU
// seconds taken.
func DenseSample(enc *paillier.Encrypter, fp *paillier.FixedPoint, rng *mrand.Rand, n int, progress paillier.Progress) (wall, cpu float64, err error) {
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = float64(float32(rng.NormFloat64() * 0.01))
	}
	t0, c0 := time.Now(), cputime.Process()
	plain := make([]*big.Int, n)
	for i, x := range vals {
		if plain[i], err = fp.Encode(x); err != nil {
			return 0, 0, err
		}
	}
	cts, err := enc.EncryptVectorProgress(plain, progress)
	if err != nil {
		return 0, 0, err
	}
	pk := enc.PublicKey()
	buf := make([]byte, 0, n*pk.CiphertextSize())
	for _, c := range cts {
		buf = pk.AppendFixed(buf, c)
	}
	return time.Since(t0).Seconds(), (cputime.Process() - c0).Seconds(), nil
}
