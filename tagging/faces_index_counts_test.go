package tagging

import (
	"path/filepath"
	"testing"
)

// TestIndexCountsFacesPerOutcome: a run that adds a photo of one face and
// analyses an edited photo again counts each photo's faces under its own
// outcome (the new user read "added 1 (2 faces)" for a photo of one face).
func TestIndexCountsFacesPerOutcome(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	a := filepath.Join(dir, "a.jpg")
	writePhoto(t, a, 210, 150, 10) // two faces
	rep := fakeIndex(t, l, IndexOptions{}, dir)
	if rep.Added != 1 || rep.FacesAdded != 2 || rep.FacesUpdated != 0 || rep.Faces != 2 {
		t.Fatalf("first run: %+v", rep)
	}
	writePhoto(t, a, 200, 150, 90)                           // edited: one face
	writePhoto(t, filepath.Join(dir, "b.jpg"), 200, 150, 40) // new: one face
	rep = fakeIndex(t, l, IndexOptions{}, dir)
	if rep.Added != 1 || rep.Updated != 1 || rep.FacesAdded != 1 || rep.FacesUpdated != 1 || rep.Faces != 2 {
		t.Fatalf("second run: added %d (%d faces), updated %d (%d faces), faces %d; want 1 (1), 1 (1), 2",
			rep.Added, rep.FacesAdded, rep.Updated, rep.FacesUpdated, rep.Faces)
	}
}
