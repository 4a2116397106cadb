package tagging

import (
	"context"
	"fmt"
	"testing"
)

// TestNoSuggestionsForMissingPhotos: the faces of a photo whose file is
// gone are not suggested (the user cannot open the photo to check, and
// accepting would name a face nobody can see); they are again once the
// photo is back. A missing photo's named faces still serve as examples.
func TestNoSuggestionsForMissingPhotos(t *testing.T) {
	ctx := context.Background()
	l := testLibrary(t)
	all := loadLFWFaces(t)
	byPerson := map[string][]lfwFace{}
	for _, f := range all {
		byPerson[f.Person] = append(byPerson[f.Person], f)
	}
	ada := byPerson["Al_Gore"]
	if len(ada) < 4 {
		t.Fatalf("%d faces of Al_Gore", len(ada))
	}
	var named []int64
	for i, f := range ada[:2] {
		named = append(named, addLFWPhoto(t, l, fmt.Sprintf("named%d.jpg", i), f)[0])
	}
	if _, err := l.NameFaces(named, "Al"); err != nil {
		t.Fatal(err)
	}
	gone := addLFWPhoto(t, l, "gone.jpg", ada[2])[0]
	here := addLFWPhoto(t, l, "here.jpg", ada[3])[0]
	suggested := func() map[int64]bool {
		t.Helper()
		sugs, err := l.Suggestions(DefaultSuggestOptions())
		if err != nil {
			t.Fatal(err)
		}
		out := map[int64]bool{}
		for _, s := range sugs {
			out[s.Face] = true
		}
		return out
	}
	if s := suggested(); !s[gone] || !s[here] {
		t.Fatalf("before: suggestions for %v, want faces %d and %d", s, gone, here)
	}
	photoOf := func(face int64) int64 {
		f, err := l.Face(face)
		if err != nil {
			t.Fatal(err)
		}
		return f.PhotoID
	}
	if err := l.setMissing(ctx, photoOf(gone), true); err != nil {
		t.Fatal(err)
	}
	// A named face's photo missing: its face still teaches who Al is.
	if err := l.setMissing(ctx, photoOf(named[0]), true); err != nil {
		t.Fatal(err)
	}
	if s := suggested(); s[gone] || !s[here] {
		t.Errorf("with gone.jpg missing: suggestions for %v, want face %d only", s, here)
	}
	if applied, none, err := l.AcceptSuggestions([]int64{gone}, DefaultSuggestOptions()); err != nil || len(applied) != 0 || len(none) != 1 {
		t.Errorf("accepting the missing photo's face: applied %v, none %v, err %v", applied, none, err)
	}
	if err := l.setMissing(ctx, photoOf(gone), false); err != nil {
		t.Fatal(err)
	}
	if s := suggested(); !s[gone] {
		t.Errorf("back again: suggestions for %v, want face %d", s, gone)
	}
}
