// Package tagbench measures tagging as a user would meet it, on LFW's
// development identities (veil bench tagging): the library and its
// thresholds are tagging's; this package plays the user and scores.
//
// A split (LoadSplit) is one LFW people list laid out as a user's library:
// the people with at least MinImages photos, whom the user names, and the
// people with a single photo, strangers never named; each photo has one
// face, its central one, described through an eval.LFWSource.
//
// Bench.Run reports, at the default thresholds (tagging/thresholds.go):
// the suggestions' precision on named people's faces, their coverage and
// the share of strangers' faces that get one, with 1 and 3 named photos
// per person averaged over random choices of them; each clustering
// algorithm's BCubed scores; incremental joining against clustering at
// once; the processor time of one suggestion query on synthetic galleries;
// and, when asked, indexing throughput, a new choice of the thresholds on
// the training identities (with two-fold cross-validation over
// identities), and the same figures after a throw-away library learns its
// metric (learned.go). Figures depend on the seed only through the choices
// of named photos, the clustering order and the synthetic descriptors.
package tagbench
