// Package collab is collaborative tagging after Irene (Zheng et al.,
// Sections II–III): a shared feature extractor ψ trained from many
// libraries' owners' decisions, on top of which every user's suggestions
// are made, and the experiment that measures whether it helps.
//
// ψ (Psi) is a trainable head on the pretrained 128-d descriptor,
// ψ(x) = x + r(x) with r a linear map or a small MLP whose last layer
// starts at zero, so an untrained ψ is exactly the identity and a user
// who adopts it starts exactly at today's suggestions.
//
// Training follows Irene's two stages. Bootstrapping (Bootstrap) trains
// a classifier φ over n classes on ψ's output, where each class is a
// hashed tag (tagging.HashedTag: HMAC of a person of one library under
// that library's key, so no name leaves and the same person in two
// libraries usually gets two classes), with the min-entropy regularised
// loss of Eq. 2 (package nn/loss's "irene" head, its E-step keeping a tag
// with probability α), by SGD through package nn/train, optionally under
// DP-SGD with one person of one library as the privacy unit. Tuning
// (SharedMetric) fits multi-task LMNN (package metric, Eq. 6–7) with one
// task per library and keeps only the shared W₀ = V₀ᵀV₀, which is all a
// library would exchange; suggestions are then made in V₀·ψ(x).
//
// # W₀ under DP
//
// W₀ is trained from the libraries' named faces, so exchanging it spends
// privacy too. SharedMetricDP is the exchange as a DP mechanism with the
// same unit (one person of one library): for Steps rounds, every library
// computes the gradient of its own LMNN loss (Eq. 7's task term, divided
// by its number of target pairs) with respect to V₀ in the stacked map
// [V₀; V_k], clips it to Clip in Frobenius norm and sends it; its V_k is
// updated locally and never sent. The coordinator adds Gaussian noise of
// standard deviation σ·2·Clip to each coordinate of the sum (a person of a
// library changes only that library's clipped gradient, by at most
// 2·Clip; the release is dp.Source.AddGaussian64's exact discretised
// noise), and steps V₀ with the noisy mean and the data-free gradient of
// ‖W₀ − I‖²_F. σ is the smallest for which the Steps Gaussian releases
// are (ε, δ)-DP by the RDP accountant; the event is charged to every
// user's ledger before any library computes, next to bootstrapping's, so
// the ε reported for shared_w0 is the ledger's composition of the two. Its
// cost is the noise: a 128×128 V₀ gets noise of norm about 2·Clip·σ·128
// per step against a signal of at most Clip per library.
//
// # ψ on public features
//
// With PsiOptions.Out different from Dim, ψ is not residual: it is a head
// ψ(x) = r(x)/‖r(x)‖ on public features, as the federation's head on the
// age/gender network's 2,048 region features (nn/arch; here with ReLU),
// started at a random map: the papers' setting, where the shared
// extractor is trained from public features rather than refined from a
// face descriptor. Run trains it when the splits carry public features
// (LoadSplitPublic), with the same hashed tags and its own ledgers (a
// deployment would share one of the two ψ), in both of Irene's stages:
// bootstrapping (shared_bootstrap_public), then W₀ tuned on ψ's PublicOut
// outputs by the same exchange as on the descriptors (shared_w0_public:
// SharedMetricDP under DP, charged to the public ledgers after
// bootstrapping, so its ε per user is the two composed; its bytes per
// user W0Bytes on top of ψ's).
//
// # Asynchronous training (Irene's Fig. 10)
//
// NewTagTask gives the users' hashed-tag data as a classification task
// for package fed/asyncsim, which simulates fed/strategy's asynchronous
// algorithms on it (collab itself imports nothing of the federation).
//
// The experiment (Run) simulates users from LFW's development training
// identities, trains the shared parts on their pooled hashed-tag data
// (centralised, in process: the libraries-as-clients federation comes
// later), and measures suggestions for held-out users made of the
// development test identities, who never train, with the library's
// suggestion rule (tagging/match) and thresholds chosen on the training
// users only.
//
// # Bytes per user
//
// Each method's report gives, beside its ε per user, the bytes one user's
// device would send and receive if the method ran federated as built
// (MethodReport.BytesPerUser): ψ's bootstrapping as FedAvg rounds of one
// local epoch (tagging/fedjoin trains whole epochs per round), each round
// ψ's download and its update's upload; W₀'s private exchange as its
// steps, each V₀'s clipped gradient up and the stepped V₀ down. Sizes are
// those of the federation's weights encoding (WireBytes: package
// fed/wire's header protobuf and 4 bytes per value, computed here since
// collab imports nothing of the federation, and checked against fed/wire
// in a test of cmd/veil/cli). They count the plaintext encoding: the chunk
// and gRPC framing and TLS are left out, and secure aggregation's masking
// adds to the uploads (docs/results.md measured 1.029× the plaintext for
// a 557,824-value head, mostly secagg/quant's padding to a multiple of its
// block; ψ's 16,512 values pad to 32,768, so its masked upload would be
// about 2× the plaintext: computed, not measured).
package collab
