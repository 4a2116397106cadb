package tagbench

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/tagging/match"
)

// Latency is the time of one suggestion query against a gallery.
type Latency struct {
	Faces  int `json:"faces"`
	People int `json:"people"`
	// CPUMsPerQuery is the CPU time of one query (one goroutine, so one
	// core), which a busy shared machine distorts less than wall time.
	CPUMsPerQuery float64 `json:"cpu_ms_per_query"`
	// WallMsPerQuery is the best wall time per query over five rounds.
	WallMsPerQuery float64 `json:"wall_ms_per_query"`
	// BudgetRatio is CPUMsPerQuery / 20 ms (the budget at 100k).
	BudgetRatio float64 `json:"budget_ratio"`
}

// latencyAt times Nearest on one goroutine over a synthetic gallery of
// random unit descriptors, ten faces per person.
func latencyAt(n int, seed uint64) (Latency, error) {
	const dim = 128
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	unit := func() []float32 {
		v := make([]float32, dim)
		var s float64
		for i := range v {
			x := rng.NormFloat64()
			v[i] = float32(x)
			s += x * x
		}
		for i := range v {
			v[i] /= float32(math.Sqrt(s))
		}
		return v
	}
	g, err := match.NewGallery(dim)
	if err != nil {
		return Latency{}, err
	}
	for i := 0; i < n; i++ {
		if err := g.Add(int64(i+1), int64(i+1), int64(i/10+1), unit()); err != nil {
			return Latency{}, err
		}
	}
	queries := max(16, 2_000_000/n)
	qs := make([][]float32, queries)
	for i := range qs {
		qs[i] = unit()
	}
	var best, cpu time.Duration
	var sink float64
	for rep := 0; rep < 5; rep++ {
		c0, t0 := cputime.Process(), time.Now()
		for _, q := range qs {
			b, _ := g.Nearest(q, nil)
			sink += b.Distance
		}
		d, c := time.Since(t0), cputime.Process()-c0
		if rep == 0 || d < best {
			best = d
		}
		if rep == 0 || c < cpu {
			cpu = c
		}
	}
	_ = sink
	per := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(len(qs)) }
	return Latency{Faces: n, People: (n + 9) / 10, CPUMsPerQuery: per(cpu), WallMsPerQuery: per(best), BudgetRatio: per(cpu) / 20}, nil
}
