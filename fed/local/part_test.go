package local_test

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/local/localtest"
	"github.com/veil-privacy/veil/training"
)

// recording wraps a describer, recording the training images it is asked
// to describe (the LFW-style folder's Train_* people).
type recording struct {
	mu    sync.Mutex
	paths map[string]int
}

func (r *recording) wrap(d eval.Describer) eval.Describer {
	return func(path string) (eval.Described, error) {
		if strings.Contains(filepath.Base(path), "Train_") {
			r.mu.Lock()
			r.paths[filepath.Base(filepath.Dir(path))]++
			r.mu.Unlock()
		}
		return d(path)
	}
}

// TestDataPartDescribesOnlyItsImages: a federated client with --partition
// 2/3 described every training image before keeping its third. Loading
// with DataOptions.Part describes only the part's people, and gives the
// same data as part 2 of local.Split on the whole set.
func TestDataPartDescribesOnlyItsImages(t *testing.T) {
	dir := t.TempDir()
	full, o := localtest.Data(t, dir, 6)
	split := dataset.PartitionOptions{Clients: 3, Seed: 7}
	parts, err := local.Split(full, split)
	if err != nil {
		t.Fatal(err)
	}
	want := parts[1]

	inputs, teacher := &recording{paths: map[string]int{}}, &recording{paths: map[string]int{}}
	in, tc := o.Describers.Inputs, o.Describers.Teacher
	o.Describers = training.Describers{
		Inputs: func() (eval.Describer, int, error) {
			d, n, err := in()
			return inputs.wrap(d), n, err
		},
		Teacher: func() (eval.Describer, error) {
			d, err := tc()
			return teacher.wrap(d), err
		},
	}
	o.Data.Part = &training.DataPart{Index: 1, Options: split}
	if err := o.ValidateData(); err != nil {
		t.Fatal(err)
	}
	got, err := training.LoadData(&o)
	if err != nil {
		t.Fatal(err)
	}
	// Two of the six people, three images each, each described once by
	// each describer.
	for name, r := range map[string]*recording{"inputs": inputs, "teacher": teacher} {
		if len(r.paths) != 2 {
			t.Errorf("%s describer: described the images of %v, want two people", name, r.paths)
		}
		for p, n := range r.paths {
			if n != 3 {
				t.Errorf("%s describer: %d images of %s, want 3", name, n, p)
			}
		}
	}
	if got.Train.Len() != want.Train.Len() || got.Identities != want.Identities || len(got.Targets) != len(want.Targets) {
		t.Fatalf("part: %d examples of %d people, %d targets; local.Split's part: %d, %d, %d",
			got.Train.Len(), got.Identities, len(got.Targets), want.Train.Len(), want.Identities, len(want.Targets))
	}
	idx := make([]int, got.Train.Len())
	for i := range idx {
		idx[i] = i
	}
	gx, _, err := got.Train.Batch(idx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wx, _, err := want.Train.Batch(idx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gx, wx) {
		t.Error("the part's inputs differ from local.Split's part")
	}
	for i := range got.Targets {
		if !slices.Equal(got.Targets[i], want.Targets[i]) {
			t.Errorf("target %d differs from local.Split's part", i)
		}
	}

	bad := o
	bad.Data.Part = &training.DataPart{Index: 3, Options: split}
	if err := bad.ValidateData(); err == nil || !strings.Contains(err.Error(), "part 3 of 3") {
		t.Errorf("part 3 of 3: %v", err)
	}
}
