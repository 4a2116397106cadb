package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/tagging"
)

// TestClustersSummariseSingleFaces: the list printed every single-face
// cluster on a line of its own (hundreds in a real library). It now lists
// the clusters of two faces or more and counts the single faces in one
// line; --min-size 1 lists them all, and --json keeps every cluster.
func TestClustersSummariseSingleFaces(t *testing.T) {
	dir := initTestLibrary(t)
	// Five people of four photos each; of the last two, one face each is
	// kept: three clusters of four faces and two single faces.
	addLearnPeople(t, dir, 5, 4, 0)
	l, err := tagging.Open(dir, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := l.Faces(tagging.FaceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var remove []int64
	for _, f := range fs {
		if f.ID > 12 && (f.ID-1)%4 != 0 {
			remove = append(remove, f.ID)
		}
	}
	if err := l.RemoveFaces(remove); err != nil {
		t.Fatal(err)
	}
	l.Close()

	out := veilOK(t, "faces", "clusters", "--library", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "5 clusters of unnamed faces (3 shown, at least 2 faces each)") {
		t.Errorf("header %q", lines[0])
	}
	if got := lines[len(lines)-1]; got != "and 2 single faces: veil faces clusters --min-size 1 lists them" {
		t.Errorf("last line %q", got)
	}
	if len(lines) != 5 {
		t.Errorf("%d lines, want a header, 3 clusters and the count of single faces:\n%s", len(lines), out)
	}
	all := veilOK(t, "faces", "clusters", "--library", dir, "--min-size", "1")
	if n := strings.Count(all, "\ncluster "); n != 5 || strings.Contains(all, "single") {
		t.Errorf("--min-size 1: %d clusters listed:\n%s", n, all)
	}
	var js struct {
		Clusters []tagging.ClusterGroup `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(veilOK(t, "faces", "clusters", "--library", dir, "--json")), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Clusters) != 5 {
		t.Errorf("--json: %d clusters, want all 5", len(js.Clusters))
	}
	mustFail(t, "--min-size must be at least 1", "faces", "clusters", "--library", dir, "--min-size", "0")
}
