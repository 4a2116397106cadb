package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/tagging"
)

// libraryState is what a library holds, read through the tagging API.
type libraryState struct {
	photos map[string][32]byte // path → content hash
	faces  map[string][]int64  // path → face ids
}

func readLibrary(t *testing.T, dir string) libraryState {
	t.Helper()
	l, err := tagging.Open(dir, []byte("crash test"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.CheckIntegrity(t.Context()); err != nil {
		t.Fatal(err)
	}
	ps, err := l.Photos()
	if err != nil {
		t.Fatal(err)
	}
	st := libraryState{photos: map[string][32]byte{}, faces: map[string][]int64{}}
	for _, p := range ps {
		st.photos[p.Path] = p.SHA256
	}
	// Decrypting every descriptor checks each face was written whole.
	fs, err := l.Faces(tagging.FaceFilter{Descriptors: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if len(f.Descriptor) != 128 {
			t.Errorf("face %d of %s has a %d-d descriptor", f.ID, f.Photo, len(f.Descriptor))
		}
		st.faces[f.Photo] = append(st.faces[f.Photo], f.ID)
	}
	return st
}

// countPhotos counts the photos committed so far, reading the database
// while veil library add writes it (WAL lets a reader in).
func countPhotos(dir string) int {
	l, err := tagging.Open(dir, []byte("crash test"))
	if err != nil {
		return 0
	}
	defer l.Close()
	st, err := l.Status(context.Background())
	if err != nil {
		return 0
	}
	return st.Photos
}

type addJSON struct {
	Added       int  `json:"photos_added"`
	Skipped     int  `json:"photos_skipped"`
	Failed      int  `json:"photos_failed"`
	Faces       int  `json:"faces"`
	Interrupted bool `json:"interrupted"`
}

// TestLibraryAddSurvivesSIGKILL kills a real `veil library add` with
// SIGKILL in the middle of a folder of LFW photos, then stops the next run
// with SIGTERM, and lets a third finish: no photo committed before a kill
// is lost, changed or duplicated, every photo's faces are whole, each run
// goes on where the last stopped, and the end state has every photo once.
func TestLibraryAddSurvivesSIGKILL(t *testing.T) {
	bin := buildVeil(t)
	start := time.Now()
	dir := t.TempDir()
	photos := filepath.Join(dir, "photos")
	lib := filepath.Join(dir, "lib")
	if err := os.MkdirAll(photos, 0o755); err != nil {
		t.Fatal(err)
	}
	// 10 photos of 10 people (enough for three runs; each photo costs
	// about a second of both cores), LFW's first names in its folder order.
	src := datadir.ForTest(t, "lfw", "images_deepfunneled")
	people, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var names []string
	for _, p := range people[:n] {
		name := p.Name() + "_0001.jpg"
		b, err := os.ReadFile(filepath.Join(src, p.Name(), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(photos, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Join(photos, name))
	}
	t.Setenv("VEIL_PASSPHRASE", "crash test")
	t.Setenv("VEIL_LIBRARY", "")
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	ps.run("library", "init", "--library", lib, "--argon2-time", "1", "--argon2-memory", "1", "--argon2-threads", "1")

	// waitFor polls until at least k photos are committed, then signals p.
	waitFor := func(p *proc, k int, sig syscall.Signal) int {
		t.Helper()
		for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
			select {
			case <-p.done:
				t.Fatalf("%s finished before it could be stopped (%v); log:\n%s", p.name, p.err, ps.log(p))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s committed fewer than %d photos in %s; log:\n%s", p.name, k, patience, ps.log(p))
			}
			if c := countPhotos(lib); c >= k {
				if err := p.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				return c
			}
		}
	}
	args := []string{"library", "add", "--library", lib, "--json", "--quiet", photos}

	// 1. SIGKILL once 3 photos are in.
	first := ps.start("add-1", args...)
	waitFor(first, 3, syscall.SIGKILL)
	<-first.done
	killed := readLibrary(t, lib)
	k1 := len(killed.photos)
	t.Logf("SIGKILL after %d of %d photos were committed", k1, n)
	if k1 >= n {
		t.Fatalf("all %d photos were in before the kill: the test did not interrupt the run", n)
	}
	for path := range killed.photos {
		if len(killed.faces[path]) == 0 {
			t.Errorf("%s was committed without its faces", path)
		}
	}

	// 2. The next run goes on; SIGTERM it after at least one more photo:
	// it stops, says so, and exits 130.
	second := ps.start("add-2", args...)
	waitFor(second, k1+1, syscall.SIGTERM)
	if err := ps.wait(second, patience); err == nil {
		t.Fatal("the SIGTERM'd run exited 0")
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("the SIGTERM'd run: %v, want exit status 130; log:\n%s", err, ps.log(second))
	}
	var out2 addJSON
	if err := json.Unmarshal(second.stdout.Bytes(), &out2); err != nil {
		t.Fatalf("%v in %q", err, second.stdout.String())
	}
	if !out2.Interrupted || out2.Skipped != k1 || out2.Failed != 0 {
		t.Errorf("the SIGTERM'd run's report: %+v (the killed run had committed %d)", out2, k1)
	}
	stopped := readLibrary(t, lib)
	k2 := len(stopped.photos)
	if k2 != k1+out2.Added {
		t.Errorf("%d photos after the second run; %d before and %d added", k2, k1, out2.Added)
	}

	// 3. The last run finishes the rest.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("the last run: %v", err)
	}
	var out3 addJSON
	if err := json.Unmarshal(b, &out3); err != nil {
		t.Fatalf("%v in %q", err, b)
	}
	if out3.Added != n-k2 || out3.Skipped != k2 || out3.Failed != 0 || out3.Interrupted {
		t.Errorf("the last run: %+v, want %d added and %d skipped", out3, n-k2, k2)
	}
	final := readLibrary(t, lib)
	var got []string
	for p := range final.photos {
		got = append(got, p)
	}
	sort.Strings(got)
	sort.Strings(names)
	if len(got) != n {
		t.Fatalf("%d photos at the end, want %d: %v", len(got), n, got)
	}
	for i := range got {
		if got[i] != names[i] {
			t.Errorf("photo %d is %s, want %s", i, got[i], names[i])
		}
	}
	// What each earlier run committed is unchanged: same bytes, same faces.
	for _, earlier := range []libraryState{killed, stopped} {
		for path, sum := range earlier.photos {
			if final.photos[path] != sum {
				t.Errorf("%s changed hash", path)
			}
			if a, b := earlier.faces[path], final.faces[path]; !slices.Equal(a, b) {
				t.Errorf("%s: faces %v before, %v after", path, a, b)
			}
		}
	}
	for path := range final.photos {
		if len(final.faces[path]) == 0 {
			t.Errorf("%s has no face", path)
		}
	}
	t.Logf("took %s", time.Since(start).Round(time.Second))
}
