package cli

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/tagging"
)

// addLearnPeople records people × photos one-face photos whose descriptors
// cluster by person, names the first named photos of each, and returns
// nothing: the library is left closed.
func addLearnPeople(t *testing.T, dir string, people, photos, named int) {
	t.Helper()
	l, err := tagging.Open(dir, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for p := range people {
		c := make([]float64, 128)
		for i := range c {
			c[i] = 0.09 * rng.NormFloat64()
		}
		var ids []int64
		for k := range photos {
			d := make([]float32, 128)
			for i := range d {
				d[i] = float32(c[i] + 0.02*rng.NormFloat64())
			}
			path := fmt.Sprintf("/photos/%d/%d.jpg", p, k)
			_, fids, err := l.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 640, Height: 480},
				[]tagging.NewFace{{Box: tagging.Box{X: 10, Y: 20, Width: 80, Height: 90}, Score: 0.9, Source: tagging.Detected, Descriptor: d}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, fids...)
		}
		if named > 0 {
			if _, err := l.NameFaces(ids[:named], fmt.Sprintf("Person %d", p)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestLibraryLearn(t *testing.T) {
	dir := initTestLibrary(t)
	addLearnPeople(t, dir, 4, 4, 1)
	mustFail(t, "name more faces first", "library", "learn", "--library", dir)
	mustFail(t, "want on or off", "library", "learn", "--library", dir, "--status", "--use-metric", "maybe")
	l, err := tagging.Open(dir, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	faces, err := l.Faces(tagging.FaceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range faces { // name every face: 16 names of 4 people
		if f.PersonID == 0 {
			if _, err := l.NameFaces([]int64{f.ID}, fmt.Sprintf("Person %d", (f.ID-1)/4)); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Close()
	code, out, errs := run(t, "library", "learn", "--library", dir, "--iterations", "20", "--json")
	if code != 0 {
		t.Fatalf("learn: exit %d: %s", code, errs)
	}
	var got jsonLearn
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("learn --json: %v\n%s", err, out)
	}
	if got.Learned == nil || got.Learned.Names != 16 || got.Learned.People != 4 || got.Metric == nil || got.Metric.Version != got.Learned.Version || got.UseMetric {
		t.Errorf("learn --json: %s", out)
	}
	code, out, errs = run(t, "library", "learn", "--library", dir, "--status", "--use-metric", "on", "--json")
	if code != 0 {
		t.Fatalf("learn --status: exit %d: %s", code, errs)
	}
	got = jsonLearn{}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Learned != nil || !got.UseMetric || got.Names != 16 || got.Due {
		t.Errorf("learn --status --use-metric on: %s", out)
	}
	code, out, _ = run(t, "library", "learn", "--library", dir, "--iterations", "20")
	if code != 0 || !strings.Contains(out, "starting from the previous metric") || !strings.Contains(out, "suggestions use the metric: on") {
		t.Errorf("second learn: exit %d, %q", code, out)
	}
}

// veil suggest in the learned metric's space: with --use-metric, or the
// library set to it, the unnamed faces get their people with distances in
// the metric's space; plain descriptors otherwise.
func TestSuggestUseMetric(t *testing.T) {
	dir := initTestLibrary(t)
	addLearnPeople(t, dir, 4, 4, 3) // faces 4, 8, 12, 16 unnamed
	suggest := func(args ...string) map[int64]jsonSuggestion {
		t.Helper()
		code, out, errs := run(t, append([]string{"suggest", "--library", dir, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("suggest %v: exit %d: %s", args, code, errs)
		}
		var got struct{ Suggestions []jsonSuggestion }
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		m := map[int64]jsonSuggestion{}
		for _, s := range got.Suggestions {
			m[s.Face] = s
		}
		return m
	}
	plain := suggest()
	if code, _, errs := run(t, "library", "learn", "--library", dir, "--iterations", "20"); code != 0 {
		t.Fatalf("learn: %s", errs)
	}
	learned := suggest("--use-metric")
	set := func(v string) {
		if code, _, errs := run(t, "library", "learn", "--library", dir, "--status", "--use-metric", v); code != 0 {
			t.Fatalf("learn --use-metric %s: %s", v, errs)
		}
	}
	set("on")
	byLibrary := suggest()
	set("off")
	again := suggest()
	for p := range 4 {
		face := int64(4*p + 4)
		want := fmt.Sprintf("Person %d", p)
		for name, m := range map[string]map[int64]jsonSuggestion{"plain": plain, "--use-metric": learned, "library setting": byLibrary, "setting off": again} {
			if m[face].Person != want {
				t.Errorf("%s: face %d suggested %q, want %q", name, face, m[face].Person, want)
			}
		}
		if learned[face].Distance == plain[face].Distance || byLibrary[face].Distance != learned[face].Distance || again[face].Distance != plain[face].Distance {
			t.Errorf("face %d distances: plain %v, --use-metric %v, setting on %v, off %v", face, plain[face].Distance, learned[face].Distance, byLibrary[face].Distance, again[face].Distance)
		}
	}
	code, out, errs := run(t, "suggest", "accept", "--library", dir, "--use-metric", "--json", "4")
	if code != 0 || !strings.Contains(out, `"person": "Person 0"`) {
		t.Errorf("suggest accept --use-metric: exit %d, %s %s", code, out, errs)
	}
}
