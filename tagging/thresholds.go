package tagging

// Every distance threshold of tagging, in one place. Distances are
// Euclidean between the face pipeline's 128-d descriptors (Distance).
// Each value was chosen on LFW's development training identities
// (peopleDevTrain.txt) by the command given with it; LFW's development
// test identities only evaluate the choice (veil bench tagging).
const (
	// SuggestDistance: a person is suggested for a face only when one of
	// the person's named faces is this close.
	SuggestDistance = 0.45
	// SuggestMargin: and only when no other person's nearest named face is
	// within SuggestMargin of that distance (abstain when two people are
	// about as close).
	SuggestMargin = 0.0
	// SearchDistance: veil search lists library faces this close to a
	// face of the query photo.
	SearchDistance = SuggestDistance

	// ChineseWhispersDistance is Chinese whispers' edge distance.
	ChineseWhispersDistance = 0.45
	// DBSCANDistance is DBSCAN's ε and DBSCANMinPoints its core size.
	DBSCANDistance  = 0.45
	DBSCANMinPoints = 2
	// AverageLinkageDistance is where the average-linkage tree is cut.
	AverageLinkageDistance = 0.5
	// CompleteLinkageDistance is where the complete-linkage tree is cut.
	CompleteLinkageDistance = 0.55
)

// DefaultClusterAlgorithm is the algorithm veil faces clusters uses.
const DefaultClusterAlgorithm = AverageLinkage
