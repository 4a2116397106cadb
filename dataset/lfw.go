package dataset

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Person is one line of an LFW people file: a name and its image count.
type Person struct {
	Name   string
	Images int
}

// ParsePeople reads an LFW people file (peopleDevTrain.txt): a count line,
// then "Name<TAB>count" lines.
func ParsePeople(r io.Reader) ([]Person, error) {
	sc := bufio.NewScanner(r)
	var people []Person
	want := -1
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if want < 0 {
			n, err := strconv.Atoi(f[0])
			if err != nil || len(f) != 1 || n < 0 {
				return nil, fmt.Errorf("dataset: people file line %d: want a count, got %q", line, sc.Text())
			}
			want = n
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("dataset: people file line %d: want \"name count\", got %d fields", line, len(f))
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n <= 0 || n > 100000 {
			return nil, fmt.Errorf("dataset: people file line %d: bad image count %q", line, f[1])
		}
		if err := checkName(f[0]); err != nil {
			return nil, fmt.Errorf("dataset: people file line %d: %w", line, err)
		}
		people = append(people, Person{Name: f[0], Images: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dataset: reading people file: %w", err)
	}
	if want < 0 {
		return nil, fmt.Errorf("dataset: empty people file")
	}
	if len(people) != want {
		return nil, fmt.Errorf("dataset: people file announces %d people but lists %d", want, len(people))
	}
	return people, nil
}

// checkName refuses names that could escape the image folder.
func checkName(n string) error {
	if n == "" || n == "." || n == ".." || strings.ContainsAny(n, `/\`) || strings.ContainsRune(n, 0) {
		return fmt.Errorf("bad person name %q", n)
	}
	return nil
}

// LFW is an LFW folder: images_deepfunneled/Name/Name_0001.jpg and the
// development-view lists.
type LFW struct{ Dir string }

// ImagePath is the file of a person's n-th image (1-based).
func (l LFW) ImagePath(name string, n int) string {
	return filepath.Join(l.Dir, "images_deepfunneled", name, fmt.Sprintf("%s_%04d.jpg", name, n))
}

// People reads a people list (e.g. "peopleDevTrain.txt").
func (l LFW) People(file string) ([]Person, error) {
	f, err := os.Open(filepath.Join(l.Dir, file))
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	return ParsePeople(f)
}

// Pairs reads a pairs list (e.g. "pairsDevTest.txt").
func (l LFW) Pairs(file string) ([]Pair, error) {
	f, err := os.Open(filepath.Join(l.Dir, file))
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	pf, err := ParsePairs(f)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	return pf.Pairs, nil
}

// TrainImages lists every image of the people in the people file who have
// at least minImages images (classification losses need several images per
// identity). It fails when no identity qualifies.
func (l LFW) TrainImages(peopleFile string, minImages, maxPeople int) ([]Image, error) {
	people, err := l.People(peopleFile)
	if err != nil {
		return nil, err
	}
	var out []Image
	n := 0
	for _, p := range people {
		if p.Images < minImages {
			continue
		}
		if maxPeople > 0 && n >= maxPeople {
			break
		}
		n++
		for i := 1; i <= p.Images; i++ {
			out = append(out, Image{Path: l.ImagePath(p.Name, i), Identity: p.Name})
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("dataset: no identity in %s has at least %d images: empty training split", peopleFile, minImages)
	}
	return out, nil
}

// CheckDisjoint fails if any identity of the pairs is a training identity.
func CheckDisjoint(train []Image, pairs []Pair) error {
	ids := map[string]bool{}
	for _, im := range train {
		ids[im.Identity] = true
	}
	for i, p := range pairs {
		if ids[p.Name1] || ids[p.Name2] {
			return fmt.Errorf("dataset: evaluated pair %d involves a training identity", i+1)
		}
	}
	return nil
}

// PairImages lists the distinct images the pairs refer to.
func (l LFW) PairImages(pairs []Pair) []Image {
	seen := map[string]bool{}
	var out []Image
	add := func(name string, n int) {
		p := l.ImagePath(name, n)
		if !seen[p] {
			seen[p] = true
			out = append(out, Image{Path: p, Identity: name})
		}
	}
	for _, p := range pairs {
		add(p.Name1, p.Num1)
		add(p.Name2, p.Num2)
	}
	return out
}
