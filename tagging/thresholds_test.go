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

// TestDefaultSuggestOptions: the measured suggestion thresholds validate
// and are thresholds.go's.
func TestDefaultSuggestOptions(t *testing.T) {
	o := DefaultSuggestOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if o.Distance != SuggestDistance || o.Margin != SuggestMargin {
		t.Errorf("defaults %+v, want distance %v margin %v", o, SuggestDistance, SuggestMargin)
	}
}
