package eval

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/internal/progress"
)

// LFW's development identity lists: the training identities and the test
// identities.
const (
	LFWDevTrain = "peopleDevTrain.txt"
	LFWDevTest  = "peopleDevTest.txt"
)

// LFWSourceOptions configure an LFWSource.
type LFWSourceOptions struct {
	// Dir is the LFW folder: people lists and images_deepfunneled/.
	Dir string
	// Describe gives a photo's central-face descriptor (for the
	// benchmarks, the face pipeline through the descriptor cache that
	// veil verify and veil train fill).
	Describe Describer
	// Workers is how many photos are described at once (0: GOMAXPROCS).
	Workers int
	// Progress receives a progress bar per set described; nil: none.
	Progress io.Writer
}

// LFWSource describes the photos of LFW's people lists: the data of the
// benchmarks that play users' libraries (bench unlink, metric, tagging).
type LFWSource struct {
	o   LFWSourceOptions
	lfw dataset.LFW
}

// NewLFWSource checks o.
func NewLFWSource(o LFWSourceOptions) (*LFWSource, error) {
	if o.Dir == "" {
		return nil, errors.New("eval: no LFW folder")
	}
	if o.Describe == nil {
		return nil, errors.New("eval: no describer for the LFW photos")
	}
	if o.Workers < 0 {
		return nil, fmt.Errorf("eval: %d workers", o.Workers)
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	return &LFWSource{o: o, lfw: dataset.LFW{Dir: o.Dir}}, nil
}

// Dir is the LFW folder.
func (s *LFWSource) Dir() string { return s.o.Dir }

// People returns every person listed in files whose number of photos keep
// accepts, in list order, each with one descriptor per photo in photo
// order (empty where the photo gave none; WithDescriptors drops those).
// label names the progress bar.
func (s *LFWSource) People(files []string, keep func(photos int) bool, label string) ([]LinkagePerson, error) {
	var people []LinkagePerson
	var paths []string
	for _, file := range files {
		list, err := s.lfw.People(file)
		if err != nil {
			return nil, err
		}
		for _, p := range list {
			if !keep(p.Images) {
				continue
			}
			people = append(people, LinkagePerson{Name: p.Name, Descriptors: make([][]float32, p.Images)})
			for i := 1; i <= p.Images; i++ {
				paths = append(paths, s.lfw.ImagePath(p.Name, i))
			}
		}
	}
	if len(people) == 0 {
		return nil, fmt.Errorf("no person in %s has the number of photos needed", strings.Join(files, ", "))
	}
	bar := progress.New(s.o.Progress, label, len(paths), s.o.Progress == nil)
	got, err := DescribeAll(paths, s.o.Workers, s.o.Describe, func() { bar.Add(1) })
	bar.Done()
	if err != nil {
		return nil, err
	}
	k := 0
	for _, p := range people {
		for i := range p.Descriptors {
			p.Descriptors[i] = got[paths[k]].Descriptor
			k++
		}
	}
	return people, nil
}

// WithDescriptors returns the people with only their photos that gave a
// descriptor (a person may be left with none).
func WithDescriptors(people []LinkagePerson) []LinkagePerson {
	out := make([]LinkagePerson, 0, len(people))
	for _, p := range people {
		lp := LinkagePerson{Name: p.Name}
		for _, d := range p.Descriptors {
			if len(d) > 0 {
				lp.Descriptors = append(lp.Descriptors, d)
			}
		}
		out = append(out, lp)
	}
	return out
}
