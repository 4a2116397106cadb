package tagging

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func faceOf(t *testing.T, l *Library, id int64) Face {
	t.Helper()
	f, err := l.Face(id)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestNameFaces(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/a.jpg", 1, 3)
	p, err := l.NameFaces(ids[:2], "  Ada   Lovelace ")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "Ada Lovelace" || p.Faces != 2 {
		t.Errorf("person %+v", p)
	}
	// Another spelling of the same name is the same person.
	q, err := l.NameFaces(ids[2:], "ada lovelace")
	if err != nil {
		t.Fatal(err)
	}
	if q.ID != p.ID || q.Faces != 3 || q.Name != "Ada Lovelace" {
		t.Errorf("second naming made %+v, want the same person with 3 faces", q)
	}
	ps, err := l.People()
	if err != nil || len(ps) != 1 {
		t.Fatalf("people %+v, %v", ps, err)
	}
	for _, tc := range []struct {
		name string
		ids  []int64
		want error
	}{
		{"unknown face", []int64{ids[0], 999}, ErrUnknownFace},
		{"empty name", ids[:1], ErrInvalidName},
		{"control character", ids[:1], ErrInvalidName},
	} {
		name := map[string]string{"unknown face": "Bob", "empty name": "  ", "control character": "Bo\x07b"}[tc.name]
		if _, err := l.NameFaces(tc.ids, name); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A failed naming changes nothing: face 0 is still Ada's and no Bob exists.
	if f := faceOf(t, l, ids[0]); f.Person != "Ada Lovelace" {
		t.Errorf("face after the failed naming: %+v", f)
	}
	if _, err := l.PersonByName("Bob"); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("a failed naming created Bob: %v", err)
	}
}

func TestFacesFilter(t *testing.T) {
	l := testLibrary(t)
	a := addTestPhoto(t, l, "/a.jpg", 1, 2)
	b := addTestPhoto(t, l, "/b.jpg", 3, 2)
	if _, err := l.NameFaces([]int64{a[0], b[0]}, "Ada"); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveFace(b[1]); err != nil {
		t.Fatal(err)
	}
	ids := func(fs []Face, err error) []int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    FaceFilter
		want []int64
	}{
		{"all", FaceFilter{}, []int64{a[0], a[1], b[0]}},
		{"with removed", FaceFilter{Removed: true}, []int64{a[0], a[1], b[0], b[1]}},
		{"photo", FaceFilter{Photo: "/b.jpg"}, []int64{b[0]}},
		{"person", FaceFilter{Person: "ada"}, []int64{a[0], b[0]}},
		{"unknown", FaceFilter{Unknown: true}, []int64{a[1]}},
		{"ids", FaceFilter{IDs: []int64{b[0], a[1]}}, []int64{a[1], b[0]}},
		{"no ids", FaceFilter{IDs: []int64{}}, nil},
	} {
		if got := ids(l.Faces(tc.f)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, err := l.Faces(FaceFilter{Person: "Nobody"}); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("unknown person: %v", err)
	}
	if _, err := l.Faces(FaceFilter{Photo: "/nowhere.jpg"}); !errors.Is(err, ErrUnknownPhoto) {
		t.Errorf("unknown photo: %v", err)
	}
	if _, err := l.Face(12345); !errors.Is(err, ErrUnknownFace) {
		t.Errorf("unknown face: %v", err)
	}
}

func TestRejectUnassignRemove(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/a.jpg", 1, 3)
	if _, err := l.NameFaces(ids, "Ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreatePerson("Bob"); err != nil {
		t.Fatal(err)
	}
	// Rejecting Ada for her own face takes it away from her, as the user's decision.
	if err := l.RejectFace(ids[0], "Ada"); err != nil {
		t.Fatal(err)
	}
	if f := faceOf(t, l, ids[0]); f.PersonID != 0 || f.AssignedBy != ByUser {
		t.Errorf("rejected face %+v", f)
	}
	// Rejecting Bob for a face of Ada's leaves it Ada's.
	if err := l.RejectFace(ids[1], "Bob"); err != nil {
		t.Fatal(err)
	}
	if f := faceOf(t, l, ids[1]); f.Person != "Ada" {
		t.Errorf("face after rejecting another person: %+v", f)
	}
	rej, err := l.Rejections()
	if err != nil {
		t.Fatal(err)
	}
	if len(rej) != 2 || len(rej[ids[0]]) != 1 || len(rej[ids[1]]) != 1 {
		t.Errorf("rejections %v", rej)
	}
	// Naming the face Ada after all lifts the rejection.
	if _, err := l.NameFaces(ids[:1], "Ada"); err != nil {
		t.Fatal(err)
	}
	if rej, _ := l.Rejections(); len(rej[ids[0]]) != 0 {
		t.Errorf("rejection kept after naming: %v", rej)
	}
	if err := l.UnassignFace(ids[2]); err != nil {
		t.Fatal(err)
	}
	if f := faceOf(t, l, ids[2]); f.PersonID != 0 || f.AssignedBy != ByUser {
		t.Errorf("unassigned face %+v", f)
	}
	if err := l.SetCover("Ada", ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveFace(ids[1]); err != nil {
		t.Fatal(err)
	}
	f := faceOf(t, l, ids[1])
	if !f.Removed || f.PersonID != 0 || f.AssignedBy != ByUser {
		t.Errorf("removed face %+v", f)
	}
	if p, _ := l.PersonByName("Ada"); p.Cover != 0 || p.Faces != 1 {
		t.Errorf("Ada after removing her cover face: %+v", p)
	}
	if _, err := l.NameFaces(ids[1:2], "Ada"); !errors.Is(err, ErrFaceRemoved) {
		t.Errorf("naming a removed face: %v", err)
	}
	for name, err := range map[string]error{
		"reject unknown face":   l.RejectFace(999, "Ada"),
		"reject unknown person": l.RejectFace(ids[0], "Nobody"),
		"unassign unknown face": l.UnassignFace(999),
		"remove unknown face":   l.RemoveFace(999),
	} {
		if !errors.Is(err, ErrUnknownFace) && !errors.Is(err, ErrUnknownPerson) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The user's decisions outrank automatic ones: AssignAuto (how suggestions
// accepted in bulk, clustering and learning assign faces) never overwrites
// a face the user named, unassigned or removed, nor assigns a face to a
// person the user rejected for it, even when asked to in bulk; it does fill
// undecided faces and may replace its own earlier assignments.
func TestAutomaticNeverOverridesTheUser(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/a.jpg", 1, 6)
	named, unassigned, removed, rejected, free, autoed := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	ada, err := l.NameFaces([]int64{named, unassigned}, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := l.CreatePerson("Bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.UnassignFace(unassigned); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveFace(removed); err != nil {
		t.Fatal(err)
	}
	if err := l.RejectFace(rejected, "Bob"); err != nil {
		t.Fatal(err)
	}
	if n, err := l.AssignAuto([]Assignment{{autoed, ada.ID}}); err != nil || n != 1 {
		t.Fatalf("first automatic assignment: %d, %v", n, err)
	}
	before := map[int64]Face{}
	for _, id := range ids {
		before[id] = faceOf(t, l, id)
	}

	var bulk []Assignment
	for _, id := range ids {
		bulk = append(bulk, Assignment{id, bob.ID})
	}
	n, err := l.AssignAuto(bulk)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("AssignAuto applied %d assignments, want 2 (the undecided face and the automatic one)", n)
	}
	for _, id := range []int64{named, unassigned, removed, rejected} {
		got, was := faceOf(t, l, id), before[id]
		if got.PersonID != was.PersonID || got.AssignedBy != was.AssignedBy || got.Removed != was.Removed {
			t.Errorf("face %d changed by automatic assignment: %+v, was %+v", id, got, was)
		}
	}
	for _, id := range []int64{free, autoed} {
		if f := faceOf(t, l, id); f.PersonID != bob.ID || f.AssignedBy != ByAuto {
			t.Errorf("face %d: %+v, want auto-assigned to Bob", id, f)
		}
	}
	// ClearAuto undoes only the automatic assignments.
	if k, err := l.ClearAuto(); err != nil || k != 2 {
		t.Errorf("ClearAuto cleared %d, %v; want 2", k, err)
	}
	if f := faceOf(t, l, named); f.PersonID != ada.ID || f.AssignedBy != ByUser {
		t.Errorf("ClearAuto touched the user's face: %+v", f)
	}
	if f := faceOf(t, l, free); f.PersonID != 0 || f.AssignedBy != "" {
		t.Errorf("face after ClearAuto: %+v", f)
	}
	// The user may always override an automatic assignment.
	if _, err := l.AssignAuto([]Assignment{{free, bob.ID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.NameFaces([]int64{free}, "Ada"); err != nil {
		t.Fatal(err)
	}
	if f := faceOf(t, l, free); f.PersonID != ada.ID || f.AssignedBy != ByUser {
		t.Errorf("the user's naming after an automatic one: %+v", f)
	}
	// Unknown ids are errors and nothing of the batch is applied.
	if _, err := l.AssignAuto([]Assignment{{autoed, bob.ID}, {999, bob.ID}}); !errors.Is(err, ErrUnknownFace) {
		t.Errorf("unknown face: %v", err)
	}
	if _, err := l.AssignAuto([]Assignment{{autoed, 999}}); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("unknown person: %v", err)
	}
	if f := faceOf(t, l, autoed); f.PersonID != 0 {
		t.Errorf("a failed batch was applied in part: %+v", f)
	}
}

// TestClearAutoError: a failure is worded for the user and keeps its cause
// for errors.Is (the library here is closed under it).
func TestClearAutoError(t *testing.T) {
	l, err := Create(t.TempDir(), []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, err = l.ClearAuto()
	if err == nil || !strings.HasPrefix(err.Error(), "clearing automatic assignments: ") || errors.Unwrap(err) == nil {
		t.Errorf("ClearAuto on a closed library: %v", err)
	}
}

// TestFaceBatchesAllOrNothing gives RejectFaces, UnassignFaces and
// RemoveFaces batches whose last item fails (an unknown face, or a write
// the database refuses: a trigger stands for a full disk) and checks the
// database is then exactly as before, byte for byte of every table.
func TestFaceBatchesAllOrNothing(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/a.jpg", 1, 3)
	if _, err := l.NameFaces(ids, "Ada"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCover("Ada", ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := l.inTx(t.Context(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO clusters (face_id, cluster) VALUES (?, 1), (?, 1)`, ids[0], ids[1])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func([]int64) error{
		"reject":   func(b []int64) error { return l.RejectFaces(b, "Ada") },
		"unassign": l.UnassignFaces,
		"remove":   l.RemoveFaces,
	}
	before, err := dumpSQL(l.db)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, want error) {
		t.Helper()
		if err == nil || (want != nil && !errors.Is(err, want)) {
			t.Errorf("%s: %v, want an error (%v)", what, err, want)
		}
		after, derr := dumpSQL(l.db)
		if derr != nil {
			t.Fatal(derr)
		}
		if after != before {
			t.Errorf("%s failed on its last face but changed the library", what)
		}
	}
	for name, op := range ops {
		check(name+" with an unknown last face", op([]int64{ids[0], ids[1], 999}), ErrUnknownFace)
		check(name+" of no faces", op(nil), nil)
	}
	editOutside(l) // the failing trigger is not Veil's
	if _, err := l.db.Exec(fmt.Sprintf(`CREATE TRIGGER refuse_last BEFORE UPDATE ON faces WHEN OLD.id = %d
		BEGIN SELECT RAISE(ABORT, 'disk full'); END`, ids[2])); err != nil {
		t.Fatal(err)
	}
	if before, err = dumpSQL(l.db); err != nil {
		t.Fatal(err)
	}
	for name, op := range ops {
		check(name+" with a failing last write", op(ids), nil)
	}
	if err := l.RejectFaces(ids, "Nobody"); !errors.Is(err, ErrUnknownPerson) {
		t.Errorf("rejecting an unknown person: %v", err)
	}
}
