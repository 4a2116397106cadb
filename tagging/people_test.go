package tagging

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

func person(t *testing.T, l *Library, name string) Person {
	t.Helper()
	p, err := l.PersonByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPeopleList(t *testing.T) {
	l := testLibrary(t)
	a := addTestPhoto(t, l, "/a.jpg", 1, 3)
	if _, err := l.NameFaces(a[:2], "zoe"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.NameFaces(a[2:], "Ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreatePerson("Émile"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreatePerson("ÉMILE"); !errors.Is(err, ErrNameTaken) {
		t.Errorf("creating a taken name: %v", err)
	}
	if err := l.SetHidden("Ada", true); err != nil {
		t.Fatal(err)
	}
	ps, err := l.People()
	if err != nil {
		t.Fatal(err)
	}
	var got []Person
	for _, p := range ps {
		p.ID = 0
		got = append(got, p)
	}
	want := []Person{{Name: "Ada", Faces: 1, Hidden: true}, {Name: "zoe", Faces: 2}, {Name: "Émile"}}
	if !slices.Equal(got, want) {
		t.Errorf("people %+v, want %+v", got, want)
	}
	if err := l.SetHidden("ada", false); err != nil {
		t.Fatal(err)
	}
	if person(t, l, "Ada").Hidden {
		t.Error("Ada still hidden")
	}
	if err := l.SetHidden("Nobody", true); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("hiding an unknown person: %v", err)
	}
}

func TestRenamePerson(t *testing.T) {
	l := testLibrary(t)
	a := addTestPhoto(t, l, "/a.jpg", 1, 2)
	if _, err := l.NameFaces(a[:1], "Ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.NameFaces(a[1:], "Bob"); err != nil {
		t.Fatal(err)
	}
	if err := l.RenamePerson("Ada", "Ada Lovelace"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PersonByName("Ada"); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("the old name still finds the person: %v", err)
	}
	if f := faceOf(t, l, a[0]); f.Person != "Ada Lovelace" {
		t.Errorf("face after renaming: %+v", f)
	}
	// A change of case only is a rename of the same person.
	if err := l.RenamePerson("ada lovelace", "ADA LOVELACE"); err != nil {
		t.Fatal(err)
	}
	if p := person(t, l, "Ada Lovelace"); p.Name != "ADA LOVELACE" {
		t.Errorf("name after a case change: %q", p.Name)
	}
	for name, tc := range map[string]struct {
		old, new string
		want     error
	}{
		"taken":   {"Bob", "ada lovelace", ErrNameTaken},
		"unknown": {"Nobody", "Somebody", ErrUnknownPerson},
		"empty":   {"Bob", " ", ErrInvalidName},
	} {
		if err := l.RenamePerson(tc.old, tc.new); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if p := person(t, l, "Bob"); p.Faces != 1 {
		t.Errorf("Bob after failed renames: %+v", p)
	}
}

func TestMergePeople(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/a.jpg", 1, 5)
	// Faces: 0 user-named Bobby; 1 user-named Bobby but rejected for Bob;
	// 2 auto-assigned Bobby but rejected for Bob; 3 user-named Bob;
	// 4 rejected for Bobby only.
	if _, err := l.NameFaces(ids[:3], "Bobby"); err != nil {
		t.Fatal(err)
	}
	bob, err := l.NameFaces(ids[3:4], "Bob")
	if err != nil {
		t.Fatal(err)
	}
	bobby := person(t, l, "Bobby")
	if err := l.UnassignFace(ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ClearAuto(); err != nil {
		t.Fatal(err)
	}
	// Make face 2 undecided, then auto-assigned to Bobby.
	if _, err := l.db.Exec(`UPDATE faces SET assigned_by = NULL WHERE id = ?`, ids[2]); err != nil {
		t.Fatal(err)
	}
	if n, err := l.AssignAuto([]Assignment{{ids[2], bobby.ID}}); err != nil || n != 1 {
		t.Fatalf("auto: %d, %v", n, err)
	}
	for _, id := range ids[1:3] {
		if err := l.RejectFace(id, "Bob"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.RejectFace(ids[4], "Bobby"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCover("Bobby", ids[0]); err != nil {
		t.Fatal(err)
	}

	if err := l.MergePeople("bob", "Bob"); !errors.Is(err, ErrSamePerson) {
		t.Errorf("merging into itself: %v, want ErrSamePerson", err)
	}
	if err := l.MergePeople("Nobody", "Bob"); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("merging an unknown person: %v", err)
	}
	if err := l.MergePeople("Bobby", "Nobody"); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("merging into an unknown person: %v", err)
	}
	if err := l.MergePeople("Bobby", "Bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PersonByName("Bobby"); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("Bobby still exists: %v", err)
	}
	p := person(t, l, "Bob")
	if p.ID != bob.ID || p.Faces != 3 || p.Cover != ids[0] {
		t.Errorf("Bob after the merge: %+v, want 3 faces and Bobby's cover", p)
	}
	for k, want := range []struct {
		person int64
		by     string
	}{{bob.ID, ByUser}, {bob.ID, ByUser}, {0, ""}, {bob.ID, ByUser}, {0, ""}} {
		if f := faceOf(t, l, ids[k]); f.PersonID != want.person || f.AssignedBy != want.by {
			t.Errorf("face %d after the merge: person %d by %q, want %d by %q", k, f.PersonID, f.AssignedBy, want.person, want.by)
		}
	}
	rej, err := l.Rejections()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64][]int64{ids[2]: {bob.ID}, ids[4]: {bob.ID}}
	if len(rej) != len(want) || !slices.Equal(rej[ids[2]], want[ids[2]]) || !slices.Equal(rej[ids[4]], want[ids[4]]) {
		t.Errorf("rejections after the merge %v, want %v", rej, want)
	}
	// The merged person's rejection still keeps automatic assignment away.
	if n, err := l.AssignAuto([]Assignment{{ids[4], bob.ID}}); err != nil || n != 0 {
		t.Errorf("auto-assigning a face rejected for the merged person: %d, %v", n, err)
	}
}

func TestCoverAndPhotos(t *testing.T) {
	l := testLibrary(t)
	a := addTestPhoto(t, l, "/b/a.jpg", 1, 2)
	b := addTestPhoto(t, l, "/a/b.jpg", 3, 1)
	c := addTestPhoto(t, l, "/c.jpg", 5, 1)
	if _, err := l.NameFaces([]int64{a[0], a[1], b[0], c[0]}, "Ada"); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveFace(c[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreatePerson("Bob"); err != nil {
		t.Fatal(err)
	}
	photos, err := l.PersonPhotos("ada")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range photos {
		paths = append(paths, p.Path)
	}
	if !slices.Equal(paths, []string{"/a/b.jpg", "/b/a.jpg"}) {
		t.Errorf("Ada's photos %v", paths)
	}
	if photos[0].Width != 640 || photos[0].Taken != "2024-05-01T10:00:00" {
		t.Errorf("photo record %+v", photos[0])
	}
	if ps, err := l.PersonPhotos("Bob"); err != nil || len(ps) != 0 {
		t.Errorf("Bob's photos %v, %v", ps, err)
	}
	if _, err := l.PersonPhotos("Nobody"); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("photos of an unknown person: %v", err)
	}
	if err := l.SetCover("Ada", b[0]); err != nil {
		t.Fatal(err)
	}
	if p := person(t, l, "Ada"); p.Cover != b[0] {
		t.Errorf("cover %d, want %d", p.Cover, b[0])
	}
	for name, tc := range map[string]struct {
		person string
		face   int64
		want   error
	}{
		"another's face": {"Bob", a[0], ErrNotPersons},
		"removed face":   {"Ada", c[0], ErrFaceRemoved},
		"unknown face":   {"Ada", 999, ErrUnknownFace},
		"unknown person": {"Nobody", a[0], ErrUnknownPerson},
	} {
		if err := l.SetCover(tc.person, tc.face); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	// A cover that leaves its person no longer counts.
	if _, err := l.NameFaces(b, "Bob"); err != nil {
		t.Fatal(err)
	}
	if p := person(t, l, "Ada"); p.Cover != 0 {
		t.Errorf("Ada's cover after its face became Bob's: %d", p.Cover)
	}
}

// FuzzNormaliseName checks the invariants of name normalisation on any
// input: an accepted name is 1 to 200 runes of valid UTF-8 without control
// characters or runs of spaces, and normalising it again changes neither it
// nor its lookup key (else a person could become unreachable by the name
// veil prints for them).
func FuzzNormaliseName(f *testing.F) {
	for _, s := range []string{"Ann Lee", " Ann   Lee ", "  ann\t\nLEE ", "e\u0301", "\u00e9", "Stra\u00dfe", "a\x00b", "\xff", "\u200b", strings.Repeat("a", maxNameRunes+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		display, key, err := normaliseName(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("normaliseName(%q): %v, want ErrInvalidName", name, err)
			}
			return
		}
		n := utf8.RuneCountInString(display)
		if n < 1 || n > maxNameRunes || !utf8.ValidString(display) || !utf8.ValidString(key) {
			t.Fatalf("normaliseName(%q) = %q (%d runes)", name, display, n)
		}
		if strings.IndexFunc(display, unicode.IsControl) >= 0 || display != strings.Join(strings.Fields(display), " ") {
			t.Fatalf("normaliseName(%q) = %q keeps control characters or extra spaces", name, display)
		}
		d2, k2, err := normaliseName(display)
		if err != nil || d2 != display || k2 != key {
			t.Fatalf("normaliseName(%q) = %q, %q; again: %q, %q, %v", name, display, key, d2, k2, err)
		}
	})
}

// TestSetHiddenAtomic plays another program that deletes a person (as a
// merge does) while SetHidden is looking the person up: SetHidden must not
// report success for a person gone by the time it writes. The other writer
// holds the write lock while SetHidden starts, then commits; SetHidden's
// lookup and update must both come after that commit (ErrUnknownPerson),
// never the lookup before and the update after (a silent no-op).
func TestSetHiddenAtomic(t *testing.T) {
	l := testLibrary(t)
	p, err := l.CreatePerson("Ada")
	if err != nil {
		t.Fatal(err)
	}
	editOutside(l) // the deletion stands for another program's
	other, err := openDB(filepath.Join(l.Dir(), DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin() // IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`DELETE FROM people WHERE id = ?`, p.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.SetHidden("Ada", true) }()
	// Give SetHidden time to look Ada up (a non-atomic one sees her: the
	// deletion is not committed yet) and to wait for the write lock.
	time.Sleep(300 * time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("SetHidden of a person deleted meanwhile: %v, want ErrUnknownPerson", err)
	}
}
