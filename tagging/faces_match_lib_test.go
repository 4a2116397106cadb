package tagging

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
)

// lfwFace is a real descriptor of an LFW development-training image
// (testdata/match_lfw.json: the face pipeline's descriptors, detector tiny,
// both alignments, of five people with 6–8 photos and three people with
// one).
type lfwFace struct {
	Person     string    `json:"person"`
	Image      int       `json:"image"`
	Descriptor []float32 `json:"descriptor"`
}

func loadLFWFaces(t *testing.T) []lfwFace {
	t.Helper()
	b, err := os.ReadFile("testdata/match_lfw.json")
	if err != nil {
		t.Fatal(err)
	}
	var fs []lfwFace
	if err := json.Unmarshal(b, &fs); err != nil {
		t.Fatal(err)
	}
	return fs
}

// addLFWPhoto records one photo holding the given faces.
func addLFWPhoto(t *testing.T, l *Library, path string, faces ...lfwFace) []int64 {
	t.Helper()
	var nf []NewFace
	for i, f := range faces {
		nf = append(nf, NewFace{Box: Box{X: float64(10 + 100*i), Y: 10, Width: 80, Height: 80}, Score: 0.9, Source: Detected, Descriptor: f.Descriptor})
	}
	_, ids, err := l.AddPhoto(PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 250 * len(faces), Height: 250}, nf)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestLibrarySuggestAndClusterOnLFW(t *testing.T) {
	ctx := context.Background()
	l, err := Create(t.TempDir(), []byte("match test"), CreateOptions{KDF: KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := verifyIntegrity(ctx, l.db, &l.keys); err != nil {
			t.Errorf("after the test: %v", err)
		}
		l.Close()
	}()
	all := loadLFWFaces(t)
	// Angela Bassett's photos come later, to test incremental clustering.
	truth := map[int64]string{}
	byName := map[string][]int64{}
	var later []lfwFace
	for _, f := range all {
		if f.Person == "Angela_Bassett" {
			later = append(later, f)
			continue
		}
		id := addLFWPhoto(t, l, fmt.Sprintf("%s_%04d.jpg", f.Person, f.Image), f)[0]
		truth[id] = f.Person
		byName[f.Person] = append(byName[f.Person], id)
	}

	// Clusters of the unnamed library: pure enough to name in groups.
	o, err := NewClusterOptions(DefaultClusterAlgorithm)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := l.UpdateClusters(ctx, o, false)
	if err != nil {
		t.Fatal(err)
	}
	clusterOf := map[int64]int{}
	for _, g := range groups {
		for _, f := range g.Faces {
			clusterOf[f] = g.ID
		}
	}
	if len(clusterOf) != len(truth) {
		t.Fatalf("%d faces clustered, want every unnamed face (%d)", len(clusterOf), len(truth))
	}
	score := func(m map[int64]int) eval.BCubed {
		var cl, cs []int
		classes := map[string]int{}
		for f, c := range m {
			if _, ok := classes[truth[f]]; !ok {
				classes[truth[f]] = len(classes)
			}
			cl, cs = append(cl, c), append(cs, classes[truth[f]])
		}
		b, err := eval.BCubedScores(cl, cs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := score(clusterOf); b.Precision < 0.9 || b.Recall < 0.6 {
		t.Fatalf("clusters of real faces: BCubed %+v, want precision ≥ 0.9 and recall ≥ 0.6", b)
	}

	// New photos join incrementally: old faces keep their clusters, the
	// new person's faces share one (new) cluster of their own.
	for _, f := range later {
		id := addLFWPhoto(t, l, fmt.Sprintf("%s_%04d.jpg", f.Person, f.Image), f)[0]
		truth[id] = f.Person
		byName[f.Person] = append(byName[f.Person], id)
	}
	groups, err = l.UpdateClusters(ctx, o, false)
	if err != nil {
		t.Fatal(err)
	}
	after := map[int64]int{}
	for _, g := range groups {
		for _, f := range g.Faces {
			after[f] = g.ID
		}
	}
	for f, c := range clusterOf {
		if after[f] != c {
			t.Fatalf("face %d moved from cluster %d to %d when photos were added", f, c, after[f])
		}
	}
	if b := score(after); b.Precision < 0.9 {
		t.Fatalf("after the incremental join: BCubed %+v", b)
	}

	// The user names two photos of each of the five people.
	for _, name := range []string{"Al_Gore", "Al_Sharpton", "Amelia_Vega", "Ana_Guevara", "Angela_Bassett"} {
		if _, err := l.NameFaces(byName[name][:2], name); err != nil {
			t.Fatal(err)
		}
	}
	// Named faces leave their clusters.
	groups, err = l.UpdateClusters(ctx, o, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		for _, f := range g.Faces {
			for _, name := range []string{"Al_Gore", "Angela_Bassett"} {
				if f == byName[name][0] || f == byName[name][1] {
					t.Fatalf("named face %d still clustered", f)
				}
			}
		}
	}

	sugs, err := l.Suggestions(DefaultSuggestOptions())
	if err != nil {
		t.Fatal(err)
	}
	known, strangers := 0, 0
	for _, s := range sugs {
		if s.Name != truth[s.Face] {
			t.Errorf("face %d (%s) suggested as %s at %.3f", s.Face, truth[s.Face], s.Name, s.Distance)
		}
		switch truth[s.Face] {
		case "Allan_Wagner", "Ashley_Olsen", "Bob_Herz":
			strangers++
		default:
			known++
		}
	}
	// 35 − 10 named = 25 other faces of named people.
	if known < 18 {
		t.Errorf("%d of 25 faces of named people got a suggestion, want at least 18", known)
	}
	if strangers > 0 {
		t.Errorf("%d strangers' faces got a suggestion", strangers)
	}

	// A rejection is remembered: that person is never suggested for the face.
	target := sugs[0]
	if err := l.RejectFace(target.Face, target.Name); err != nil {
		t.Fatal(err)
	}
	sugs, err = l.Suggestions(DefaultSuggestOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sugs {
		if s.Face == target.Face && s.Person == target.Person {
			t.Fatalf("rejected person %s suggested again for face %d", s.Name, s.Face)
		}
	}

	// Accepting goes through AssignAuto: the face is assigned automatically;
	// a face the user unassigned gets no suggestion and is not assigned.
	acc := sugs[0]
	unassigned := sugs[1].Face
	if err := l.UnassignFace(unassigned); err != nil {
		t.Fatal(err)
	}
	applied, none, err := l.AcceptSuggestions([]int64{acc.Face, unassigned}, DefaultSuggestOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || applied[0].Face != acc.Face || len(none) != 1 || none[0] != unassigned {
		t.Fatalf("accepted %v, left %v", applied, none)
	}
	f, err := l.Face(acc.Face)
	if err != nil {
		t.Fatal(err)
	}
	if f.PersonID != acc.Person || f.AssignedBy != ByAuto {
		t.Fatalf("accepted face: person %d by %q, want %d by auto", f.PersonID, f.AssignedBy, acc.Person)
	}
	if f, _ := l.Face(unassigned); f.PersonID != 0 {
		t.Fatalf("face the user unassigned was assigned to %d", f.PersonID)
	}
	// An unknown face among the ids: an error, and nothing is assigned.
	sugs, err = l.Suggestions(DefaultSuggestOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.AcceptSuggestions([]int64{sugs[0].Face, 99999}, DefaultSuggestOptions()); err == nil {
		t.Fatal("unknown face accepted")
	}
	if f, _ := l.Face(sugs[0].Face); f.PersonID != 0 {
		t.Fatalf("face %d assigned although the request failed", sugs[0].Face)
	}

	// Two faces of Al Gore in one photo: at most one is suggested as him.
	gore := []lfwFace{}
	for _, x := range all {
		if x.Person == "Al_Gore" && x.Image >= 7 {
			gore = append(gore, x)
		}
	}
	pair := addLFWPhoto(t, l, "two_gores.jpg", gore...)
	sugs, err = l.Suggestions(DefaultSuggestOptions())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range sugs {
		if s.Face == pair[0] || s.Face == pair[1] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d faces of one photo suggested as the same person, want exactly 1", n)
	}

	// Search with one of Al Gore's descriptors finds him and his photos.
	res, people, err := l.SearchLibrary([][]float32{gore[0].Descriptor}, DefaultSuggestOptions(), SearchDistance, 0)
	if err != nil {
		t.Fatal(err)
	}
	if people[res[0].Person].Name != "Al_Gore" || len(res[0].Matches) < 3 {
		t.Fatalf("search: %+v", res[0])
	}
	for _, m := range res[0].Matches {
		if m.Face != pair[0] && m.Face != pair[1] && truth[m.Face] != "Al_Gore" {
			t.Fatalf("search matched face %d of %s", m.Face, truth[m.Face])
		}
	}
	// SearchPhoto says the same with names and paths: the person, each
	// matching face's photo path, the people and photos listed once.
	ps, err := l.SearchPhoto([]face.Face{{Box: face.Box{X: 1, Y: 2, Width: 3, Height: 4}, Descriptor: gore[0].Descriptor}}, DefaultSuggestOptions(), SearchDistance, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Faces) != 1 || ps.Faces[0].Person != "Al_Gore" || ps.Faces[0].Box.Width != 3 || len(ps.Faces[0].Matches) != len(res[0].Matches) ||
		len(ps.People) != 1 || ps.People[0] != "Al_Gore" || len(ps.Photos) == 0 {
		t.Fatalf("photo search: %+v", ps)
	}
	photos := map[string]bool{}
	for i, m := range ps.Faces[0].Matches {
		if m.Face != res[0].Matches[i].Face || m.PhotoID != res[0].Matches[i].Photo || m.Photo == "" {
			t.Fatalf("match %d: %+v, want face %d with its photo's path", i, m, res[0].Matches[i].Face)
		}
		photos[m.Photo] = true
	}
	if len(photos) != len(ps.Photos) {
		t.Fatalf("%d photos matched, %d listed", len(photos), len(ps.Photos))
	}
	if empty, err := l.SearchPhoto(nil, DefaultSuggestOptions(), SearchDistance, 0); err != nil || empty.Faces == nil || empty.People == nil || empty.Photos == nil {
		t.Fatalf("a photo without faces: %+v, %v", empty, err)
	}
}
