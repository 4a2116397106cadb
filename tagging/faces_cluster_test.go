package tagging

import (
	"testing"

	"github.com/veil-privacy/veil/tagging/cluster"
)

// TestNewClusterOptions: every algorithm has measured defaults that
// validate, with the distance thresholds.go gives it.
func TestNewClusterOptions(t *testing.T) {
	want := map[cluster.Algorithm]float64{
		cluster.ChineseWhispers: ChineseWhispersDistance, cluster.DBSCAN: DBSCANDistance,
		cluster.AverageLinkage: AverageLinkageDistance, cluster.CompleteLinkage: CompleteLinkageDistance,
	}
	for _, a := range cluster.Algorithms {
		o, err := NewClusterOptions(a)
		if err != nil {
			t.Errorf("default options of %s: %v", a, err)
			continue
		}
		if o.Distance != want[a] {
			t.Errorf("%s: distance %v, want %v", a, o.Distance, want[a])
		}
	}
	if _, err := NewClusterOptions("kmeans"); err == nil {
		t.Error("unknown algorithm accepted")
	}
}
