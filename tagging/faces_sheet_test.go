package tagging

import (
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/imaging"
)

// TestFaceSelectionsForTheSheet: a person's faces and a stored cluster's
// faces are listed in id order, an unknown cluster or a person without
// faces is refused by name, and a thumbnail that does not decode is named
// by its face.
func TestFaceSelectionsForTheSheet(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/p/a.jpg", 3, 3)
	if _, err := l.NameFaces([]int64{ids[2], ids[0]}, "Ada"); err != nil {
		t.Fatal(err)
	}
	got, err := l.PersonFaces("Ada")
	if err != nil || !slices.Equal(got, []int64{ids[0], ids[2]}) {
		t.Fatalf("Ada's faces: %v, %v; want %v", got, err, []int64{ids[0], ids[2]})
	}
	if _, err := l.PersonFaces("Nobody"); err == nil {
		t.Error("a person without faces was accepted")
	}
	if _, err := l.ClusterFaces(42); err == nil || !strings.Contains(err.Error(), "no cluster 42") {
		t.Errorf("unknown cluster: %v", err)
	}
	// The test library's thumbnails are not images.
	if _, err := l.ContactSheet(ids[:1], imaging.DefaultSheetOptions()); err == nil || !strings.Contains(err.Error(), "thumbnail of face") {
		t.Errorf("an undecodable thumbnail: %v", err)
	}
}
