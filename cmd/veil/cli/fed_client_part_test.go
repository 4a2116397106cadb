package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/fed/local/localtest"
	"github.com/veil-privacy/veil/training"
)

// TestFedClientDescribesOnlyItsPartition: a client with --partition 1/3
// described all of LFW's 9,525 training images before keeping its third.
// The client's local trainer now describes the training images of its own
// identities only (here 2 of 6 people, 3 images each).
func TestFedClientDescribesOnlyItsPartition(t *testing.T) {
	lfw := filepath.Join(t.TempDir(), "lfw")
	_, o := localtest.Data(t, lfw, 6)
	var mu sync.Mutex
	people := map[string]int{}
	record := func(d eval.Describer) eval.Describer {
		return func(path string) (eval.Described, error) {
			if strings.HasPrefix(filepath.Base(path), "Train_") {
				mu.Lock()
				people[filepath.Base(filepath.Dir(path))]++
				mu.Unlock()
			}
			return d(path)
		}
	}
	in, tc := o.Describers.Inputs, o.Describers.Teacher
	var errs bytes.Buffer
	cmd, f := clientCmd(&env{stdout: &bytes.Buffer{}, stderr: &errs})
	if err := cmd.ParseFlags([]string{"--data", lfw, "--partition", "2/3", "--centre-images", filepath.Join(lfw, "centre"),
		"--centre-count", "2", "--micro-batch", "4", "--quiet"}); err != nil {
		t.Fatal(err)
	}
	f.describers = &training.Describers{
		Inputs: func() (eval.Describer, int, error) {
			d, n, err := in()
			return record(d), n, err
		},
		Teacher: func() (eval.Describer, error) {
			d, err := tc()
			return record(d), err
		},
	}
	_, members, err := localTrainer(&env{stdout: &bytes.Buffer{}, stderr: &errs}, f)
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	// The ledger is charged for the partition's people, the ones described.
	if len(members) != 2 || people[members[0]] == 0 || people[members[1]] == 0 {
		t.Errorf("the client would charge %v, want the partition's people %v", members, people)
	}
	// Each image is described twice: the head's input and the teacher's
	// descriptor.
	if len(people) != 2 {
		t.Errorf("described the training images of %v, want those of the partition's 2 people", people)
	}
	for p, n := range people {
		if n != 6 {
			t.Errorf("%s: %d descriptions, want 3 images × 2 describers", p, n)
		}
	}
}
