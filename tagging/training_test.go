package tagging

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTrainingDataHoldsOnlyTheOwnersDecisions names, accepts and rejects
// faces and checks what the library yields: named and accepted faces under
// their person's class, rejected faces as that person's negatives, and
// nothing of faces nobody decided on.
func TestTrainingDataHoldsOnlyTheOwnersDecisions(t *testing.T) {
	l := indexTestLibrary(t)
	f := newLearnFixture(t, l, 7, 3, 4)
	a, err := l.NameFaces(f.faces[0][:2], f.people[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.NameFaces(f.faces[1][:1], f.people[1]); err != nil {
		t.Fatal(err)
	}
	if n, err := l.AssignAuto([]Assignment{{Face: f.faces[0][2], Person: a.ID}}); err != nil || n != 1 {
		t.Fatalf("accepting a suggestion: %d, %v", n, err)
	}
	if err := l.RejectFace(f.faces[2][0], f.people[0]); err != nil {
		t.Fatal(err)
	}
	td, err := l.TrainingData(64)
	if err != nil {
		t.Fatal(err)
	}
	if td.Classes != 64 || len(td.People) != 2 {
		t.Fatalf("%d classes, %d people; want 64 and the 2 named people", td.Classes, len(td.People))
	}
	key, err := l.tagKey()
	if err != nil {
		t.Fatal(err)
	}
	classA, _ := HashedTag(key, strconv.FormatInt(a.ID, 10), 64)
	var pa *TaggedPerson
	for i := range td.People {
		if td.People[i].Class == classA && len(td.People[i].Named) == 2 {
			pa = &td.People[i]
		}
	}
	if pa == nil {
		t.Fatalf("no person of class %d with the 2 named faces: %+v", classA, td.People)
	}
	same := func(what string, got [][]float32, want ...[]float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d descriptors, want %d", what, len(got), len(want))
		}
		for _, w := range want {
			if !slices.ContainsFunc(got, func(g []float32) bool { return slices.Equal(g, w) }) {
				t.Fatalf("%s: a descriptor is missing", what)
			}
		}
	}
	same("named", pa.Named, f.descs[0][0], f.descs[0][1])
	same("accepted", pa.Accepted, f.descs[0][2])
	same("rejected", pa.Rejected, f.descs[2][0])
	total := 0
	for _, p := range td.People {
		total += len(p.Named) + len(p.Accepted)
	}
	if total != 4 {
		t.Fatalf("%d positive faces, want the 4 decided on (undecided faces leaked in)", total)
	}
	if _, err := l.TrainingData(0); err == nil {
		t.Fatal("0 classes accepted")
	}
}

// TestHashedTagsRevealNoNames plays the coordinator: it receives the
// training data and searches it for the names and ids it might guess.
func TestHashedTagsRevealNoNames(t *testing.T) {
	l := indexTestLibrary(t)
	f := newLearnFixture(t, l, 8, 4, 3)
	f.name(t, 2)
	td, err := l.TrainingData(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(td)
	if err != nil {
		t.Fatal(err)
	}
	dump := string(js) + fmt.Sprintf("%#v", td)
	for _, name := range f.people {
		for _, form := range []string{name, strings.ToLower(name), strings.ReplaceAll(name, " ", "")} {
			if strings.Contains(dump, form) {
				t.Fatalf("the training data contain the name %q", form)
			}
		}
	}
	// Without the library's key, hashing the identities (ids 1…4, or the
	// names) does not give the classes: an attacker's key hits a class only
	// by chance (1 in 65,536 each).
	wrong := []byte("a key that is not the library's")
	got := map[int]bool{}
	for _, p := range td.People {
		got[p.Class] = true
	}
	for i, name := range f.people {
		for _, id := range []string{strconv.Itoa(i + 1), name} {
			c, err := HashedTag(wrong, id, 1<<16)
			if err != nil {
				t.Fatal(err)
			}
			if got[c] {
				t.Fatalf("hashing %q without the library's key found its class %d", id, c)
			}
		}
	}
}

// TestHashedTagsStableWithinAndUnrelatedAcrossLibraries: one person keeps
// one class (across calls and after reopening); two libraries' keys map
// the same 400 identities to classes that agree only as often as chance.
func TestHashedTagsStableWithinAndUnrelatedAcrossLibraries(t *testing.T) {
	dir := t.TempDir()
	pass := []byte("stable test")
	l, err := Create(dir, pass, CreateOptions{KDF: KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		t.Fatal(err)
	}
	f := newLearnFixture(t, l, 9, 3, 3)
	f.name(t, 1)
	first, err := l.TrainingData(1000)
	if err != nil {
		t.Fatal(err)
	}
	// Naming another face of the same people keeps their classes.
	for p, ids := range f.faces {
		if _, err := l.NameFaces(ids[1:2], f.people[p]); err != nil {
			t.Fatal(err)
		}
	}
	k1, err := l.tagKey()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = Open(dir, pass)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	again, err := l.TrainingData(1000)
	if err != nil {
		t.Fatal(err)
	}
	classes := func(td *TrainingData) []int {
		var c []int
		for _, p := range td.People {
			c = append(c, p.Class)
			if len(p.Named) == 0 {
				t.Fatal("a person without named faces")
			}
		}
		return c
	}
	if !slices.Equal(classes(first), classes(again)) || len(again.People) != 3 {
		t.Fatalf("classes %v, then %v after naming more and reopening", classes(first), classes(again))
	}
	for _, p := range again.People {
		if len(p.Named) != 2 {
			t.Fatalf("a person's second named face went to another class: %d named in class %d", len(p.Named), p.Class)
		}
	}
	other := indexTestLibrary(t)
	k2, err := other.tagKey()
	if err != nil {
		t.Fatal(err)
	}
	const n, ids = 16, 400
	agree := 0
	for i := range ids {
		c1, _ := HashedTag(k1, strconv.Itoa(i), n)
		c2, _ := HashedTag(k2, strconv.Itoa(i), n)
		if c1 == c2 {
			agree++
		}
	}
	// Chance: 400/16 = 25 agreements, standard deviation 4.8; a shared
	// key would give 400.
	if agree > 50 {
		t.Fatalf("two libraries' classes agree on %d of %d identities (chance: 25)", agree, ids)
	}
}
