package eval

import "fmt"

// BCubed holds the BCubed scores of a clustering against the true classes
// (Bagga and Baldwin 1998; Amigó et al. 2009). For every item, precision
// is the share of its cluster that has its class and recall the share of
// its class that is in its cluster; both are averaged over items, and F1
// is the harmonic mean of the two averages. Unlike pair counting, BCubed
// weighs every item equally, so one large cluster does not dominate.
type BCubed struct {
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

// BCubedScores scores the cluster labels against the class labels of the
// same items. Labels are arbitrary integers (a singleton cluster needs a
// label of its own). It fails when the lengths differ or there are no
// items.
func BCubedScores(clusters, classes []int) (BCubed, error) {
	if len(clusters) != len(classes) {
		return BCubed{}, fmt.Errorf("eval: %d cluster labels for %d class labels", len(clusters), len(classes))
	}
	if len(clusters) == 0 {
		return BCubed{}, fmt.Errorf("eval: no items to score")
	}
	type cell struct{ cluster, class int }
	both := map[cell]int{}
	perCluster := map[int]int{}
	perClass := map[int]int{}
	for i, c := range clusters {
		both[cell{c, classes[i]}]++
		perCluster[c]++
		perClass[classes[i]]++
	}
	// Each item of a (cluster, class) cell of n items has precision
	// n/|cluster| and recall n/|class|. The sums run in the items' order,
	// never a map's, so that the same labels give bit-identical scores.
	var p, r float64
	for i, c := range clusters {
		n := float64(both[cell{c, classes[i]}])
		p += n / float64(perCluster[c])
		r += n / float64(perClass[classes[i]])
	}
	total := float64(len(clusters))
	s := BCubed{Precision: p / total, Recall: r / total}
	if s.Precision+s.Recall > 0 {
		s.F1 = 2 * s.Precision * s.Recall / (s.Precision + s.Recall)
	}
	return s, nil
}
