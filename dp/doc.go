// Package dp is Veil's differential-privacy core: exact noise, calibration,
// accountants, the DP-SGD step and the privacy ledgers. It does not
// import the tensor engine; gradients are flat float32 vectors.
//
// # API summary
//
// Noise (CSPRNG-seeded ChaCha8 stream, exact discrete samplers):
//
//	src, err := dp.NewSource()              // crypto/rand seed
//	src.AddGaussian32(vec, sigma)           // release in place; also AddGaussian64, AddLaplace32/64
//	y := src.NoisyLaplace(v, b)             // release one value; also NoisyGaussian
//	z := src.Laplace(b)                     // noise only, for unreleased comparisons; also Gaussian
//	g, err := dp.GaussianGrid(sigma, d)     // the grid of a release and its accounting:
//	mu, err := g.GaussianMultiplier(Δ2)     //   effective noise multiplier after rounding
//
// Calibration:
//
//	dp.ClassicGaussianSigma(Δ2, ε, δ)       // Δ2·√(2 ln(1.25/δ))/ε (the papers')
//	dp.AnalyticGaussianSigma(Δ2, ε, δ)      // Balle & Wang 2018, any ε, tighter
//	dp.LaplaceScale(Δ1, ε)                  // Δ1/ε
//
// Accounting by Rényi DP (Mironov, Talwar & Zhang 2019; Opacus conversion):
//
//	acct, err := dp.NewAccountant(nil)      // default orders 1.01…1.09, 1.1…10.9, 11…63, 64…4096
//	err = acct.Step(q, sigma, steps)        // one continuous-Gaussian DP-SGD phase
//	eps, order, err := acct.Epsilon(delta)
//	eps, order, err := dp.ScheduleEpsilon(q, sigma, steps, delta)
//	sigma, err := dp.NoiseMultiplier(q, steps, targetEps, delta)   // inverse (continuous)
//	sigma, err := dp.SGDNoiseMultiplier(cfg, steps, targetEps, delta) // inverse for DPSGD's exact noise
//	floor, err := dp.EpsilonFloor(nil, delta) // smallest ε any noise can certify
//	acct.Add(dp.LaplaceEvent(...), dp.GaussianEvent(...), dp.PureDPEvent(...), dp.RDPCurveEvent(...))
//
// Tighter accounting by the privacy loss distribution (FFT composition):
//
//	eps, err := dp.PLDEpsilon(events, delta, dp.PLDOptions{})
//
// DP-SGD step (clip to C in the graph, sum, NoiseSums, divide by the
// expected batch, charge Event):
//
//	s, err := dp.NewDPSGD(dp.SGDConfig{ClipNorm: C, NoiseMultiplier: σ, SamplingRate: q,
//		ExpectedBatchSize: q*N, Dimension: d, Workers: 2}, nil)
//	err = s.NoiseSums(sums...)              // or s.Aggregate(perExampleGrads, out)
//	ev, err := s.Event(steps)               // or s.Charge(acct, steps)
//
// The ledger of a data set (persisted; what commands charge):
//
//	d, err := dp.OpenLedgerDir(dir)         // dir: dp.DefaultLedgerDir() unless told
//	set := dp.DataSet{Name: "lfw", Unit: dp.UnitIdentity}
//	l, err := d.Update(set, func(l *dp.DataLedger) error {
//		if err := l.SetBudget(dp.Budget{Epsilon: 8, Delta: 1e-5}); err != nil {
//			return err                  // a raise or another δ after charges: ErrBudgetLocked
//		}
//		_, err := l.Charge(dp.Charge{Label: "veil train: epoch 1", Members: people, Events: []dp.Event{ev}})
//		return err                          // ErrBudgetExceeded: nothing written
//	})
//	s, err := l.Spent(people)               // the worst of these members
//	err = l.Reset(dp.ResetOptions{Reason: "…"}) // the owner's override, kept in the history
//
// Budgets per client, in memory (the coordinator keeps one per client):
//
//	l, err := dp.NewLedger(dp.LedgerOptions{})
//	err = l.SetBudget("client-7", dp.Budget{Epsilon: 3, Delta: 1e-5})
//	spent, err := l.Charge("client-7", ev)  // refuses (ErrBudgetExceeded), unchanged, if over budget
//	data, err := json.Marshal(l); l2, err := dp.UnmarshalLedger(data) // exact round trip
//
// Distributed discrete Gaussian (secure aggregation: each client adds
// N_Z(0, σ²) on the integer lattice, only the sum of at least n honest
// clients is released; Kairouz, Liu & Steinke 2021, Proposition 14):
//
//	err = src.DiscreteGaussianInts(noise, σ) // exact integer noise, σ an integer
//	m := dp.DistributedDiscreteGaussian{Sigma: σ, Clients: n, L2: Δ2, L1: Δ1, Dim: d}
//	ev, err := m.Event(nil, rounds, "secagg round")  // or m.Epsilon(nil, rounds, delta)
//
// Subpackages hold the paper-specific mechanisms: dp/svt (sparse vector,
// Irene Algorithm 3 and Lyu et al. 2017), dp/dplc (PrivacyFace's
// differentially private local clustering) and dp/pate (noisy-vote
// aggregation and its data-dependent moments analysis, LightFace
// Section 4). Each returns Events to charge to an Accountant or Ledger.
//
// # Exact noise
//
// Floating-point noise leaks its input: samples of a ziggurat sampler lie
// on a coarse lattice, and testing whether y − v lies on it identifies the
// true v almost always (Mironov 2012; TestFloatingPointAttackFails plays
// that attacker). Veil's noise is exact by construction. The integers are
// discrete Laplace and discrete Gaussian samples (Canonne, Kamath & Steinke
// 2020, Algorithms 1–3, and for long vectors an exact table sampler of the
// same discrete Gaussian, see Speed) drawn only from uniform 64-bit
// integers of the ChaCha8 stream: every Bernoulli trial compares uniform
// bits with the binary digits of an exact rational or with an integer
// bracket of an exponential that is refined in math/big until it decides,
// never with a floating-point uniform. A real value v is released as
// γ·(round(v/γ) + Z): γ is a power of two, so the output is a multiple of
// γ and its float representation carries only the integer result.
//
// The grid. For Gaussian noise of standard deviation σ on d coordinates, γ
// is the largest power of two with γ ≤ 2^−20·ref/√d, where ref is σ (or,
// for DP-SGD, the clip norm C), and the integer parameter is ⌈σ/γ⌉
// (≤ 2^31, coarsening γ if needed). For Laplace noise of scale b,
// γ ≤ 2^−20·b/d and the integer scale is ⌈b/γ⌉. Rounding moves each
// coordinate by at most γ/2, so the L2 sensitivity Δ becomes at most
// Δ/γ + √d in grid units (L1: Δ/γ + d). The discrete Gaussian with integer
// sensitivity has the Rényi DP α·Δ_Z²/(2σ_Z²) of the continuous one (CKS
// Theorem 4, multivariate form), so the release is accounted with the
// effective noise multiplier σ_Z/(Δ/γ + √d) (Grid.GaussianMultiplier).
// While the fine grid γ√d ≤ 2^−20·Δ is kept, this is at worst σ/(1 + 2^−20),
// a relative loss below 2^−20 ≈ 9.5e-7 in the multiplier. When the integer
// parameter σ_Z = ⌈σΔ/γ⌉ would pass 2^31 (for DP-SGD, σ√d above about
// 2^10 to 2^11), γ is coarsened until σΔ/γ ≤ 2^31, so Δ/γ > 2^30/σ and the
// loss is below σ√d·2^−30 instead: 0.28% (bound 0.35%) at σ = 5000 on the
// 557,824 coordinates of the main job's head, 0.0356% at σ = 1000
// (TestEffectiveMultiplierBound). In general the relative loss is below
// max(2^−20, σ√d·2^−30). Discrete Laplace of integer
// scale t is (Δ/γ + d)/t-DP (Grid.LaplaceEpsilon): Δ/b plus at most 2^−20.
//
// DP-SGD. DPSGD.Event charges the Poisson-subsampled discrete Gaussian
// (KindSubsampledDiscreteGaussian) with the effective multiplier. Its RDP
// at integer orders equals the continuous sampled Gaussian's exactly: in
// the binomial expansion of E_μ0[(1 − q + q·μ1/μ0)^α] the moments
// E_μ0[(μ1/μ0)^k] of lattice Gaussians shifted by a lattice vector are
// those of the continuous ones, because a sum over Z^d is invariant under
// integer shifts. The add direction never exceeds the remove direction
// (the pair is symmetric, its loss law is a mixture of randomized-response
// laws, and for those the inequality follows from the convexity of
// x^α − x^{1−α} on [1, ∞)); fractional orders use the chord between
// neighbouring integer orders, valid because (α−1)·D_α is convex in α.
// The full argument is on SubsampledDiscreteGaussianRDP, and
// TestSubsampledDiscreteGaussianRDPExact checks it against exact lattice
// sums in one and two dimensions.
//
// Speed. Vector releases (AddGaussian32/64 of 256 or more coordinates)
// and DPSGD draw the discrete Gaussian from a table sampler built once per
// noise parameter (discrete.go, "The table sampler"): an exact alias table
// of dyadic weights over blocks of the support, a uniform point of the
// block, and an exact acceptance test against c·exp(−x²/(2σ²))/W_b that
// is decided by 64-bit integer brackets except with probability below
// 2^−45 (then by math/big, exactly), with an exactly accepted geometric
// tail. Its output distribution is the discrete Gaussian itself, not an
// approximation, so the accounting above is unchanged. It costs about one
// 64-bit ChaCha8 word per sample instead of CKS's several Bernoulli trials.
// Measure with go test -bench NoiseInterleaved -run XXX ./dp, which runs
// the floating-point ziggurat, CKS and the table sampler alternately on
// the same machine load; SGDConfig.Workers spreads NoiseSums over
// goroutines sharing one table. Each block of 2^12 coordinates is noised
// from its own ChaCha8 stream keyed by the block (keys derived from one
// step key drawn from the caller's Source), so a seeded release does not
// depend on the number of workers or cores; go test -bench
// NoiseDPSGDKeyedBlocks -run XXX ./dp measures the keying's cost.
//
// # The data ledger
//
// A budget protects people, so it belongs to the data they are in, not to
// an output: a ledger per output file is reset by writing elsewhere or
// copying the input, and two commands on the same people never compose.
// DataLedger is kept per data set and unit (DataSet) in a ledger folder
// (LedgerDir), and every command that spends on the data (veil train, veil
// privacy dplc, veil fed client) charges it. Data sets overlap in practice
// (--max-people 50, then everyone; a federated client's part), so the
// ledger accounts per member: each charge records the members it used,
// a member's ε composes every charge that touched them, and a charge is
// refused if any member would pass the budget (individual accounting, as
// in Feldman & Zrnic 2021 with a data-independent per-release bound). A
// release that did not use a member's data reveals nothing about it, so
// this is sound for add/remove adjacency as long as which members a
// command uses is chosen without looking at the others' data (a public
// list and a seed, as --max-people and --partition choose), and it avoids
// summing every command onto everyone. Members with the same charges form one group (a partition
// refined by each charge), so a charge on all 5,749 LFW people costs one
// composition per group, and the file stores each member once. A charge
// that cannot name its members charges all of them, present and future.
// Members are stored as 128-bit HMAC-SHA256 fingerprints under the
// folder's key (ledger.key, 0600): the file names nobody, even in
// backups or logs. The same key MACs each file, so an edited, truncated or
// moved file is refused (ErrLedgerCorrupt); it guards against mistakes
// and casual edits, not against the key's holder. Updates hold an flock,
// and files are replaced atomically and durably. Once anything is
// charged, ε may only be lowered and δ never changed, except by Reset,
// which the history keeps with its time and reason.
//
// # Layout
//
//	dp          noise.go (Source, the public noise API), discrete.go (exact
//	            samplers, Grid), calibrate.go, rdp.go (RDP of mechanisms,
//	            conversion), event.go (Event = one charged mechanism),
//	            accountant.go (Accountant, ScheduleEpsilon, the inverses),
//	            pld.go + fft.go (PLD accountant), sgd.go (DPSGD), ledger.go
//	            (in-memory, per principal), dataledger.go + ledgerdir.go
//	            (the persisted data-set ledger, lock_*.go),
//	            special.go (log-space helpers, regularised incomplete beta)
//	dp/svt      sparse vector: Irene Algorithm 3 and Lyu et al. Algorithm 1
//	dp/dplc     PrivacyFace DPLC (SIMD inner products under GOEXPERIMENT=simd)
//	dp/pate     noisy-vote aggregation and its moments analysis
//
// # Known limits
//
// The PLD accountant handles the continuous Gaussian family only (the
// ledger falls back to RDP otherwise, including for DPSGD's discrete
// events); it costs an FFT of up to a few million points per evaluation, so
// the ledger uses it only when LedgerOptions.UsePLD is set. The RDP
// conversion cannot certify ε at or below EpsilonFloor (0.000536 at
// δ = 1e-5 with orders up to 4096). The sensitivity bound of NoiseSums
// assumes the sums it is given are exact sums of clipped gradients;
// floating-point summation in the caller can exceed C by a relative error
// of order (batch size)·2^−24 for float32. Gaussian and Laplace return
// noise only: adding it to an unsnapped value leaks that value through the
// grid, so releases must use the Add* or Noisy* methods.
//
// Adjacency is add/remove of one record; the record is the privacy unit
// the caller chooses (one identity with all its faces, Veil's default for
// face data, or one example). ε values are in nats.
package dp
