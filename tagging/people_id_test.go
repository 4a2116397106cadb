package tagging

import (
	"errors"
	"testing"
)

// TestPersonByID: every person of People is found by id, with the same
// fields; an unknown id is ErrUnknownPerson.
func TestPersonByID(t *testing.T) {
	l := testLibrary(t)
	a := addTestPhoto(t, l, "/a.jpg", 1, 3)
	if _, err := l.NameFaces(a[:2], "Ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreatePerson("Bo"); err != nil {
		t.Fatal(err)
	}
	ps, err := l.People()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		got, err := l.PersonByID(p.ID)
		if err != nil || got != p {
			t.Errorf("PersonByID(%d) = %+v, %v; want %+v", p.ID, got, err, p)
		}
	}
	if _, err := l.PersonByID(9999); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("unknown id: %v", err)
	}
}
