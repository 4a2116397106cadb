package tagbench

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/tagging/cluster"
)

// ClusterScore is one clustering setting's BCubed scores.
type ClusterScore struct {
	Algorithm cluster.Algorithm `json:"algorithm"`
	Distance  float64           `json:"distance"`
	MinPoints int               `json:"min_points,omitempty"`
	Clusters  int               `json:"clusters"`
	eval.BCubed
	WallS float64 `json:"wall_s"`
}

// clusterGrid scores every algorithm over a grid of distances on the
// split's faces (all unnamed), and returns each algorithm's best F1.
func clusterGrid(s *Split, seed uint64) ([]ClusterScore, error) {
	const maxD = 0.7
	var out []ClusterScore
	start := time.Now()
	g, err := cluster.NewNeighbourGraph(s.descs, maxD)
	if err != nil {
		return nil, err
	}
	graphS := time.Since(start).Seconds()
	score := func(o cluster.Options, labels []int, wall float64) (ClusterScore, error) {
		o.Distance = math.Round(o.Distance*1000) / 1000
		return scoreClusters(s, o, labels, wall)
	}
	keep := func(best *ClusterScore, c ClusterScore) {
		if c.F1 > best.F1 {
			*best = c
		}
	}
	for _, a := range []cluster.Algorithm{cluster.ChineseWhispers, cluster.DBSCAN} {
		var best ClusterScore
		for _, mp := range []int{1, 2, 3} {
			if a == cluster.ChineseWhispers && mp > 1 {
				break
			}
			for d := 0.30; d <= maxD+1e-9; d += 0.025 {
				o := cluster.Options{Algorithm: a, Distance: d, MinPoints: mp, Iterations: 100, Seed: seed}
				if a == cluster.ChineseWhispers {
					o.MinPoints = 0
				}
				t0 := time.Now()
				l, err := g.Cluster(o)
				if err != nil {
					return nil, err
				}
				c, err := score(o, l, time.Since(t0).Seconds()+graphS)
				if err != nil {
					return nil, err
				}
				keep(&best, c)
			}
		}
		out = append(out, best)
	}
	for _, a := range []cluster.Algorithm{cluster.AverageLinkage, cluster.CompleteLinkage} {
		t0 := time.Now()
		den, err := cluster.NewDendrogram(s.descs, a)
		if err != nil {
			return nil, err
		}
		wall := time.Since(t0).Seconds()
		var best ClusterScore
		for d := 0.30; d <= 1.0+1e-9; d += 0.025 {
			c, err := score(cluster.Options{Algorithm: a, Distance: d}, den.Cut(d), wall)
			if err != nil {
				return nil, err
			}
			keep(&best, c)
		}
		out = append(out, best)
	}
	return out, nil
}

// clusterAt scores one setting on a split.
func clusterAt(s *Split, o cluster.Options) (ClusterScore, error) {
	t0 := time.Now()
	l, err := cluster.Faces(s.descs, o)
	if err != nil {
		return ClusterScore{}, err
	}
	return scoreClusters(s, o, l, time.Since(t0).Seconds())
}

// scoreClusters scores the labels of the split's faces that the setting
// o gave in wall seconds.
func scoreClusters(s *Split, o cluster.Options, labels []int, wall float64) (ClusterScore, error) {
	b, err := eval.BCubedScores(labels, s.identity)
	n := 0
	for _, l := range labels {
		n = max(n, l+1)
	}
	return ClusterScore{Algorithm: o.Algorithm, Distance: o.Distance, MinPoints: o.MinPoints, Clusters: n, BCubed: b, WallS: wall}, err
}

// Incremental clusters a random share of the split's faces at once and
// joins the rest incrementally, as photos added later would be.
type Incremental struct {
	Algorithm   cluster.Algorithm `json:"algorithm"`
	LaterShare  float64           `json:"later_share"`
	Batch       eval.BCubed       `json:"batch"`
	Incremental eval.BCubed       `json:"incremental"`
}

func incrementalAt(s *Split, o cluster.Options, later float64, seed uint64) (Incremental, error) {
	rng := rand.New(rand.NewPCG(seed, 0x1c))
	perm := rng.Perm(len(s.descs))
	cut := int(float64(len(perm)) * (1 - later))
	var first, rest [][]float32
	var truth []int
	for _, i := range perm[:cut] {
		first = append(first, s.descs[i])
		truth = append(truth, s.identity[i])
	}
	for _, i := range perm[cut:] {
		rest = append(rest, s.descs[i])
		truth = append(truth, s.identity[i])
	}
	l1, err := cluster.Faces(first, o)
	if err != nil {
		return Incremental{}, err
	}
	l2, err := cluster.Join(first, l1, rest, o)
	if err != nil {
		return Incremental{}, err
	}
	inc, err := eval.BCubedScores(append(l1, l2...), truth)
	if err != nil {
		return Incremental{}, err
	}
	all := append(append([][]float32{}, first...), rest...)
	lb, err := cluster.Faces(all, o)
	if err != nil {
		return Incremental{}, err
	}
	batch, err := eval.BCubedScores(lb, truth)
	return Incremental{Algorithm: o.Algorithm, LaterShare: later, Batch: batch, Incremental: inc}, err
}
