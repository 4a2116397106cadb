package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n     int
		noun  string
		forms []string
		want  string
	}{
		{0, "face", nil, "0 faces"},
		{1, "face", nil, "1 face"},
		{2, "face", nil, "2 faces"},
		{1, "person", []string{"people"}, "1 person"},
		{4, "person", []string{"people"}, "4 people"},
		{0, "copy", []string{"copies"}, "0 copies"},
		{-1, "round", nil, "-1 round"},
	} {
		if got := plural(tc.n, tc.noun, tc.forms...); got != tc.want {
			t.Errorf("plural(%d, %q, %q) = %q, want %q", tc.n, tc.noun, tc.forms, got, tc.want)
		}
	}
}

// TestLibraryAddCountsMatchTheirLabels: the new user read "added 1 (2
// faces)" for a photo of one face: the faces of a photo analysed again
// after an edit were counted as added. Each count is now the count of its
// own label, in the singular for one.
func TestLibraryAddCountsMatchTheirLabels(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    libraryAddJSON
		want []string
		not  []string
	}{
		{"one added, one edited", libraryAddJSON{PhotosFound: 2, PhotosAdded: 1, Faces: 2, FacesAdded: 1, PhotosUpdated: 1, FacesUpdated: 1},
			[]string{"found 2 photos: added 1 (1 face)", "analysed again after an edit 1 (1 face)"}, []string{"(2 faces)"}},
		{"one photo", libraryAddJSON{PhotosFound: 1, PhotosAdded: 1, Faces: 3, FacesAdded: 3},
			[]string{"found 1 photo: added 1 (3 faces)"}, []string{"1 photos"}},
		{"one missing", libraryAddJSON{PhotosFound: 0, PhotosMissing: 1},
			[]string{"found 0 photos: added 0 (0 faces)", "1 photo of the library is missing"}, []string{"1 photos"}},
		{"forgot", libraryAddJSON{PhotosForgotten: 1, FacesForgotten: 1, PhotosFailed: 1},
			[]string{"forgot 1 missing photo and 1 face", "could not read 1 file:"}, []string{"1 faces"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			printLibraryAdd(&env{stdout: &out}, &tc.o)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output %q lacks %q", out.String(), w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out.String(), w) {
					t.Errorf("output %q has %q", out.String(), w)
				}
			}
		})
	}
}
