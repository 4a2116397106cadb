package dataset

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

func TestParsePeopleAndPairs(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "people.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	people, err := ParsePeople(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(people) != 2 || people[0] != (Person{"Alice_A", 3}) || people[1] != (Person{"Bob_B", 1}) {
		t.Errorf("people = %+v", people)
	}
	g, err := os.Open(filepath.Join("testdata", "pairs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	pf, err := ParsePairs(g)
	if err != nil {
		t.Fatal(err)
	}
	pairs := pf.Pairs
	want := []Pair{{"Alice_A", 1, "Alice_A", 2, true}, {"Alice_A", 1, "Bob_B", 1, false}}
	if len(pairs) != 2 || pairs[0] != want[0] || pairs[1] != want[1] {
		t.Errorf("pairs = %+v, want %+v", pairs, want)
	}
}

func TestParseErrors(t *testing.T) {
	people := []string{"", "x\n", "2\nA\t1\n", "1\nA\t0\n", "1\n../etc\t1\n", "1\nA\t1\textra\n"}
	for _, s := range people {
		if _, err := ParsePeople(strings.NewReader(s)); err == nil {
			t.Errorf("ParsePeople(%q): no error", s)
		}
	}
	pairs := []string{"", "1\nA\t1\t2\n", "1\nA\t1\tB\t1\nA\t1\t2\n", "1\nA\t-1\t2\nA\t1\tB\t1\n", "1\nA/B\t1\t2\nA\t1\tB\t1\n"}
	for _, s := range pairs {
		if _, err := ParsePairs(strings.NewReader(s)); err == nil {
			t.Errorf("ParsePairs(%q): no error", s)
		}
	}
	pgm := []string{"", "P6 1 1 255\nx", "P5 2 2 255\nabc", "P5 1 1 65535\nxx", "P5 0 1 255\n"}
	for _, s := range pgm {
		if _, err := ParsePGM(strings.NewReader(s)); err == nil {
			t.Errorf("ParsePGM(%q): no error", s)
		}
	}
}

func TestParsePGM(t *testing.T) {
	m, err := ParsePGM(strings.NewReader("P5\n# comment\n2 1\n255\n\x00\xff"))
	if err != nil {
		t.Fatal(err)
	}
	if m.W != 2 || m.H != 1 || !bytes.Equal(m.Pix, []byte{0, 0, 0, 255, 255, 255}) {
		t.Errorf("got %dx%d %v", m.W, m.H, m.Pix)
	}
}

func FuzzParsePeople(f *testing.F) {
	f.Add([]byte("2\nAlice_A\t3\nBob_B\t1\n"))
	f.Add([]byte("1\nA 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := ParsePeople(bytes.NewReader(b)); err == nil {
			for _, x := range p {
				if x.Images <= 0 || checkName(x.Name) != nil {
					t.Fatalf("accepted bad person %+v", x)
				}
			}
		}
	})
}

func FuzzParsePGM(f *testing.F) {
	f.Add([]byte("P5\n2 1\n255\n\x00\xff"))
	f.Add([]byte("P5 1 1 1\n\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := ParsePGM(bytes.NewReader(b)); err == nil && len(m.Pix) != 3*m.W*m.H {
			t.Fatalf("pixel buffer %d for %dx%d", len(m.Pix), m.W, m.H)
		}
	})
}

func TestLFWSplitIsDisjointAndLoads(t *testing.T) {
	l := LFW{Dir: datadir.ForTest(t, "lfw")}
	train, err := l.TrainImages("peopleDevTrain.txt", 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	test, err := l.Pairs("pairsDevTest.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(test) != 1000 {
		t.Errorf("pairsDevTest has %d pairs, want 1000", len(test))
	}
	if err := CheckDisjoint(train, test); err != nil {
		t.Error(err)
	}
	devTrain, err := l.Pairs("pairsDevTrain.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDisjoint(train, devTrain); err == nil {
		t.Error("pairsDevTrain shares no identity with peopleDevTrain: the disjointness check cannot fail")
	}
	if _, err := l.TrainImages("peopleDevTrain.txt", 1000, 0); err == nil {
		t.Error("no error for an empty identity split")
	}
	s, err := Load(train[:6], LoadOptions{Side: 32, Crop: 128, Augment: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Stored != 36 || len(s.Pix) != 6*36*36*3 {
		t.Fatalf("stored side %d, %d bytes", s.Stored, len(s.Pix))
	}
	x, lab, err := s.Batch([]int{0, 5}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(x) != 2*32*32*3 || lab[0] != s.Labels[0] {
		t.Errorf("batch: %d values, labels %v", len(x), lab)
	}
	for _, v := range x {
		if v < -1 || v > 1 {
			t.Fatalf("value %g outside [-1, 1]", v)
		}
	}
	if _, _, err := s.Batch([]int{6}, nil); err == nil {
		t.Error("no error for an index out of range")
	}
}

func TestFlipMirrorsCentreCrop(t *testing.T) {
	s := &Set{Side: 2, Stored: 2, Pix: []uint8{0, 0, 0, 255, 255, 255, 0, 0, 0, 255, 255, 255}, Labels: []int32{0}, Names: []string{"a"}}
	plain, _, _ := s.Batch([]int{0}, nil)
	// Find a seed that flips.
	for seed := uint64(0); seed < 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		x, _, _ := s.Batch([]int{0}, r)
		if x[0] != plain[0] {
			if x[0] != plain[3] || x[3] != plain[0] {
				t.Fatalf("flip gave %v from %v", x, plain)
			}
			return
		}
	}
	t.Fatal("no flip in 20 draws")
}

func TestORL(t *testing.T) {
	dir := datadir.ForTest(t, "orl")
	ims, err := ORLImages(dir, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load(ims, LoadOptions{Side: 16})
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 20 || s.Classes() != 2 {
		t.Errorf("ORL: %d images, %d classes", s.Len(), s.Classes())
	}
	if _, err := ORLImages(dir, 3, 2); err == nil {
		t.Error("no error for an empty subject range")
	}
}
