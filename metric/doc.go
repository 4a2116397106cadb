// Package metric learns a face library's own distance between faceprints
// (Irene, Section III.B): large margin nearest neighbours (LMNN, Eq. 3–5)
// and its multi-task form (MT-LMNN, Eq. 6–7) with a metric W₀ shared by all
// libraries plus a private W_k per library.
//
// # The map
//
// A Metric is a linear map V (Out × In); the distance is
// d_W(a, b) = ‖Va − Vb‖₂ with W = VᵀV (Eq. 3), so W is positive
// semidefinite by construction and no semidefinite programming is needed.
// Metric.Transform gives the library's faceprint V x, Metric.Distance the
// distance, Metric.Stack the map [V₀; V_k] whose W is W₀ + W_k (Eq. 6).
// MarshalBinary / UnmarshalBinary use a small versioned format ("VMTR",
// version 1, sizes, float64s; golden file in testdata/) whose decoder
// checks sizes before allocating and refuses non-finite entries.
//
// # LMNN
//
// LMNN.Fit minimises, over V,
//
//	[(1−μ)·Σ_{a,p} d²(a,p) + μ·Σ_{a,p,n} max(0, margin + d²(a,p) − d²(a,n))] / #pairs + λ‖V‖²_F
//
// where p ranges over a's K target neighbours — its K nearest faces of the
// same person, chosen once in the input space as in Weinberger & Saul — and
// n over impostors: faces named as someone else, and faces the user rejected
// as a's person (Rejection: "this is not X" makes the face a negative for
// X's faces, even when it has no name). With μ = ½ and λ = 0 this is Eq. 5
// up to a factor 2, the slack ξ written as a hinge. The objective is
// non-convex in V (convex in W); it is solved by gradient descent in V with
// a bold-driver step (Solver). The gradient, 2·Σ w_ij (z_i − z_j)(x_i − x_j)ᵀ,
// is computed as 2·Zᵀ(L X) with L the weighted graph Laplacian of the active
// pairs, so a step costs O(n·Out·In) whatever the number of triplets.
//
// Impostors come from an active set: every Refresh steps each anchor keeps
// its Impostors nearest differently-named faces under the current map; the
// steps in between see only those (plus all rejected faces). A far face that
// crosses a margin between rebuilds, or a violating face beyond the nearest
// Impostors, is missed; Report.ActiveSetMisses counts the misses left at the
// end, and a test checks the result against the solver with every impostor.
//
// # Secret starting rotation
//
// RandomRotation(seed, d) draws a Haar-distributed orthogonal matrix from
// ChaCha8 keyed by the library's key material. Starting LMNN from it learns
// the same W as starting from the identity, up to rounding (the gradient is
// V·(…), so V = R·P at every step), but V, and so every stored faceprint V x, is in
// coordinates only the key holder knows: another library's faceprints of
// the same faces do not match them coordinate-wise. It does not hide
// distances, and pairs (x, V x) reveal V.
//
// # Thresholds under a learned map
//
// LMNN changes the scale of distances, so a suggestion threshold measured
// on plain descriptors does not apply under V. MatchThreshold carries it
// over so that as many of the library's unnamed faces receive a suggestion
// under V as under plain descriptors (the named faces cannot calibrate it:
// V was fitted to them).
//
// # MT-LMNN
//
// MTLMNN.Fit learns V₀ (square, so W₀ can stay I) and each task's V_k
// jointly, each task's loss using W₀ + W_k, with Eq. 7's regularisers
// γ₀‖W₀ − I‖²_F + γ·Σ_k‖W_k‖²_F. MTLMNN.FitTask holds a given W₀ fixed (the
// one the federation will share) and learns a new library's W_k alone.
//
// Everything is deterministic: the only randomness is the keyed rotation the
// caller passes in, and results do not depend on the number of workers.
// With GOEXPERIMENT=simd the kernels use AVX2/FMA (results may then differ in
// the last bits from a generic build).
package metric
