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
// The experiment (Run) simulates users from LFW's development training
// identities, trains the shared parts on their pooled hashed-tag data
// (centralised, in process: the libraries-as-clients federation comes
// later), and measures suggestions for held-out users made of the
// development test identities, who never train, with the library's
// suggestion rule (tagging/match) and thresholds chosen on the training
// users only.
package collab
