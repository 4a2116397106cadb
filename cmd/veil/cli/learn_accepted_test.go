package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/tagging"
)

// TestLearnCountsAcceptedSuggestions: a user who accepted suggestions was
// told to "name more faces first" with no word of them. learn now counts
// the faces named by accepted suggestions, says they are not learned from
// and why (--help), and how to make them count.
func TestLearnCountsAcceptedSuggestions(t *testing.T) {
	dir := initTestLibrary(t)
	addLearnPeople(t, dir, 4, 4, 1) // one name of each of 4 people: too few
	l, err := tagging.Open(dir, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := l.Faces(tagging.FaceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var as []tagging.Assignment
	for _, f := range fs {
		if f.PersonID == 0 {
			as = append(as, tagging.Assignment{Face: f.ID, Person: fs[(f.ID-1)/4*4].PersonID})
		}
	}
	n, err := l.AssignAuto(as) // as accepting the suggestions would
	l.Close()
	if err != nil || n != 12 {
		t.Fatalf("assigned %d (err %v), want 12", n, err)
	}
	mustFail(t, "name more faces first (12 faces named by accepted suggestions do not count: see --help)", "library", "learn", "--library", dir)
	out := veilOK(t, "library", "learn", "--library", dir, "--status")
	if !strings.Contains(out, "4 names now") || !strings.Contains(out, "not learned from: 12 faces named by accepted suggestions") {
		t.Errorf("learn --status: %q", out)
	}
	var js jsonLearn
	if err := json.Unmarshal([]byte(veilOK(t, "library", "learn", "--library", dir, "--status", "--json")), &js); err != nil {
		t.Fatal(err)
	}
	if js.Names != 4 || js.Accepted != 12 {
		t.Errorf("learn --status --json: names %d, accepted suggestions %d; want 4 and 12", js.Names, js.Accepted)
	}
	help := veilOK(t, "library", "learn", "--help")
	if !strings.Contains(help, "teach the metric its own mistakes") {
		t.Errorf("learn --help does not say why accepted suggestions do not count:\n%s", help)
	}
}
