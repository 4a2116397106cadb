package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestRepeatedEditsSayWhatHappened: removing a face removed before said
// "removed 1 face" again, and accepting a suggestion for a face named
// since said "no current suggestion". Each now says what state the face is
// in.
func TestRepeatedEditsSayWhatHappened(t *testing.T) {
	dir, _ := lfwTestLibrary(t)
	code, out, errs := run(t, "suggest", "--library", dir, "--json")
	if code != 0 {
		t.Fatalf("suggest: exit %d: %s", code, errs)
	}
	var sugs struct {
		Suggestions []jsonSuggestion `json:"suggestions"`
	}
	if err := json.Unmarshal([]byte(out), &sugs); err != nil {
		t.Fatal(err)
	}
	if len(sugs.Suggestions) < 5 {
		t.Fatalf("%d suggestions", len(sugs.Suggestions))
	}
	named, accepted, removed, plain := sugs.Suggestions[0], sugs.Suggestions[1], sugs.Suggestions[2], sugs.Suggestions[3]
	id := func(s jsonSuggestion) string { return strconv.FormatInt(s.Face, 10) }
	veil := func(args ...string) string {
		t.Helper()
		code, out, errs := run(t, append(args, "--library", dir)...)
		if code != 0 {
			t.Fatalf("veil %v: exit %d: %s", args, code, errs)
		}
		return out
	}
	if out := veil("suggest", "accept", id(accepted)); out != "face "+id(accepted)+": "+accepted.Person+"\n" {
		t.Fatalf("accept: %q", out)
	}
	veil("faces", "name", id(named), "--person", "Zed")
	if out := veil("faces", "remove", id(removed)); out != "removed 1 face\n" {
		t.Errorf("first removal: %q", out)
	}

	// Removing again, with a face not removed yet.
	out = veil("faces", "remove", id(removed), id(plain))
	want := "face " + id(removed) + " was already removed\nremoved 1 face\n"
	if out != want {
		t.Errorf("removing again: %q, want %q", out, want)
	}
	if out := veil("faces", "remove", id(removed)); out != "face "+id(removed)+" was already removed\n" {
		t.Errorf("removing only a removed face: %q", out)
	}
	if out := veil("faces", "unassign", id(named)); out != "unassigned 1 face\n" {
		t.Errorf("unassign: %q", out)
	}
	if out := veil("faces", "unassign", id(named)); out != "face "+id(named)+" was already unassigned\n" {
		t.Errorf("unassign again: %q", out)
	}
	veil("faces", "name", id(named), "--person", "Zed")

	// Accepting suggestions for faces named, accepted before and removed.
	out = veil("suggest", "accept", id(named), id(accepted), id(removed))
	for _, w := range []string{
		"face " + id(named) + " is already named Zed",
		"face " + id(accepted) + " is already " + accepted.Person + ", by an earlier suggestion",
		"face " + id(removed) + " was removed as a false face",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("accept: %q lacks %q", out, w)
		}
	}
	if strings.Contains(out, "no current suggestion") {
		t.Errorf("accept: %q still says no current suggestion", out)
	}

	// The test library's photos are paths with no file: adding an empty
	// folder marks them all missing, and their faces are not suggested.
	if testing.Short() {
		return
	}
	veil("library", "add", "--quiet", t.TempDir())
	gone := sugs.Suggestions[4]
	out = veil("suggest", "accept", id(gone))
	if want := "face " + id(gone) + " is in a missing photo"; !strings.Contains(out, want) {
		t.Errorf("accept in a missing photo: %q lacks %q", out, want)
	}
}
