// Package ddp is distributed DP-SGD: one DP-SGD step per round, whose noisy
// gradient sum is assembled under secure aggregation from the clients'
// noise shares, so that the coordinator learns exactly what central DP-SGD
// over all the clients' people would release, with the noise of central
// DP-SGD, while no party adds it all (Kairouz, Liu & Steinke 2021, "The
// Distributed Discrete Gaussian Mechanism for Federated Learning with
// Secure Aggregation", arXiv 2102.06387).
//
// It is the mathematics, independent of the network: the coordinator's
// Plan, the client's check of it against its owner's Policy (CheckPlan,
// RequiredNoise, Accept), the accountant of the mechanism (Mechanism), and
// a round's encoding and decoding (Round). It imports dp and secagg/quant
// only, so that a federated client (fed/client) links it without the
// engine. The masking protocol is secagg/masking's; package fed/ddpsim runs
// the whole step in one process.
//
// # One round
//
// Client i (each client, on its own device, with its own CSPRNG):
//
//  1. checks the round's Plan against its own Policy (CheckPlan) and
//     charges its ledger for the round (Accepted.Charge), before it touches
//     its data;
//  2. Poisson-samples its units (people, or images under the example unit):
//     each independently with probability q;
//  3. computes S_i = Σ_{x sampled} clip_C(g_x) at the round's model, each
//     unit's gradient (for a person: the sum of their sampled images'
//     gradients) clipped to L2 norm C (nn/train.Trainer.ClippedSum: no
//     floating-point noise);
//  4. encodes it (Round.Encode, secagg/quant): S_i clipped as a whole to the
//     plan's sum clip (a projection onto a ball, 1-Lipschitz), multiplied by
//     the random rotation U = H·D/√B (Walsh–Hadamard blocks, signs D fresh
//     per round, independent of the data), divided by γ = C/Scale,
//     randomised rounding of each coordinate (unconditional: β = 0), plus
//     its noise share ζ_i ~ N_Z(0, σ²)^{D'} drawn exactly, modulo 2^b;
//  5. masks the encoding (secagg/masking) and sends it.
//
// The coordinator unmasks the sum of the survivors' encodings (the masks
// cancel; at least Threshold survivors, or nothing is unmasked), decodes it
// (Round.Decode: centred lift, ×γ, U⁻¹) into Σ_i S_i plus noise, divides by
// the public expected batch q·N and takes the optimiser step of veil train
// (training.Session.ApplyReleased: Adam, weight decay, the moving average
// of the weights). Everything after the unmasked sum is post-processing.
//
// # Theorem (what is charged)
//
// Let every unit be held by exactly one client, and let every unmasked sum
// contain the encodings of at least T honest clients, each of which draws
// its share from a CSPRNG and adds it as written. Then one round is, for
// one unit under add/remove adjacency, at most as revealing as the
// Poisson-subsampled (rate q) discrete Gaussian of T honest shares on the
// integer lattice with sensitivity Δ = C/γ + √D'; its Rényi DP at every
// order α > 1 is at most Mechanism.RDP(α), and R rounds compose to R times
// that (adaptive composition: the model of each round, and which clients
// the coordinator lets into it, may depend on earlier rounds).
//
// Proof.
//
// Step 1 (the other clients). Fix the round's model, the rotation and the
// set of clients whose encodings are unmasked. Let x be the unit that is
// present in one data set and absent from its neighbour; x is client i's.
// Every other client's encoding, and client i's randomness other than the
// sample of x, has the same law in both worlds and is independent of x:
// conditioning on it, the two worlds' outputs are mixtures, with the same
// weights, of the outputs given it. Rényi divergence is jointly
// quasi-convex (van Erven & Harremoës 2014, Theorem 13), so it suffices to
// bound the divergence given any fixed value of them. Only the T honest
// shares are kept random: a dishonest client's contribution is independent
// of the honest shares (it cannot see them: they are masked), so adding it
// is post-processing, which cannot increase the divergence. Masking adds
// values that cancel in the sum; wrapping modulo 2^b is a function of the
// integer sum. So the released value is a function of
//
//	Y = E_i + Z,   Z = ζ_1 + … + ζ_T,
//
// with E_i client i's rounded encoding before noise.
//
// Step 2 (the sample and the rounding). Write w for client i's rotated,
// scaled sum without x (after the sum clip) and w + u for it with x; the
// sum clip and the orthogonal rotation are 1-Lipschitz, so ‖u‖₂ ≤ C/γ.
// Randomised rounding of a value v draws ⌊v + U⌋ with U uniform on [0, 1)
// (each coordinate independently): that is its law, whatever sampler
// realises it. Couple the two worlds' roundings through the same U: then
// R(w + u) − R(w) = Δ(U) with Δ_j ∈ {⌊u_j⌋, ⌈u_j⌉}, an integer vector of
// ‖Δ‖₂ ≤ ‖u‖₂ + ‖(1,…,1)‖₂ ≤ C/γ + √D' = L2. Given U, the world without x
// releases μ_0 = law of R(w) + Z, the world with x releases
// (1−q)μ_0 + q·μ_Δ with μ_Δ = law of R(w) + Δ + Z; by quasi-convexity again
// (U is common to both worlds), it suffices to bound, for every integer Δ
// with ‖Δ‖₂ ≤ L2, the divergences between μ_0 and (1−q)μ_0 + qμ_Δ in both
// orders. (Conditional rounding, which redraws the whole vector until its
// norm is small, breaks this coupling; the plan turns it off, β = 0, at the
// price of the √D' term, kept below 0.1% of C/γ by the scale 2^20.)
//
// Step 3 (removal). D_α((1−q)μ_0 + qμ_Δ ‖ μ_0) for integer α ≥ 2: with
// L = μ_Δ/μ_0, E_μ0[(1 − q + qL)^α] = Σ_k C(α,k)(1−q)^{α−k} q^k E_μ0[L^k]
// exactly (binomial expansion, every term ≥ 0), E_μ0[L^0] = E_μ0[L^1] = 1,
// and E_μ0[L^k] = exp((k−1)·D_k(μ_Δ‖μ_0)) ≤ exp((k−1)·ε_T(k)), where ε_T is
// Proposition 14 of Kairouz, Liu & Steinke (dp.DistributedDiscreteGaussian
// with T clients, σ, L2, D'): it bounds D_k(Z ‖ Z + Δ') for every integer
// Δ' with those norms, and D_k(Z + Δ ‖ Z) = D_k(Z ‖ Z − Δ) (shifting both
// arguments), with ‖−Δ‖ = ‖Δ‖. This is Mechanism.logMoment; RDP takes
// log A_α/(α−1), capped by the unsampled ε_T(α) (subsampling never hurts:
// e^{(α−1)D_α} is jointly convex).
//
// Step 4 (addition). Z is symmetric (each ζ_j is), so the map y ↦ 2R(w) +
// Δ − y swaps μ_0 and μ_Δ; package dp's argument for the subsampled
// discrete Gaussian (dp.SubsampledDiscreteGaussianRDP: the privacy loss
// then satisfies P(L = −ℓ) = e^ℓ·P(L = ℓ), its law is a mixture of
// randomized-response pairs, and for each of those addition costs at most
// removal) uses nothing else, so D_α(μ_0 ‖ (1−q)μ_0 + qμ_Δ) is at most the
// removal divergence, at every α > 1.
//
// Step 5 (fractional orders). (α−1)·D_α is convex in α, so the chord
// between the neighbouring integer orders bounds it (RDP at fractional α).
// Orders between or above those listed are charged as dp.RDPCurveEvent
// does (the next larger listed order). ∎
//
// As τ → 0 (σ ≫ 1: τ = 10 Σ_{k<T} e^{−2π²σ²k/(k+1)} underflows to 0 for
// σ above a few lattice units), ε_T(k) = k·L2²/(2Tσ²) and the bound is
// exactly the subsampled discrete Gaussian's of noise multiplier
// σ_eff = √T·σ/L2 (dp.SubsampledDiscreteGaussianRDP), which at integer
// orders equals the continuous subsampled Gaussian's of Mironov, Talwar &
// Zhang: central DP-SGD's accounting, with the effective multiplier
// ⌈σ_eff⌉ lost only to the integer σ and the rounding term √D'/(C/γ)
// (about 7·10⁻⁴ for the head's D' = 573,440 and C/γ = 2^20).
// TestMechanismApproachesSubsampledGaussian and
// TestMechanismBoundsExactLatticeDivergence check this, the latter against
// the exact divergences, both directions, of sums of T one-dimensional
// discrete Gaussians at small σ, where τ is not negligible.
//
// # What the theorem needs, and what it does not give
//
//   - At least T honest clients in every unmasked sum. A client's σ share is
//     calibrated from its own policy (RequiredNoise: its ε, δ, its own T,
//     its own number of rounds, the plan's q), never from the number of
//     clients the coordinator claims. The plan's Threshold must be at least
//     T + MaxColluders (CheckPlan), so that a sum the protocol unmasks holds
//     T honest shares even when up to MaxColluders of its clients collude
//     with the coordinator (and add nothing). The plan's noise share is
//     common to all clients — the assumption is that the other honest
//     clients add as much as this client assumes — and must be at least the
//     client's own requirement. That the plan is common is enforced, not
//     assumed: the federation binds the whole round configuration, plan
//     included, and the model each client received into every client's
//     signed key advert (fed/secround, RoundContext), and a client
//     refuses, uncharged, a round in which a neighbour's advert was made
//     under another.
//   - The ledger's event names the mechanism and this assumption (Label,
//     Assumption); a model trained this way says so in its privacy record
//     (record.Privacy.Mechanism).
//   - A unit held by several clients. If a person's images are in k clients'
//     data, the k clients sample that person independently and the person's
//     gradient enters the sum up to k times: one round moves the integer sum
//     by up to k·L2, and the sampling is no longer one coin of rate q. Each
//     client's ledger charges only its own rounds, so no single ledger covers
//     that person. A sound bound for them per round is the unsampled
//     distributed discrete Gaussian at sensitivity k·L2
//     (dp.DistributedDiscreteGaussian with L2 = k·Plan.Sensitivity(); by
//     quasi-convexity over which of the k clients sampled them), composed
//     over the rounds any of the k clients took part in. The one-client ε is
//     the guarantee only for people whose data one client alone holds.
//   - Several local steps per round must not be charged as this mechanism.
//     FedAvg-style local training takes E > 1 steps with client i's data
//     before anything is summed: step 2's gradient is taken at the model
//     θ_1 that step 1 moved using client i's data and only client i's own
//     share of noise, ζ_i, whose variance is 1/T of what central DP-SGD
//     adds. The released sum is then a nonlinear function of (data_i,
//     ζ_i) — e.g. with Adam's normalisation or any curvature — from which
//     the other clients' shares, added once at the end, do not hide step
//     1's dependence on the data: the theorem's Step 1 fails because the
//     sum is no longer E_i + Z with Z independent of the data path. A
//     correct charge for such a round treats each local step as a release
//     with client i's share alone (local DP at σ/√T), i.e. √T times less
//     noise than this mechanism assumes. That is why distributed DP-SGD is
//     one DP-SGD step per round (FedSGD-shaped), and why this package plans
//     no local steps.
//   - Wraps, dishonest clients' extra values and the coordinator's choice
//     of who is in a round cost accuracy, never the guarantee (given the
//     threshold); the wrap probability is bounded by quant.Bound.
package ddp
