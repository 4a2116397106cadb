package tagbench

import "github.com/veil-privacy/veil/eval"

// Split is one LFW identity list laid out as a user's library: the
// people with at least MinImages photos (whom the user names) and the
// people with a single photo (strangers, never named). Each LFW image is a
// photo with one face, its central face.
type Split struct {
	Name     string
	descs    [][]float32
	identity []int  // per face: index of its person
	stranger []bool // per person
	people   int
}

// MinImages is the "at least 5 images" for a named person.
const MinImages = 5

// LoadSplit describes the photos of the people of one LFW people list
// (file) that a split keeps, through src.
func LoadSplit(src *eval.LFWSource, file string) (*Split, error) {
	people, err := src.People([]string{file}, func(n int) bool { return n == 1 || n >= MinImages }, "describing "+file)
	if err != nil {
		return nil, err
	}
	s := &Split{Name: file}
	for _, p := range people {
		s.stranger = append(s.stranger, len(p.Descriptors) == 1)
		for _, d := range p.Descriptors {
			s.descs = append(s.descs, d)
			s.identity = append(s.identity, s.people)
		}
		s.people++
	}
	return s, nil
}

// subset keeps the people for whom keep is true.
func (s *Split) subset(name string, keep func(person int) bool) *Split {
	out := &Split{Name: name}
	remap := map[int]int{}
	for p := 0; p < s.people; p++ {
		if keep(p) {
			remap[p] = out.people
			out.stranger = append(out.stranger, s.stranger[p])
			out.people++
		}
	}
	for i, p := range s.identity {
		if q, ok := remap[p]; ok {
			out.descs = append(out.descs, s.descs[i])
			out.identity = append(out.identity, q)
		}
	}
	return out
}
