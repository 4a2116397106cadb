package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// veilOK runs veil and fails the test unless it exits 0; it returns stdout.
func veilOK(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := run(t, args...)
	if code != 0 {
		t.Fatalf("veil %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	return out
}

// listFaces runs veil faces list --json with extra arguments and decodes it
// generically, so the test sees exactly the fields the output has.
func listFaces(t *testing.T, dir string, args ...string) []map[string]any {
	t.Helper()
	out := veilOK(t, append([]string{"faces", "list", "--library", dir, "--json"}, args...)...)
	var doc map[string][]map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(doc) != 1 || doc["faces"] == nil {
		t.Fatalf("faces list JSON has keys %v, want only faces (a list, even empty): %s", keys(doc), out)
	}
	return doc["faces"]
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func faceIDs(fs []map[string]any) []string {
	var ids []string
	for _, f := range fs {
		ids = append(ids, fmt.Sprint(f["id"]))
	}
	return ids
}

func TestFacesListShape(t *testing.T) {
	dir := initTestLibrary(t)
	if fs := listFaces(t, dir); len(fs) != 0 {
		t.Fatalf("empty library lists %v", fs)
	}
	ids := addLibraryPhoto(t, dir, "/photos/a.jpg", 2)
	veilOK(t, "faces", "name", fmt.Sprint(ids[0]), "--person", "Ada Lovelace", "--library", dir)
	fs := listFaces(t, dir)
	if len(fs) != 2 {
		t.Fatalf("%d faces, want 2", len(fs))
	}
	want := []string{"assigned_by", "box", "id", "person", "photo", "score", "source"}
	if got := keys(fs[0]); !slices.Equal(got, want) {
		t.Errorf("named face has keys %v, want %v", got, want)
	}
	// The shape: person is null for a face nobody is assigned to.
	if got := keys(fs[1]); !slices.Equal(got, []string{"box", "id", "person", "photo", "score", "source"}) {
		t.Errorf("unknown face has keys %v", got)
	}
	if p, ok := fs[1]["person"]; !ok || p != nil {
		t.Errorf("unknown face's person = %v, want null", p)
	}
	f := fs[0]
	box, _ := f["box"].(map[string]any)
	if keys(box) == nil || !slices.Equal(keys(box), []string{"height", "width", "x", "y"}) {
		t.Errorf("box %v", f["box"])
	}
	if f["id"] != float64(ids[0]) || f["photo"] != "/photos/a.jpg" || f["person"] != "Ada Lovelace" ||
		f["source"] != "detected" || f["score"] != 0.75 || box["x"] != 10.0 || box["width"] != 80.0 || f["assigned_by"] != "user" {
		t.Errorf("face %v", f)
	}
}

func TestFacesCommands(t *testing.T) {
	dir := initTestLibrary(t)
	t.Setenv(envLibrary, dir)
	a := addLibraryPhoto(t, dir, "/photos/a.jpg", 3)
	wd := t.TempDir()
	rel := filepath.Join(wd, "b.jpg") // recorded absolute, asked for relative
	b := addLibraryPhoto(t, dir, rel, 1)
	id := func(x int64) string { return fmt.Sprint(x) }

	out := veilOK(t, "faces", "name", id(a[0]), id(b[0]), "--person", "Ada")
	if !strings.Contains(out, "named 2 faces Ada") {
		t.Errorf("name said %q", out)
	}
	if out := veilOK(t, "faces", "name", id(a[1]), "--person", "Bob"); out != "named 1 face Bob (1 face in all)\n" {
		t.Errorf("name said %q", out)
	}
	if got := faceIDs(listFaces(t, dir, "--person", "ada")); !slices.Equal(got, []string{id(a[0]), id(b[0])}) {
		t.Errorf("Ada's faces %v", got)
	}
	if got := faceIDs(listFaces(t, dir, "--unknown")); !slices.Equal(got, []string{id(a[2])}) {
		t.Errorf("unknown faces %v", got)
	}
	if got := faceIDs(listFaces(t, dir, "--photo", "/photos/a.jpg")); !slices.Equal(got, []string{id(a[0]), id(a[1]), id(a[2])}) {
		t.Errorf("faces of a.jpg %v", got)
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
	if got := faceIDs(listFaces(t, dir, "--photo", "b.jpg")); !slices.Equal(got, []string{id(b[0])}) {
		t.Errorf("faces of b.jpg given relative %v", got)
	}
	t.Chdir(cwd)

	veilOK(t, "faces", "reject", id(a[1]), "--person", "Bob")
	if got := faceIDs(listFaces(t, dir, "--unknown")); !slices.Equal(got, []string{id(a[1]), id(a[2])}) {
		t.Errorf("unknown faces after rejecting Bob %v", got)
	}
	veilOK(t, "faces", "unassign", id(b[0]))
	if got := faceIDs(listFaces(t, dir, "--person", "Ada")); !slices.Equal(got, []string{id(a[0])}) {
		t.Errorf("Ada's faces after unassigning %v", got)
	}
	veilOK(t, "faces", "remove", id(a[2]))
	if got := faceIDs(listFaces(t, dir)); !slices.Equal(got, []string{id(a[0]), id(a[1]), id(b[0])}) {
		t.Errorf("faces after removing %v", got)
	}
	human := veilOK(t, "faces", "list")
	if !strings.Contains(human, "3 faces") || !strings.Contains(human, "Ada") {
		t.Errorf("human listing:\n%s", human)
	}
}

func TestFacesBadInputs(t *testing.T) {
	dir := initTestLibrary(t)
	t.Setenv(envLibrary, dir)
	a := addLibraryPhoto(t, dir, "/photos/a.jpg", 2)
	id := fmt.Sprint(a[0])
	veilOK(t, "faces", "name", fmt.Sprint(a[1]), "--person", "Bob")
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"face 999: no such face", []string{"faces", "name", id, "999", "--person", "Ada"}},
		{`"x1" is not a face id`, []string{"faces", "name", "x1", "--person", "Ada"}},
		{`"0" is not a face id`, []string{"faces", "remove", "0"}},
		{"--person NAME", []string{"faces", "name", id}},
		{"a name must be", []string{"faces", "name", id, "--person", "   "}},
		{"face 999: no such face", []string{"faces", "reject", "999", "--person", "Bob"}},
		{`"Nobody": no such person`, []string{"faces", "reject", id, "--person", "Nobody"}},
		{"face 999: no such face", []string{"faces", "unassign", id, "999"}},
		{"face 999: no such face", []string{"faces", "remove", "999"}},
		{`"Nobody": no such person`, []string{"faces", "list", "--person", "Nobody"}},
		{"no such photo", []string{"faces", "list", "--photo", "/nowhere.jpg"}},
		{"at most one of", []string{"faces", "list", "--unknown", "--person", "Bob"}},
		{"veil faces unassign takes FACE... (got 0 arguments)", []string{"faces", "unassign"}},
		{"veil faces name takes FACE... --person NAME (got 0 arguments)", []string{"faces", "name", "--person", "Ada"}},
		{"veil people merge takes FROM INTO (got 1 argument)", []string{"people", "merge", "Bob"}},
		{"veil faces add takes PHOTO --box X,Y,W,H (got 0 arguments)", []string{"faces", "add", "--box", "1,2,30,30"}},
		{"veil people photos takes NAME (got 2 arguments)", []string{"people", "photos", "Bob", "Ada"}},
		// A typo in a subcommand is an error, not the group's help and
		// status 0.
		{`veil faces has no command "nmae" (did you mean name?)`, []string{"faces", "nmae", id}},
		{`veil people has no command "lsit" (did you mean list?)`, []string{"people", "lsit"}},
		{`veil library has no command "stauts" (did you mean status?)`, []string{"library", "stauts"}},
	} {
		mustExit(t, 1, tc.want, tc.args...)
	}
	// The failed commands changed nothing: an all-or-none naming did not
	// name a[0], unassign with a bad id did not unassign it.
	fs := listFaces(t, dir)
	if fs[0]["person"] != nil || fs[1]["person"] != "Bob" {
		t.Errorf("faces after the failed commands %v", fs)
	}
	veilOK(t, "faces", "name", id, "--person", "Ada")
	mustExit(t, 1, "face 999: no such face", "faces", "unassign", id, "999")
	if fs := listFaces(t, dir, "--person", "Ada"); len(fs) != 1 {
		t.Errorf("a failed unassign of two faces unassigned one: %v", fs)
	}
}

func TestPeopleCommands(t *testing.T) {
	dir := initTestLibrary(t)
	t.Setenv(envLibrary, dir)
	a := addLibraryPhoto(t, dir, "/photos/a.jpg", 2)
	b := addLibraryPhoto(t, dir, "/photos/b.jpg", 1)
	id := func(x int64) string { return fmt.Sprint(x) }
	veilOK(t, "faces", "name", id(a[0]), id(b[0]), "--person", "Ada")
	veilOK(t, "faces", "name", id(a[1]), "--person", "Ada L.")

	list := func() []map[string]any {
		t.Helper()
		out := veilOK(t, "people", "list", "--json")
		var doc map[string][]map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc) != 1 || doc["people"] == nil {
			t.Fatalf("people list JSON keys %v", keys(doc))
		}
		return doc["people"]
	}
	ps := list()
	if len(ps) != 2 || !slices.Equal(keys(ps[0]), []string{"cover", "faces", "hidden", "name"}) {
		t.Fatalf("people %v", ps)
	}
	if ps[0]["name"] != "Ada" || ps[0]["faces"] != 2.0 || ps[0]["hidden"] != false || ps[0]["cover"] != nil {
		t.Errorf("Ada %v", ps[0])
	}

	mustExit(t, 1, "cannot merge a person into themselves", "people", "merge", "Ada", "ada")
	mustExit(t, 1, `"Nobody": no such person`, "people", "merge", "Nobody", "Ada")
	mustExit(t, 1, "another person already has this name", "people", "rename", "Ada L.", "ADA")
	mustExit(t, 1, `"Nobody": no such person`, "people", "rename", "Nobody", "X")
	mustExit(t, 1, "a name must be", "people", "rename", "Ada", "")
	mustExit(t, 1, `"Nobody": no such person`, "people", "hide", "Nobody")
	mustExit(t, 1, "not assigned to this person", "people", "cover", "Ada", id(a[1]))
	mustExit(t, 1, "face 999: no such face", "people", "cover", "Ada", "999")
	mustExit(t, 1, `"Nobody": no such person`, "people", "photos", "Nobody")

	veilOK(t, "people", "merge", "Ada L.", "Ada")
	veilOK(t, "people", "rename", "Ada", "Ada Lovelace")
	veilOK(t, "people", "hide", "ada lovelace")
	veilOK(t, "people", "cover", "Ada Lovelace", id(a[1]))
	ps = list()
	if len(ps) != 1 || ps[0]["name"] != "Ada Lovelace" || ps[0]["faces"] != 3.0 || ps[0]["hidden"] != true || ps[0]["cover"] != float64(a[1]) {
		t.Errorf("people after merge, rename, hide, cover: %v", ps)
	}
	veilOK(t, "people", "unhide", "Ada Lovelace")
	if ps := list(); ps[0]["hidden"] != false {
		t.Errorf("still hidden: %v", ps)
	}
	out := veilOK(t, "people", "photos", "Ada Lovelace", "--json")
	var doc struct {
		Photos []struct {
			Path string `json:"path"`
		} `json:"photos"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Photos) != 2 || doc.Photos[0].Path != "/photos/a.jpg" || doc.Photos[1].Path != "/photos/b.jpg" {
		t.Errorf("photos %s", out)
	}
	if human := veilOK(t, "people", "photos", "Ada Lovelace"); human != "/photos/a.jpg\n/photos/b.jpg\n" {
		t.Errorf("human photos %q", human)
	}
}

// TestFaceEditsAllOrNothing gives reject, unassign and remove a batch of
// faces whose last one the library refuses (no such face): they must then
// change none of them, not the ones before the failure. (The library's own
// test also makes the last write fail inside the transaction; here the
// library is reopened by each command, and an outside trigger would now be
// refused as tampering.)
func TestFaceEditsAllOrNothing(t *testing.T) {
	dir := initTestLibrary(t)
	t.Setenv(envLibrary, dir)
	ids := addLibraryPhoto(t, dir, "/photos/a.jpg", 3)
	args := []string{fmt.Sprint(ids[0]), fmt.Sprint(ids[1]), fmt.Sprint(ids[2])}
	veilOK(t, append([]string{"faces", "name", "--person", "Ada"}, args...)...)
	unknown := fmt.Sprint(ids[2] + 1000)
	before := listFaces(t, dir)
	for _, cmd := range [][]string{
		{"faces", "reject", "--person", "Ada"},
		{"faces", "unassign"},
		{"faces", "remove"},
	} {
		mustExit(t, 1, unknown, append(cmd, args[0], args[1], unknown)...)
		if after := listFaces(t, dir); !reflect.DeepEqual(after, before) {
			t.Errorf("veil %s failed on the last face but changed the others:\nbefore %v\nafter  %v",
				strings.Join(cmd, " "), before, after)
		}
	}
	// The same batch without the unknown face goes through whole.
	veilOK(t, append([]string{"faces", "remove"}, args...)...)
	if fs := listFaces(t, dir); len(fs) != 0 {
		t.Errorf("faces left after removing all: %v", fs)
	}
}
