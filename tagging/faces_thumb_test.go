package tagging

import (
	"bytes"
	"errors"
	"testing"
)

func TestFaceThumbnail(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/p/a.jpg", 3, 2)
	for k, id := range ids {
		got, err := l.FaceThumbnail(id)
		if err != nil {
			t.Fatal(err)
		}
		if want := []byte{'t', 'h', 'u', 'm', 'b', '-', byte('3' + k)}; !bytes.Equal(got, want) {
			t.Errorf("face %d: thumbnail %q, want %q", id, got, want)
		}
	}
	// A removed face still shows (to undo a removal, one must see it).
	if err := l.RemoveFace(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FaceThumbnail(ids[0]); err != nil {
		t.Errorf("removed face: %v", err)
	}
	if _, err := l.FaceThumbnail(999); !errors.Is(err, ErrUnknownFace) {
		t.Errorf("unknown face: err = %v, want ErrUnknownFace", err)
	}
	// A thumbnail moved to another face's row does not unseal.
	if _, err := l.db.Exec(`UPDATE faces SET thumbnail = (SELECT thumbnail FROM faces WHERE id = ?) WHERE id = ?`, ids[0], ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FaceThumbnail(ids[1]); !errors.Is(err, ErrTampered) {
		t.Errorf("moved thumbnail: err = %v, want ErrTampered", err)
	}
	if _, err := l.db.Exec(`UPDATE faces SET thumbnail = NULL WHERE id = ?`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FaceThumbnail(ids[1]); !errors.Is(err, ErrNoThumbnail) {
		t.Errorf("no thumbnail: err = %v, want ErrNoThumbnail", err)
	}
}
