package tagbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/cluster"
)

// latencyFaces are the gallery sizes of the suggestion-latency figures.
func latencyFaces() []int { return []int{1000, 10000, 100000} }

// Report is veil bench tagging's report.
type Report struct {
	Trials      int             `json:"trials"`
	Tune        *TuneReport     `json:"tune,omitempty"`
	Suggest     []SuggestReport `json:"suggest"`
	Clusters    []ClusterScore  `json:"clusters"`
	Incremental Incremental     `json:"incremental"`
	Latency     []Latency       `json:"latency"`
	// Indexing is veil library add's end-to-end rate on every core
	// (tagging.MeasureIndexing) over Options.IndexPhotos LFW photos.
	Indexing *tagging.Throughput `json:"indexing,omitempty"`
	// LearnedMetric holds the figures after the library learns its metric
	// (Options.Learned; learned.go).
	LearnedMetric []*LearnedReport   `json:"learned_metric,omitempty"`
	Defaults      map[string]float64 `json:"defaults"`
	WallS         float64            `json:"wall_s"`
}

// Options configure a Bench.
type Options struct {
	// Source describes LFW's photos (required).
	Source *eval.LFWSource
	// Trials is the number of random choices of the named photos
	// averaged per figure (at least 1).
	Trials int
	// Tune chooses the thresholds again on the training identities.
	Tune bool
	// Learned adds the figures after the library learns its metric, on
	// the test identities, over LearnedTrials (at least 1) choices of the
	// named photos, with the first LearnedPeople named people and the same
	// share of strangers (0: all), learning with Learn (the zero value is
	// what a library uses).
	Learned       bool
	LearnedTrials int
	LearnedPeople int
	Learn         tagging.LearnOptions
	// IndexPhotos > 0 indexes that many LFW photos into a throw-away
	// library with Pipeline (then required) to measure indexing throughput.
	IndexPhotos int
	Pipeline    *face.Pipeline
	// Seed seeds the named photos' choice, the clustering order and the
	// synthetic descriptors.
	Seed uint64
}

// Bench measures tagging as a user would meet it (veil bench tagging).
type Bench struct {
	o Options
}

// New checks o.
func New(o Options) (*Bench, error) {
	switch {
	case o.Source == nil:
		return nil, errors.New("tagbench: no LFW source")
	case o.Trials < 1:
		return nil, fmt.Errorf("tagbench: %d trials, want at least 1", o.Trials)
	case o.Learned && o.LearnedTrials < 1:
		return nil, fmt.Errorf("tagbench: %d learned-metric trials, want at least 1", o.LearnedTrials)
	case o.LearnedPeople < 0:
		return nil, fmt.Errorf("tagbench: %d learned-metric people is negative", o.LearnedPeople)
	case o.IndexPhotos < 0:
		return nil, fmt.Errorf("tagbench: %d photos to index is negative", o.IndexPhotos)
	case o.IndexPhotos > 0 && o.Pipeline == nil:
		return nil, errors.New("tagbench: indexing photos needs a pipeline")
	}
	return &Bench{o: o}, nil
}

// Run lays out LFW's development training identities (where the
// thresholds were chosen) and test identities (never used to choose
// anything) as libraries, and measures everything the options ask for.
func (b *Bench) Run(ctx context.Context) (*Report, error) {
	start := time.Now()
	var splits [2]*Split
	for i, file := range []string{eval.LFWDevTrain, eval.LFWDevTest} {
		s, err := LoadSplit(b.o.Source, file)
		if err != nil {
			return nil, err
		}
		splits[i] = s
	}
	train, test := splits[0], splits[1]
	res := &Report{Trials: b.o.Trials, Defaults: map[string]float64{
		"suggest_distance": tagging.SuggestDistance, "suggest_margin": tagging.SuggestMargin,
	}}
	var err error
	if b.o.Tune {
		if res.Tune, err = tune(train, b.o.Trials, b.o.Seed); err != nil {
			return nil, err
		}
	}
	for _, s := range splits {
		if err := b.atDefaults(s, res); err != nil {
			return nil, err
		}
	}
	o, err := tagging.NewClusterOptions(tagging.DefaultClusterAlgorithm)
	if err != nil {
		return nil, err
	}
	if res.Incremental, err = incrementalAt(test, o, 0.2, b.o.Seed); err != nil {
		return nil, err
	}
	for _, n := range latencyFaces() {
		l, err := latencyAt(n, b.o.Seed)
		if err != nil {
			return nil, err
		}
		res.Latency = append(res.Latency, l)
	}
	if b.o.Learned {
		ls := firstPeople(test, b.o.LearnedPeople)
		for _, named := range []int{1, 3} {
			r, err := learnedTagging(ctx, ls, named, b.o.LearnedTrials, b.o.Seed, b.o.Learn)
			if err != nil {
				return nil, err
			}
			res.LearnedMetric = append(res.LearnedMetric, r)
		}
	}
	if b.o.IndexPhotos > 0 {
		if res.Indexing, err = measureIndexing(ctx, b.o.Source.Dir(), b.o.Pipeline, b.o.IndexPhotos); err != nil {
			return nil, err
		}
	}
	res.WallS = time.Since(start).Seconds()
	return res, nil
}

// atDefaults adds split s's suggestion figures with 1 and 3 named photos
// and its clustering figures at the default settings.
func (b *Bench) atDefaults(s *Split, res *Report) error {
	def := tagging.DefaultSuggestOptions()
	for _, named := range []int{1, 3} {
		tr, err := suggestTrials(s, named, b.o.Trials, b.o.Seed)
		if err != nil {
			return err
		}
		m := meanScoreAt(tr, def.Distance, def.Margin)
		res.Suggest = append(res.Suggest, SuggestReport{Split: s.Name, Named: named, SuggestScore: m,
			Goal: named == 3 && m.Precision >= goal.precision && m.Coverage >= goal.coverage && m.StrangersSuggested < goal.strangers})
	}
	cs, err := defaultClusters(s, b.o.Seed, 1)
	if err != nil {
		return err
	}
	res.Clusters = append(res.Clusters, cs...)
	return nil
}

// defaultClusters scores every algorithm at its default options (seed
// seed) with the distance scaled by scale, on split s.
func defaultClusters(s *Split, seed uint64, scale float64) ([]ClusterScore, error) {
	var out []ClusterScore
	for _, a := range cluster.Algorithms {
		o, err := tagging.NewClusterOptions(a)
		if err != nil {
			return nil, err
		}
		o.Seed = seed
		o.Distance *= scale
		c, err := clusterAt(s, o)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// meanScoreAt is the mean over the trials of scoreSuggest at one setting.
func meanScoreAt(trials [][]query, dist, margin float64) SuggestScore {
	ss := make([]SuggestScore, len(trials))
	for i, q := range trials {
		ss[i] = scoreSuggest(q, dist, margin)
	}
	return meanScores(ss)
}

// measureIndexing links the first photo of the first n people of LFW
// into a temporary folder and indexes it into a throw-away library.
func measureIndexing(ctx context.Context, lfwDir string, p *face.Pipeline, n int) (*tagging.Throughput, error) {
	root := filepath.Join(lfwDir, "images_deepfunneled")
	people, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("tagbench: %w", err)
	}
	dir, err := os.MkdirTemp("", "veil-bench-tagging-")
	if err != nil {
		return nil, fmt.Errorf("tagbench: %w", err)
	}
	defer os.RemoveAll(dir)
	k := 0
	for _, person := range people {
		if k == n {
			break
		}
		name := person.Name() + "_0001.jpg"
		if err := os.Symlink(filepath.Join(root, person.Name(), name), filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("tagbench: %w", err)
		}
		k++
	}
	return tagging.MeasureIndexing(ctx, []string{dir}, tagging.IndexOptions{Pipeline: p})
}
