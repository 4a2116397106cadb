package tagging

import (
	"slices"
	"testing"
)

// Offset and Limit page through the faces a filter selects, in id order.
func TestFacesPage(t *testing.T) {
	l := testLibrary(t)
	var ids []int64
	for i := range 4 {
		ids = append(ids, addTestPhoto(t, l, "/p"+string(rune('a'+i))+".jpg", 10*i, 2)...)
	}
	if _, err := l.NameFaces(ids[1:7], "Ada"); err != nil {
		t.Fatal(err)
	}
	ada := ids[1:7]
	for _, tc := range []struct {
		name          string
		offset, limit int
		want          []int64
	}{
		{"all", 0, 0, ada},
		{"first page", 0, 4, ada[:4]},
		{"second page", 4, 4, ada[4:]},
		{"offset only", 2, 0, ada[2:]},
		{"past the end", 6, 4, nil},
		{"limit beyond", 0, 100, ada},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := l.Faces(FaceFilter{Person: "Ada", Offset: tc.offset, Limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, f := range fs {
				got = append(got, f.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("faces %v, want %v", got, tc.want)
			}
		})
	}
	for _, f := range []FaceFilter{{Offset: -1}, {Limit: -1}} {
		if _, err := l.Faces(f); err == nil {
			t.Errorf("Faces(%+v) gave no error", f)
		}
	}
}
