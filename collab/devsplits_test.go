package collab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
)

// LoadDevSplits reads the development training list into the first split
// and the development test list into the second, each through LoadSplit:
// people with one photo (strangers) and with at least MinImages, in list
// order; a photo without a descriptor is left out; a missing list is an
// error naming it.
func TestLoadDevSplits(t *testing.T) {
	dir := t.TempDir()
	lfw := dataset.LFW{Dir: dir}
	lists := map[string][]struct {
		name   string
		photos int
	}{
		DevTrainFile: {{"Train_A", 5}, {"Train_B", 1}, {"Train_C", 3}, {"Train_D", 6}},
		DevTestFile:  {{"Test_A", 1}, {"Test_B", 7}},
	}
	for file, people := range lists {
		b := fmt.Sprintf("%d\n", len(people))
		for _, pp := range people {
			b += fmt.Sprintf("%s\t%d\n", pp.name, pp.photos)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A photo's descriptor says which list (the length of its name) and
	// which photo it is; Train_D's second photo has no face.
	src, err := eval.NewLFWSource(eval.LFWSourceOptions{Dir: dir, Workers: 2, Describe: func(path string) (eval.Described, error) {
		for file, people := range lists {
			for _, pp := range people {
				for i := 1; i <= pp.photos; i++ {
					switch {
					case path != lfw.ImagePath(pp.name, i):
					case pp.name == "Train_D" && i == 2:
						return eval.Described{}, nil
					default:
						return eval.Described{Descriptor: []float32{float32(len(file)), float32(i)}}, nil
					}
				}
			}
		}
		return eval.Described{}, fmt.Errorf("no photo %s", path)
	}})
	if err != nil {
		t.Fatal(err)
	}
	train, test, err := LoadDevSplits(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		s        *Split
		stranger []bool
		identity []int
	}{
		// Train_C (3 photos) is left out; Train_D's second photo has no face.
		{"train", train, []bool{false, true, false}, []int{0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2}},
		{"test", test, []bool{true, false}, []int{0, 1, 1, 1, 1, 1, 1, 1}},
	} {
		if fmt.Sprint(c.s.Stranger) != fmt.Sprint(c.stranger) || fmt.Sprint(c.s.Identity) != fmt.Sprint(c.identity) || len(c.s.Descs) != len(c.identity) {
			t.Errorf("%s split: strangers %v, identities %v (%d descriptors); want %v, %v", c.name, c.s.Stranger, c.s.Identity, len(c.s.Descs), c.stranger, c.identity)
		}
	}
	if want := float32(len(DevTestFile)); test.Descs[0][0] != want {
		t.Errorf("the held-out split's first descriptor %v does not come from %s", test.Descs[0], DevTestFile)
	}
	if err := os.Remove(filepath.Join(dir, DevTestFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadDevSplits(src); err == nil || !strings.Contains(err.Error(), DevTestFile) {
		t.Errorf("without %s: %v", DevTestFile, err)
	}
}
