package eval

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
)

// fakeLFW writes the people lists of an LFW folder (file name → people)
// and returns the folder and a describer that gives each photo its
// person's descriptors in order (the photos themselves are never read:
// what is tested is which photos are described and how they are grouped).
func fakeLFW(t *testing.T, lists map[string][]LinkagePerson) (string, Describer) {
	t.Helper()
	dir := t.TempDir()
	lfw := dataset.LFW{Dir: dir}
	byPath := map[string][]float32{}
	for file, people := range lists {
		var b strings.Builder
		fmt.Fprintf(&b, "%d\n", len(people))
		for _, p := range people {
			fmt.Fprintf(&b, "%s\t%d\n", p.Name, len(p.Descriptors))
			for i, d := range p.Descriptors {
				byPath[lfw.ImagePath(p.Name, i+1)] = d
			}
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, func(path string) (Described, error) {
		d, ok := byPath[path]
		if !ok {
			return Described{}, fmt.Errorf("no photo %s", path)
		}
		return Described{Descriptor: d}, nil
	}
}

// named gives the people of a synthetic pool distinct names.
func named(pool []LinkagePerson, prefix string) []LinkagePerson {
	for i := range pool {
		pool[i].Name = fmt.Sprintf("%s_%03d", prefix, i)
	}
	return pool
}

func TestNewLFWSourceRefuses(t *testing.T) {
	desc := func(string) (Described, error) { return Described{}, nil }
	for _, tc := range []struct {
		name string
		o    LFWSourceOptions
		want string
	}{
		{"no folder", LFWSourceOptions{Describe: desc}, "no LFW folder"},
		{"no describer", LFWSourceOptions{Dir: "lfw"}, "no describer"},
		{"negative workers", LFWSourceOptions{Dir: "lfw", Describe: desc, Workers: -1}, "workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewLFWSource(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// People keeps the people whose number of photos the filter accepts, in
// list order over the files, one descriptor per photo (empty where the
// photo gave none, which WithDescriptors drops), with a progress bar on
// the writer given.
func TestLFWSourcePeople(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := named(synthPool(rng, 3, 4, 4, 0.1), "A")
	b := named(append(synthPool(rng, 1, 1, 4, 0.1), synthPool(rng, 2, 5, 4, 0.1)...), "B")
	b[2].Descriptors[1] = nil // a photo without a face
	dir, desc := fakeLFW(t, map[string][]LinkagePerson{"a.txt": a, "b.txt": b})
	var bar bytes.Buffer
	src, err := NewLFWSource(LFWSourceOptions{Dir: dir, Describe: desc, Workers: 2, Progress: &bar})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files []string
		keep  func(int) bool
		want  []LinkagePerson
	}{
		{"at least 4", []string{"a.txt", "b.txt"}, func(n int) bool { return n >= 4 }, []LinkagePerson{a[0], a[1], a[2], b[1], b[2]}},
		{"one photo", []string{"b.txt", "a.txt"}, func(n int) bool { return n == 1 }, []LinkagePerson{b[0]}},
		{"five, second list first", []string{"b.txt"}, func(n int) bool { return n == 5 }, []LinkagePerson{b[1], b[2]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := src.People(tc.files, tc.keep, "describing "+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v\nwant %v", got, tc.want)
			}
			if !strings.Contains(bar.String(), "describing "+tc.name) {
				t.Errorf("no progress bar %q in %q", "describing "+tc.name, bar.String())
			}
		})
	}
	kept := WithDescriptors([]LinkagePerson{b[2]})
	if len(kept) != 1 || len(kept[0].Descriptors) != 4 || kept[0].Name != b[2].Name {
		t.Errorf("WithDescriptors kept %v", kept)
	}
	if _, err := src.People([]string{"a.txt"}, func(n int) bool { return n > 10 }, "none"); err == nil || !strings.Contains(err.Error(), "no person in a.txt") {
		t.Errorf("no one kept: error %v", err)
	}
	if _, err := src.People([]string{"missing.txt"}, func(int) bool { return true }, "none"); err == nil {
		t.Error("a missing people list was read")
	}
}

// The LFW benchmarks measure exactly what the protocols measure on the
// same people: MeasureLinkageLFW is MeasureLinkage on the development
// lists' people with at least four photos, MeasureMetricGainLFW is
// MeasureMetricGain on a split's people with at least five photos and its
// strangers with one.
func TestLFWBenchmarksRunTheProtocols(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	train := named(synthPool(rng, 12, 5, 8, 0.1), "T")
	test := named(synthPool(rng, 12, 4, 8, 0.1), "S")
	few := named(synthPool(rng, 3, 3, 8, 0.1), "F") // fewer than four photos: left out
	people, strangers := nuisancePool(rng, 12, 6, 20, 8)
	dir, desc := fakeLFW(t, map[string][]LinkagePerson{
		"peopleDevTrain.txt": append(append(train, few...), append(named(people, "P"), named(strangers, "X")...)...),
		"peopleDevTest.txt":  test,
	})
	src, err := NewLFWSource(LFWSourceOptions{Dir: dir, Describe: desc, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	lo := LinkageOptions{Metrics: []LinkMetric{LinkIdentity}, Known: []int{2, 4}, Seed: 9}
	got, err := MeasureLinkageLFW(context.Background(), src, lo)
	if err != nil {
		t.Fatal(err)
	}
	var pool []LinkagePerson
	for _, p := range append(append(append([]LinkagePerson{}, train...), people...), test...) {
		if len(p.Descriptors) >= LinkageMinPhotos {
			pool = append(pool, p)
		}
	}
	want, err := MeasureLinkage(context.Background(), pool, lo)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.LinkageReport, want) || !(got.WallS > 0) {
		t.Fatalf("bench %+v\nprotocol %+v", got.LinkageReport, want)
	}

	mo := MetricBenchOptions{Splits: []string{"train"}, Gain: MetricGainOptions{Named: []int{1}, ReviewThreshold: 0.6, ReviewShare: 0.5, Seed: 5}}
	var progress bytes.Buffer
	mo.Progress = &progress
	mg, err := MeasureMetricGainLFW(context.Background(), src, mo)
	if err != nil {
		t.Fatal(err)
	}
	var five []LinkagePerson
	for _, p := range append(append([]LinkagePerson{}, train...), people...) {
		if len(p.Descriptors) >= MetricGainMinPhotos {
			five = append(five, p)
		}
	}
	direct, err := MeasureMetricGain(context.Background(), five, strangers, mo.Gain)
	if err != nil {
		t.Fatal(err)
	}
	if len(mg.Splits) != 1 || mg.Splits[0].Split != "train" || len(mg.Splits[0].Report.Results) != 1 || len(direct.Results) != 1 {
		t.Fatalf("report %+v", mg)
	}
	g, d := *mg.Splits[0].Report, *direct
	g.Results[0].LearnSeconds, d.Results[0].LearnSeconds = 0, 0
	if !reflect.DeepEqual(g, d) {
		t.Fatalf("bench %+v\nprotocol %+v", g, d)
	}
	if progress.String() != "train split measured\n" {
		t.Errorf("progress %q", progress.String())
	}
	if _, err := MeasureMetricGainLFW(context.Background(), src, MetricBenchOptions{Splits: []string{"train", "tset"}}); err == nil || !strings.Contains(err.Error(), `"tset"`) {
		t.Errorf("a mistyped split: error %v", err)
	}
}
