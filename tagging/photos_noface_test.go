package tagging

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestPhotosWithoutFaces: the photos listed are those present with no
// face left (none found, or the only one removed as false); a photo with
// faces, and a missing photo, are not; Status lists the same paths.
func TestPhotosWithoutFaces(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.jpg"), filepath.Join(dir, "two.jpg")
	none, gone := filepath.Join(dir, "none.jpg"), filepath.Join(dir, "gone.jpg")
	writePhoto(t, one, 200, 150, 10) // fakeRun: one face
	writePhoto(t, two, 210, 150, 20) // two faces
	writePhoto(t, none, 220, 150, 30)
	writePhoto(t, gone, 230, 150, 40)
	fakeIndex(t, l, IndexOptions{}, dir)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	fakeIndex(t, l, IndexOptions{}, dir)
	paths := func() []string {
		t.Helper()
		ps, err := l.PhotosWithoutFaces(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.Path)
		}
		return out
	}
	if got := paths(); !slices.Equal(got, []string{none}) {
		t.Errorf("photos without faces %v, want only %s (gone.jpg is missing)", got, none)
	}
	fs, err := l.Faces(FaceFilter{Photo: one})
	if err != nil || len(fs) != 1 {
		t.Fatalf("faces of one.jpg %+v, %v", fs, err)
	}
	if err := l.RemoveFace(fs[0].ID); err != nil {
		t.Fatal(err)
	}
	if got := paths(); !slices.Equal(got, []string{none, one}) {
		t.Errorf("after removing one.jpg's face: %v", got)
	}
	st, err := l.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.NoFacePaths, []string{none, one}) || !slices.Equal(st.MissingPaths, []string{gone}) {
		t.Errorf("status lists no-face %v and missing %v", st.NoFacePaths, st.MissingPaths)
	}
}
