// Package dp is Veil's differential-privacy core: noise, calibration,
// accountants, the DP-SGD step and a per-client budget ledger. It does not
// import the tensor engine; gradients are flat float32 vectors.
//
// # API summary
//
// Noise (CSPRNG-seeded ChaCha8 stream):
//
//	src, err := dp.NewSource()              // crypto/rand seed
//	src.AddGaussian32(vec, sigma)           // in place; also AddLaplace32/64, Gaussian, Laplace
//	g, err := dp.NewGaussianNoise(sigma)    // fixed-σ adder: g.Add32(vec)
//
// Calibration:
//
//	dp.ClassicGaussianSigma(Δ2, ε, δ)       // Δ2·√(2 ln(1.25/δ))/ε (the papers')
//	dp.AnalyticGaussianSigma(Δ2, ε, δ)      // Balle & Wang 2018, any ε, tighter
//	dp.LaplaceScale(Δ1, ε)                  // Δ1/ε
//
// Accounting by Rényi DP (Mironov, Talwar & Zhang 2019; Opacus conversion):
//
//	acct, err := dp.NewAccountant(nil)      // default orders 1.1…10.9, 12…63
//	err = acct.Step(q, sigma, steps)        // one DP-SGD phase; call per phase
//	eps, order, err := acct.Epsilon(delta)
//	eps, order, err := dp.ScheduleEpsilon(q, sigma, steps, delta)
//	sigma, err := dp.NoiseMultiplier(q, steps, targetEps, delta) // inverse
//	acct.Add(dp.LaplaceEvent(...), dp.GaussianEvent(...), dp.PureDPEvent(...), dp.RDPCurveEvent(...))
//
// Tighter accounting by the privacy loss distribution (FFT composition):
//
//	eps, err := dp.PLDEpsilon(events, delta, dp.PLDOptions{})
//
// DP-SGD step (clip to C, sum, add N(0, σ²C²), divide by expected batch):
//
//	s, err := dp.NewDPSGD(dp.SGDConfig{ClipNorm: C, NoiseMultiplier: σ, SamplingRate: q, ExpectedBatchSize: q*N}, nil)
//	clipped, err := s.Aggregate(perExampleGrads, out)
//	err = s.Charge(acct, 1)  // or ledger.Charge(client, s.Event(1))
//
// Budgets per client:
//
//	l, err := dp.NewLedger(dp.LedgerOptions{})
//	err = l.SetBudget("client-7", dp.Budget{Epsilon: 3, Delta: 1e-5})
//	spent, err := l.Charge("client-7", ev)  // refuses (ErrBudgetExceeded), unchanged, if over budget
//	data, err := json.Marshal(l); l2, err := dp.UnmarshalLedger(data)
//
// Subpackages hold the paper-specific mechanisms: dp/svt (sparse vector,
// Irene Algorithm 3 and Lyu et al. 2017), dp/dplc (PrivacyFace's
// differentially private local clustering) and dp/pate (noisy-vote
// aggregation and its data-dependent moments analysis, LightFace
// Section 4). Each returns Events to charge to an Accountant or Ledger.
//
// # Layout
//
//	dp          noise.go (Source, GaussianNoise), calibrate.go, rdp.go (RDP of
//	            mechanisms, conversion), event.go (Event = one charged mechanism),
//	            accountant.go (Accountant, ScheduleEpsilon, NoiseMultiplier),
//	            pld.go + fft.go (PLD accountant), sgd.go (DPSGD), ledger.go,
//	            special.go (log-space helpers, regularised incomplete beta)
//	dp/svt      sparse vector: Irene Algorithm 3 and Lyu et al. Algorithm 1
//	dp/dplc     PrivacyFace DPLC (SIMD inner products under GOEXPERIMENT=simd)
//	dp/pate     noisy-vote aggregation and its moments analysis
//
// # Known limits
//
// The PLD accountant handles Gaussian-family events only (the ledger falls
// back to RDP otherwise); it costs an FFT of up to a few million points per
// evaluation, so the ledger uses it only when LedgerOptions.UsePLD is set.
// Noise samples are plain floating-point values (no snapping against
// floating-point attacks).
//
// Adjacency is add/remove of one record (one example, one face, one class
// centre as the papers state it). ε values are in nats.
package dp
