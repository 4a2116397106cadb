package tagging

import "github.com/veil-privacy/veil/tagging/cluster"

// Every distance threshold of tagging, in one place. Distances are
// Euclidean between the face pipeline's 128-d descriptors (Distance).
// Each value was chosen on LFW's development training identities
// (peopleDevTrain.txt: 298 people with at least 5 photos, named, and 2,854
// people with one photo, strangers) by
//
//	veil bench tagging --tune --json
//
// (cmd/veil/cli/bench_tagging.go); LFW's development test identities only
// evaluate the choice. The descriptors were the face pipeline's central
// faces with detector tiny and both alignments, through veil verify's
// descriptor cache; a library indexes with both detectors (PipelineOptions),
// which finds the same faces with the same descriptor network.
const (
	// SuggestDistance and SuggestMargin: a person is suggested for a face
	// only when one of the person's named faces is within SuggestDistance
	// and every other person's nearest named face is farther by more than
	// SuggestMargin (abstain when two people are about as close). The
	// tuning grid (distance 0.30–0.65 by 0.01, margin 0–0.10 by 0.01, three
	// named photos per person, random choices of the named photos averaged)
	// keeps the largest coverage among settings with at least 98% precision
	// and under 5% of strangers' faces suggested: 0.50 and 0.04 (precision
	// 99.79%, coverage 95.4%, strangers 4.6% on the training identities,
	// mean of 5 random choices of the named photos; two-fold
	// cross-validation over identities chose 0.50/0.02 on each half and
	// scored 99.91%/96.7%/4.4% and 99.73%/96.5%/4.8% on the other half).
	// Strangers, not precision, bind: the margin is what keeps them under
	// 5%. A 3-NN majority vote chosen by the same criterion did about as
	// well with three named photos (distance 0.49: 99.84%, 95.3%, 4.0%)
	// but can suggest nobody named in fewer than two photos, the common
	// case when a user starts; the nearest-face rule covers 84% of the
	// other faces from one named photo at 99.6% precision.
	SuggestDistance = 0.50
	SuggestMargin   = 0.04
	// SearchDistance: veil search lists library faces this close to a
	// face of the query photo (the suggestion distance: a listed face is
	// one that could have been suggested).
	SearchDistance = SuggestDistance

	// Clustering: each algorithm's distance maximises BCubed F1 over
	// every face of the training library (all unnamed), on a grid of 0.025
	// steps (DBSCAN also over MinPoints 1–3). Best F1 on the training
	// identities: Chinese whispers 0.948 (P 0.953, R 0.943) at 0.45,
	// average linkage 0.943 at 0.50, DBSCAN 0.929 at 0.425 with MinPoints
	// 3, complete linkage 0.819 at 0.575.

	// ChineseWhispersDistance is Chinese whispers' edge distance.
	ChineseWhispersDistance = 0.45
	// DBSCANDistance is DBSCAN's ε and DBSCANMinPoints its core size.
	DBSCANDistance  = 0.425
	DBSCANMinPoints = 3
	// AverageLinkageDistance is where the average-linkage tree is cut.
	AverageLinkageDistance = 0.50
	// CompleteLinkageDistance is where the complete-linkage tree is cut.
	CompleteLinkageDistance = 0.575
)

// DefaultClusterAlgorithm is the algorithm veil faces clusters uses:
// Chinese whispers had the best F1 on the training identities (and on the
// test identities: 0.961 against average linkage's 0.951), and unlike the
// linkages it needs memory only for the pairs within its distance, not
// all n(n−1)/2 of them, so it serves libraries of any size.
const DefaultClusterAlgorithm = cluster.ChineseWhispers
