package cli

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/tagging"
)

// lfwTestLibrary fills a library with the real LFW descriptors of
// tagging/testdata/match_lfw.json, one photo per image, and names the first
// two photos of each of the five people with several photos through veil
// faces name. It returns the folder and each face's true person.
func lfwTestLibrary(t *testing.T) (string, map[int64]string) {
	t.Helper()
	dir := initTestLibrary(t)
	b, err := os.ReadFile("../../../tagging/testdata/match_lfw.json")
	if err != nil {
		t.Fatal(err)
	}
	var faces []struct {
		Person     string    `json:"person"`
		Image      int       `json:"image"`
		Descriptor []float32 `json:"descriptor"`
	}
	if err := json.Unmarshal(b, &faces); err != nil {
		t.Fatal(err)
	}
	l, err := tagging.Open(dir, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	truth := map[int64]string{}
	byName := map[string][]int64{}
	for _, f := range faces {
		path := fmt.Sprintf("%s_%04d.jpg", f.Person, f.Image)
		_, ids, err := l.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 250, Height: 250},
			[]tagging.NewFace{{Box: tagging.Box{X: 70, Y: 70, Width: 110, Height: 110}, Score: 0.9, Source: tagging.Detected, Descriptor: f.Descriptor}})
		if err != nil {
			t.Fatal(err)
		}
		truth[ids[0]] = f.Person
		byName[f.Person] = append(byName[f.Person], ids[0])
	}
	l.Close()
	for _, name := range []string{"Al_Gore", "Al_Sharpton", "Amelia_Vega", "Ana_Guevara", "Angela_Bassett"} {
		args := []string{"faces", "name", "--library", dir, "--person", name}
		for _, id := range byName[name][:2] {
			args = append(args, strconv.FormatInt(id, 10))
		}
		if code, _, errs := run(t, args...); code != 0 {
			t.Fatalf("faces name: exit %d: %s", code, errs)
		}
	}
	return dir, truth
}

// exactKeys fails unless the JSON object has exactly these keys.
func exactKeys(t *testing.T, what string, m map[string]json.RawMessage, keys ...string) {
	t.Helper()
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(keys)
	if !slices.Equal(got, keys) {
		t.Fatalf("%s has keys %v, want exactly %v", what, got, keys)
	}
}

func TestSuggestCommands(t *testing.T) {
	dir, truth := lfwTestLibrary(t)

	code, out, errs := run(t, "suggest", "--library", dir, "--json")
	if code != 0 {
		t.Fatalf("suggest: exit %d: %s", code, errs)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatal(err)
	}
	exactKeys(t, "suggest's output", top, "suggestions")
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(top["suggestions"], &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) < 15 {
		t.Fatalf("%d suggestions for 25 faces of named people", len(raw))
	}
	for _, r := range raw {
		exactKeys(t, "a suggestion", r, "face", "person", "distance")
	}
	var sugs struct {
		Suggestions []jsonSuggestion `json:"suggestions"`
	}
	if err := json.Unmarshal([]byte(out), &sugs); err != nil {
		t.Fatal(err)
	}
	for _, s := range sugs.Suggestions {
		if truth[s.Face] != s.Person {
			t.Errorf("face %d of %s suggested as %s", s.Face, truth[s.Face], s.Person)
		}
		if !(s.Distance > 0 && s.Distance <= tagging.SuggestDistance) {
			t.Errorf("distance %v outside (0, %v]", s.Distance, tagging.SuggestDistance)
		}
	}

	// Clusters: every unnamed face in exactly one cluster.
	code, out, errs = run(t, "faces", "clusters", "--library", dir, "--json")
	if code != 0 {
		t.Fatalf("faces clusters: exit %d: %s", code, errs)
	}
	top = nil
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatal(err)
	}
	exactKeys(t, "clusters' output", top, "clusters")
	var cl struct {
		Clusters []tagging.ClusterGroup `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(out), &cl); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, c := range cl.Clusters {
		for _, f := range c.Faces {
			if seen[f] {
				t.Fatalf("face %d in two clusters", f)
			}
			seen[f] = true
		}
	}
	if len(seen) != len(truth)-10 {
		t.Fatalf("%d faces clustered, want the %d unnamed ones", len(seen), len(truth)-10)
	}

	// The review queue asks about whole clusters, largest first.
	code, out, errs = run(t, "suggest", "--library", dir, "--review", "--json")
	if code != 0 {
		t.Fatalf("suggest --review: exit %d: %s", code, errs)
	}
	var rv struct {
		Review []jsonReviewGroup `json:"review"`
	}
	if err := json.Unmarshal([]byte(out), &rv); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, g := range rv.Review {
		n += len(g.Faces)
		if i > 0 && len(g.Faces) > len(rv.Review[i-1].Faces) {
			t.Fatalf("review queue not largest first: %+v", rv.Review)
		}
	}
	if n != len(sugs.Suggestions) || len(rv.Review) >= n {
		t.Fatalf("review: %d questions for %d suggestions (want fewer questions than faces, every suggestion in one)", len(rv.Review), n)
	}

	// Accept one suggestion; it is then named (automatically) and no
	// longer suggested.
	first := sugs.Suggestions[0]
	code, out, errs = run(t, "suggest", "accept", "--library", dir, "--json", strconv.FormatInt(first.Face, 10))
	if code != 0 {
		t.Fatalf("suggest accept: exit %d: %s", code, errs)
	}
	var acc struct {
		Accepted []jsonSuggestion `json:"accepted"`
		None     []int64          `json:"without_suggestion"`
	}
	if err := json.Unmarshal([]byte(out), &acc); err != nil {
		t.Fatal(err)
	}
	if len(acc.Accepted) != 1 || acc.Accepted[0].Face != first.Face || len(acc.None) != 0 {
		t.Fatalf("accept: %s", out)
	}
	code, out, _ = run(t, "faces", "list", "--library", dir, "--person", first.Person, "--json")
	if code != 0 || !json.Valid([]byte(out)) {
		t.Fatalf("faces list: exit %d", code)
	}
	var fl struct {
		Faces []jsonLibraryFace `json:"faces"`
	}
	_ = json.Unmarshal([]byte(out), &fl)
	found := false
	for _, f := range fl.Faces {
		if f.ID == first.Face {
			found = f.AssignedBy == tagging.ByAuto
		}
	}
	if !found {
		t.Fatalf("accepted face %d not assigned automatically to %s: %s", first.Face, first.Person, out)
	}

	// A rejection is honoured at the next run.
	second := sugs.Suggestions[1]
	if code, _, errs := run(t, "faces", "reject", "--library", dir, "--person", second.Person, strconv.FormatInt(second.Face, 10)); code != 0 {
		t.Fatalf("faces reject: exit %d: %s", code, errs)
	}
	_, out, _ = run(t, "suggest", "--library", dir, "--json")
	_ = json.Unmarshal([]byte(out), &sugs)
	for _, s := range sugs.Suggestions {
		if s.Face == first.Face || (s.Face == second.Face && s.Person == second.Person) {
			t.Fatalf("face %d suggested as %s after accepting or rejecting", s.Face, s.Person)
		}
	}

	mustFail(t, "face", "suggest", "accept", "--library", dir, "999999")
	mustFail(t, "margin", "suggest", "--library", dir, "--margin", "-1")
	mustFail(t, "algorithm", "faces", "clusters", "--library", dir, "--algorithm", "kmeans")
}

func TestSearchCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the face pipeline")
	}
	models := datadir.ModelDirForTest(t)
	dir, _ := lfwTestLibrary(t)
	photo := datadir.ForTest(t, "lfw", "images_deepfunneled", "Al_Gore", "Al_Gore_0003.jpg")
	code, out, errs := run(t, "search", "--library", dir, "--models", models, "--json", photo)
	if code != 0 {
		t.Fatalf("search: exit %d: %s", code, errs)
	}
	var res struct {
		Faces []struct {
			Number  int     `json:"number"`
			Person  *string `json:"person"`
			Matches []struct {
				Photo string `json:"photo"`
			} `json:"matches"`
		} `json:"faces"`
		People []string `json:"people"`
		Photos []string `json:"photos"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.People, "Al_Gore") || !slices.Contains(res.Photos, "Al_Gore_0003.jpg") {
		t.Fatalf("search of an Al Gore photo: %s", out)
	}
	for k, f := range res.Faces {
		if f.Number != k+1 {
			t.Errorf("search's face %d is numbered %d: faces are numbered from 1 as detect and compare number them", k+1, f.Number)
		}
	}
	for _, p := range res.People {
		if p != "Al_Gore" {
			t.Fatalf("search found %s too: %s", p, out)
		}
	}
	mustFail(t, "no such file", "search", "--library", dir, "--models", models, "missing.jpg")
}
