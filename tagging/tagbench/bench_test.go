package tagbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/cluster"
)

// lfwOf writes the splits as the people lists of an LFW folder (person p
// of a split named "<split>_p", with as many photos as faces) and returns
// a source whose describer gives each photo its face's descriptor (the
// photos themselves are never read).
func lfwOf(t *testing.T, splits map[string]*Split) *eval.LFWSource {
	t.Helper()
	dir := t.TempDir()
	lfw := dataset.LFW{Dir: dir}
	byPath := map[string][]float32{}
	for file, s := range splits {
		faces := make([][][]float32, s.people)
		for i, p := range s.identity {
			faces[p] = append(faces[p], s.descs[i])
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d\n", s.people)
		for p, f := range faces {
			name := fmt.Sprintf("%s_%03d", strings.TrimSuffix(file, ".txt"), p)
			fmt.Fprintf(&b, "%s\t%d\n", name, len(f))
			for i, d := range f {
				byPath[lfw.ImagePath(name, i+1)] = d
			}
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := eval.NewLFWSource(eval.LFWSourceOptions{Dir: dir, Workers: 2, Describe: func(path string) (eval.Described, error) {
		d, ok := byPath[path]
		if !ok {
			return eval.Described{}, fmt.Errorf("no photo %s", path)
		}
		return eval.Described{Descriptor: d}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// A split keeps the people with one photo (strangers) and those with at
// least MinImages, in list order, their photos in order.
func TestLoadSplit(t *testing.T) {
	s := synthSplit(8, []int{6, 2, 5, 4}, 3)
	got, err := LoadSplit(lfwOf(t, map[string]*Split{"list.txt": s}), "list.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := s.subset("list.txt", func(p int) bool { return p != 1 && p != 3 })
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got.people != 5 || !reflect.DeepEqual(got.stranger, []bool{false, false, true, true, true}) {
		t.Errorf("%d people, strangers %v", got.people, got.stranger)
	}
}

func TestNewRefuses(t *testing.T) {
	src := lfwOf(t, map[string]*Split{"list.txt": synthSplit(1, []int{5}, 1)})
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no source", Options{Trials: 1}, "no LFW source"},
		{"no trials", Options{Source: src}, "trials"},
		{"no learned trials", Options{Source: src, Trials: 1, Learned: true}, "learned-metric trials"},
		{"negative people", Options{Source: src, Trials: 1, LearnedPeople: -1}, "negative"},
		{"negative photos", Options{Source: src, Trials: 1, IndexPhotos: -1}, "negative"},
		{"indexing without a pipeline", Options{Source: src, Trials: 1, IndexPhotos: 3}, "needs a pipeline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// A run reports the protocols' figures on both splits: the suggestions at
// the default thresholds with 1 and 3 named photos (the mean of the same
// trials scored directly), every algorithm's clustering at its default
// distance, incremental joining on the test split, the tuning with its two
// folds, and a latency row per gallery size.
func TestBenchRun(t *testing.T) {
	train := synthSplit(11, []int{6, 5, 7, 6, 5, 6, 8, 5}, 6)
	test := synthSplit(12, []int{5, 6, 5, 7, 6, 5}, 5)
	src := lfwOf(t, map[string]*Split{eval.LFWDevTrain: train, eval.LFWDevTest: test})
	b, err := New(Options{Source: src, Trials: 2, Tune: true, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Trials != 2 || rep.Defaults["suggest_distance"] != tagging.SuggestDistance || rep.Defaults["suggest_margin"] != tagging.SuggestMargin ||
		rep.Indexing != nil || rep.LearnedMetric != nil || !(rep.WallS > 0) {
		t.Fatalf("report %+v", rep)
	}
	def := tagging.DefaultSuggestOptions()
	var rows []SuggestReport
	for k, s := range []*Split{train, test} {
		for _, named := range []int{1, 3} {
			tr, err := suggestTrials(s, named, 2, 3)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, SuggestReport{Split: []string{eval.LFWDevTrain, eval.LFWDevTest}[k], Named: named, SuggestScore: meanScoreAt(tr, def.Distance, def.Margin)})
		}
	}
	for i := range rows {
		got := rep.Suggest[i]
		got.Goal = false
		if len(rep.Suggest) != len(rows) || got != rows[i] {
			t.Fatalf("suggestion row %d: %+v, want %+v", i, rep.Suggest[i], rows[i])
		}
	}
	if len(rep.Clusters) != 2*len(cluster.Algorithms) {
		t.Fatalf("%d clustering rows", len(rep.Clusters))
	}
	for i, c := range rep.Clusters {
		if c.Algorithm != cluster.Algorithms[i%len(cluster.Algorithms)] || c.F1 < 0.9 || c.Clusters < 1 {
			t.Errorf("clustering row %d: %+v", i, c)
		}
	}
	if in := rep.Incremental; in.Algorithm != tagging.DefaultClusterAlgorithm || in.LaterShare != 0.2 || in.Batch.F1 < 0.9 || in.Incremental.F1 < 0.9 {
		t.Errorf("incremental %+v", in)
	}
	if tu := rep.Tune; tu == nil || len(tu.CrossValidation) != 2 || len(tu.Clusters) != 4 || tu.Suggest.Known == 0 {
		t.Errorf("tuning %+v", rep.Tune)
	}
	if len(rep.Latency) != len(latencyFaces()) {
		t.Fatalf("%d latency rows", len(rep.Latency))
	}
	for i, l := range rep.Latency {
		if l.Faces != latencyFaces()[i] || l.People != (l.Faces+9)/10 || !(l.WallMsPerQuery > 0) || l.BudgetRatio != l.CPUMsPerQuery/20 {
			t.Errorf("latency row %+v", l)
		}
	}
}
