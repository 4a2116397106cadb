package tagging

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// indexTestLibrary creates a library with a cheap key derivation.
func indexTestLibrary(t *testing.T) *Library {
	t.Helper()
	l, err := Create(t.TempDir(), []byte("index test"), CreateOptions{KDF: KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l.dek != nil {
			if err := verifyIntegrity(context.Background(), l.db, &l.keys); err != nil {
				t.Errorf("after the test: %v", err)
			}
		}
		l.Close()
	})
	return l
}

// writePhoto writes a w×h JPEG whose colour depends on shade, so photos
// of different shades have different bytes and fake descriptors.
func writePhoto(t *testing.T, path string, w, h int, shade uint8) {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			m.Set(x, y, color.RGBA{shade, uint8(x), uint8(y), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeRun stands in for the face pipeline in tests of the bookkeeping:
// one face at a fixed box for photos 200 px wide, two (one overlapping
// that box, one elsewhere) for photos 210 px wide; descriptors follow the
// photo's mean red, so photos of one shade get one descriptor.
func fakeRun(img *imaging.RGB) ([]face.Face, error) {
	var red float64
	for i := 0; i < len(img.Pix); i += 3 {
		red += float64(img.Pix[i])
	}
	red /= float64(img.W * img.H)
	mk := func(b face.Box) face.Face {
		f := face.Face{Box: b, Score: 0.9}
		for i := range f.Landmarks {
			f.Landmarks[i] = [2]float64{b.X + b.Width*float64(i%8)/8, b.Y + b.Height*float64(i/8)/9}
		}
		f.Descriptor = make([]float32, 128)
		for i := range f.Descriptor {
			f.Descriptor[i] = float32(red/255) + float32(i)/1000 + float32(b.X)/1e4
		}
		return f
	}
	switch img.W {
	case 200:
		return []face.Face{mk(face.Box{X: 50, Y: 40, Width: 60, Height: 60})}, nil
	case 210:
		return []face.Face{mk(face.Box{X: 55, Y: 42, Width: 60, Height: 60}), mk(face.Box{X: 140, Y: 80, Width: 40, Height: 40})}, nil
	}
	return nil, nil
}

func fakeIndex(t *testing.T, l *Library, opt IndexOptions, roots ...string) *IndexReport {
	t.Helper()
	opt.run = fakeRun
	rep, err := l.Index(context.Background(), roots, opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// counts is a report's outcome counts, for comparing in one line.
type counts struct{ Added, Unchanged, Moved, Duplicates, Updated, Failed, Faces, Missing, NewlyMissing, Returned int }

func countsOf(r *IndexReport) counts {
	return counts{r.Added, r.Unchanged, r.Moved, r.Duplicates, r.Updated, r.Failed, r.Faces, r.Missing, r.NewlyMissing, r.Returned}
}

func wantCounts(t *testing.T, r *IndexReport, want counts) {
	t.Helper()
	if got := countsOf(r); got != want {
		t.Errorf("report\n got %+v\nwant %+v\nerrors %v", got, want, r.Errors)
	}
}

// paths returns the library's photo paths by id.
func photoPaths(t *testing.T, l *Library) map[int64]string {
	t.Helper()
	ps, err := l.Photos()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for _, p := range ps {
		out[p.ID] = p.Path
	}
	return out
}

func TestIndexIncremental(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	writePhoto(t, filepath.Join(dir, "a.jpg"), 200, 150, 10)
	writePhoto(t, filepath.Join(dir, "b.jpg"), 200, 150, 100)
	writePhoto(t, filepath.Join(dir, "sub", "c.jpg"), 210, 150, 200)
	var progress []IndexProgress
	var reading, planned [][2]int
	opt := IndexOptions{Progress: func(p IndexProgress) { progress = append(progress, p) },
		Reading: func(done, total int) { reading = append(reading, [2]int{done, total}) },
		Planned: func(analyse, rest int) { planned = append(planned, [2]int{analyse, rest}) }}
	rep := fakeIndex(t, l, opt, dir)
	wantCounts(t, rep, counts{Added: 3, Faces: 4})
	if len(progress) != 3 || progress[2].Done != 3 || progress[2].Total != 3 || progress[2].Outcome != PhotoAdded || !progress[2].Analysed {
		t.Errorf("progress %+v", progress)
	}
	if !slices.Equal(planned, [][2]int{{3, 0}}) {
		t.Errorf("planned %v", planned)
	}
	if !slices.Equal(reading, [][2]int{{1, 3}, {2, 3}, {3, 3}}) {
		t.Errorf("reading progress %v", reading)
	}
	faces, err := l.Faces(FaceFilter{Descriptors: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(faces) != 4 {
		t.Fatalf("%d faces stored, want 4", len(faces))
	}
	for _, f := range faces {
		if len(f.Descriptor) != 128 || f.Source != Detected || f.Score != 0.9 || math.IsInf(f.Fit, 0) {
			t.Errorf("face %+v", f)
		}
	}
	p, err := l.PhotoByPath(filepath.Join(dir, "sub", "c.jpg"))
	if err != nil || p.Width != 210 || p.Height != 150 || p.Size == 0 || p.Taken != "" {
		t.Errorf("photo %+v, %v", p, err)
	}

	// A second run reads and hashes every file but analyses none.
	progress, planned = nil, nil
	rep = fakeIndex(t, l, opt, dir)
	wantCounts(t, rep, counts{Unchanged: 3})
	if !slices.Equal(planned, [][2]int{{0, 3}}) || len(progress) != 3 || progress[0].Analysed {
		t.Errorf("second run: planned %v, progress %+v", planned, progress)
	}
	if n := len(photoPaths(t, l)); n != 3 {
		t.Errorf("%d photos after the second run", n)
	}
	if again, _ := l.Faces(FaceFilter{}); len(again) != 4 {
		t.Errorf("%d faces after the second run", len(again))
	}
	// A new photo alone is added.
	writePhoto(t, filepath.Join(dir, "d.png.jpg"), 200, 150, 50)
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, dir), counts{Added: 1, Unchanged: 3, Faces: 1})
}

func TestIndexMovedFiles(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	writePhoto(t, p("1.jpg"), 200, 150, 10)
	writePhoto(t, p("2.jpg"), 200, 150, 20)
	writePhoto(t, p("3.jpg"), 200, 150, 30)
	writePhoto(t, p("4.jpg"), 200, 150, 40)
	fakeIndex(t, l, IndexOptions{}, dir)
	before := photoPaths(t, l)
	faceOf := func(path string) Face {
		t.Helper()
		fs, err := l.Faces(FaceFilter{Photo: path})
		if err != nil || len(fs) != 1 {
			t.Fatalf("faces of %s: %v, %v", path, fs, err)
		}
		return fs[0]
	}
	ann := faceOf(p("2.jpg"))
	if _, err := l.NameFaces([]int64{ann.ID}, "Ann"); err != nil {
		t.Fatal(err)
	}
	// Renumber 1→0, 2→1, 3→2 (each path taken by the next file), move 4
	// into a folder, and copy the new 0.jpg.
	for _, r := range [][2]string{{"1.jpg", "0.jpg"}, {"2.jpg", "1.jpg"}, {"3.jpg", "2.jpg"}} {
		if err := os.Rename(p(r[0]), p(r[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(p("trip"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p("4.jpg"), p("trip/four.jpg")); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p("0.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("zz-copy.jpg"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := fakeIndex(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Moved: 4, Duplicates: 1})
	after := photoPaths(t, l)
	want := map[string]string{"1.jpg": "0.jpg", "2.jpg": "1.jpg", "3.jpg": "2.jpg", "4.jpg": "trip/four.jpg"}
	for id, old := range before {
		if got, w := after[id], p(want[filepath.Base(old)]); got != w {
			t.Errorf("photo %d was %s: now %s, want %s", id, old, got, w)
		}
	}
	if len(after) != 4 {
		t.Errorf("%d photos, want 4", len(after))
	}
	// Ann's face kept its id and name and follows its bytes to 1.jpg.
	if f := faceOf(p("1.jpg")); f.ID != ann.ID || f.Person != "Ann" || f.AssignedBy != ByUser {
		t.Errorf("Ann's face after the move: %+v (was %d)", f, ann.ID)
	}
	// Nothing is missing, and a third run changes nothing.
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, dir), counts{Unchanged: 4, Duplicates: 1})
}

func TestIndexUnreadableFiles(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	writePhoto(t, filepath.Join(dir, "good.jpg"), 200, 150, 10)
	writePhoto(t, filepath.Join(dir, "truncated.jpg"), 200, 150, 20)
	data, _ := os.ReadFile(filepath.Join(dir, "truncated.jpg"))
	if err := os.WriteFile(filepath.Join(dir, "truncated.jpg"), data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	writeTree(t, dir, map[string]string{"notes.jpg": "not a photo", "empty.png": "", "phone.heic": "x"})
	symlink(t, filepath.Join(dir, "gone.jpg"), filepath.Join(dir, "link.jpg"))
	writePhoto(t, filepath.Join(dir, "z-good.jpg"), 200, 150, 30)

	rep := fakeIndex(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Added: 2, Failed: 3, Faces: 2})
	reasons := map[string]string{}
	for _, e := range rep.Errors {
		reasons[filepath.Base(e.Path)] = e.Err
	}
	wantReasons := map[string]string{
		"truncated.jpg": "decoding pixels",
		"notes.jpg":     "not a JPEG or PNG",
		"empty.png":     "empty input",
		"phone.heic":    "HEIC photos are not supported",
		"link.jpg":      "broken symbolic link",
	}
	for name, want := range wantReasons {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("%s: reason %q, want it to say %q", name, reasons[name], want)
		}
	}
	if len(reasons) != len(wantReasons) {
		t.Errorf("errors %v", rep.Errors)
	}
	st, err := l.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Failed) != 5 || st.Photos != 2 || st.Faces != 2 {
		t.Errorf("status %+v", st)
	}
	// Once the file reads, it is added and its error forgotten.
	writePhoto(t, filepath.Join(dir, "truncated.jpg"), 200, 150, 20)
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, dir), counts{Added: 1, Unchanged: 2, Failed: 2, Faces: 1})
	st, _ = l.Status(context.Background())
	for _, e := range st.Failed {
		if filepath.Base(e.Path) == "truncated.jpg" {
			t.Errorf("the repaired file is still listed as failed: %+v", e)
		}
	}
	if len(st.Failed) != 4 {
		t.Errorf("failed %+v", st.Failed)
	}
	// Deleted files drop out of the failed list at the next run of their
	// folder, and not before.
	for _, name := range []string{"notes.jpg", "phone.heic"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, t.TempDir()), counts{})
	if st, _ = l.Status(context.Background()); len(st.Failed) != 4 {
		t.Errorf("a run of another folder changed the failed list: %+v", st.Failed)
	}
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, dir), counts{Unchanged: 3, Failed: 1})
	st, _ = l.Status(context.Background())
	var left []string
	for _, e := range st.Failed {
		left = append(left, filepath.Base(e.Path))
	}
	if !slices.Equal(left, []string{"empty.png", "link.jpg"}) {
		t.Errorf("failed after deleting two: %v", left)
	}
}

func TestIndexMissingAndForget(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jpg"), filepath.Join(dir, "b.jpg")
	writePhoto(t, a, 200, 150, 10)
	writePhoto(t, b, 210, 150, 20)
	fakeIndex(t, l, IndexOptions{}, dir)
	fb, _ := l.Faces(FaceFilter{Photo: b})
	if _, err := l.NameFaces([]int64{fb[0].ID}, "Bo"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCover("Bo", fb[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := l.RejectFace(fb[1].ID, "Bo"); err != nil {
		t.Fatal(err)
	}
	saved, _ := os.ReadFile(b)
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	// Gone: marked missing, nothing deleted.
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, dir), counts{Unchanged: 1, Missing: 1, NewlyMissing: 1})
	st, _ := l.Status(context.Background())
	if st.Missing != 1 || !slices.Equal(st.MissingPaths, []string{b}) || st.Faces != 3 || st.NamedByUser != 1 {
		t.Errorf("status %+v", st)
	}
	// Back: present again, as it was.
	if err := os.WriteFile(b, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, dir), counts{Unchanged: 2, Returned: 1})
	if f, _ := l.Face(fb[0].ID); f.Person != "Bo" {
		t.Errorf("Bo's face after returning: %+v", f)
	}
	// A photo missing but not under the roots scanned is found missing
	// too, and found again when back.
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	writePhoto(t, filepath.Join(other, "c.jpg"), 200, 150, 30)
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, other), counts{Added: 1, Faces: 1, Missing: 1, NewlyMissing: 1})
	// Forgetting deletes the photo with its faces, their names, rejections
	// and the cover; the person stays.
	photos, faces, err := l.ForgetMissing(context.Background())
	if err != nil || photos != 1 || faces != 2 {
		t.Fatalf("forgot %d photos, %d faces: %v", photos, faces, err)
	}
	if _, err := l.Face(fb[0].ID); !errors.Is(err, ErrUnknownFace) {
		t.Errorf("a forgotten face: %v", err)
	}
	bo, err := l.PersonByName("Bo")
	if err != nil || bo.Faces != 0 {
		t.Errorf("Bo after forgetting: %+v, %v", bo, err)
	}
	rej, _ := l.Rejections()
	if len(rej) != 0 {
		t.Errorf("rejections left: %v", rej)
	}
	var cover any
	if err := l.db.QueryRow(`SELECT cover_face FROM people WHERE id = ?`, bo.ID).Scan(&cover); err != nil || cover != nil {
		t.Errorf("cover %v, %v", cover, err)
	}
	st, _ = l.Status(context.Background())
	if st.Photos != 2 || st.Missing != 0 || st.People != 1 {
		t.Errorf("status %+v", st)
	}
}

func TestIndexEditedPhotoKeepsDecisions(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	a := filepath.Join(dir, "a.jpg")
	writePhoto(t, a, 210, 150, 10)
	fakeIndex(t, l, IndexOptions{}, dir)
	fs, _ := l.Faces(FaceFilter{Photo: a})
	if len(fs) != 2 {
		t.Fatalf("faces %+v", fs)
	}
	named, other := fs[0], fs[1]
	if _, err := l.NameFaces([]int64{named.ID}, "Cy"); err != nil {
		t.Fatal(err)
	}
	// The photo is edited: new bytes, one face where Cy's was (shifted),
	// the other gone.
	writePhoto(t, a, 200, 150, 90)
	rep := fakeIndex(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Updated: 1, Faces: 1})
	fs, _ = l.Faces(FaceFilter{Photo: a, Descriptors: true})
	if len(fs) != 1 || fs[0].ID != named.ID || fs[0].Person != "Cy" || fs[0].Box.X != 50 {
		t.Fatalf("after the edit: %+v (Cy's face was %d)", fs, named.ID)
	}
	if _, err := l.Face(other.ID); !errors.Is(err, ErrUnknownFace) {
		t.Errorf("the undecided face of the old content: %v", err)
	}
	p, _ := l.PhotoByPath(a)
	if p.Width != 200 {
		t.Errorf("photo %+v", p)
	}
	// The descriptor is the new content's (shade 90, not 10).
	if d := fs[0].Descriptor[0]; d < 0.3 {
		t.Errorf("descriptor[0] = %v: still the old content's", d)
	}
}

func TestIndexCancelled(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	for i := 0; i < 6; i++ {
		writePhoto(t, filepath.Join(dir, string(rune('a'+i))+".jpg"), 200, 150, uint8(40*i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opt := IndexOptions{Workers: 1, run: fakeRun, Progress: func(p IndexProgress) {
		if p.Done == 2 {
			cancel()
		}
	}}
	rep, err := l.Index(ctx, []string{dir}, opt)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if rep.Added != 2 {
		t.Errorf("added %d before the cancellation, want 2", rep.Added)
	}
	if n := len(photoPaths(t, l)); n != 2 {
		t.Errorf("%d photos committed, want 2", n)
	}
	// No photo is marked missing by a cancelled run; the next run does
	// the rest.
	wantCounts(t, fakeIndex(t, l, IndexOptions{}, dir), counts{Added: 4, Unchanged: 2, Faces: 4})
}

func TestIndexOptionsValidate(t *testing.T) {
	l := indexTestLibrary(t)
	for _, opt := range []IndexOptions{{}, {run: fakeRun, Workers: -1}, {run: fakeRun, Limits: imaging.Limits{MaxPixels: -1, MaxBytes: 1}}} {
		if _, err := l.Index(context.Background(), []string{t.TempDir()}, opt); err == nil {
			t.Errorf("options %+v accepted", opt)
		}
	}
}

// lfwDir is LFW's deep-funnelled images in the shared data folder (the
// test fails, as every test of the project does, when it is missing).
func lfwDir(t testing.TB) string { return datadir.ForTest(t, "lfw", "images_deepfunneled") }

// copyLFW copies LFW images (Name_000N) into dir and returns their paths.
func copyLFW(t testing.TB, dir string, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		person := n[:strings.LastIndex(n, "_")]
		data, err := os.ReadFile(filepath.Join(lfwDir(t), person, n+".jpg"))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, n+".jpg")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestIndexRealPipeline indexes LFW photos with the real face pipeline:
// every stored face has a box inside the photo, 68 landmarks near it, a
// detector score, a finite landmark fit, a 128-d descriptor and a JPEG
// thumbnail, all sealed; the two photos of one person are nearer each
// other than either is to the other person's.
func TestIndexRealPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the face networks")
	}
	dir := t.TempDir()
	paths := copyLFW(t, dir, "Aaron_Peirsol_0001", "Aaron_Peirsol_0002", "Abdullah_Gul_0001")
	p, err := face.NewPipeline(PipelineOptions(""))
	if err != nil {
		t.Fatal(err)
	}
	l := indexTestLibrary(t)
	rep, err := l.Index(context.Background(), []string{dir}, IndexOptions{Pipeline: p})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Added != 3 || rep.Faces < 3 || len(rep.Errors) != 0 {
		t.Fatalf("report %+v", rep)
	}
	central := map[string][]float32{}
	for _, path := range paths {
		ph, err := l.PhotoByPath(path)
		if err != nil || ph.Width != 250 || ph.Height != 250 {
			t.Fatalf("photo %+v, %v", ph, err)
		}
		fs, err := l.Faces(FaceFilter{Photo: path, Descriptors: true})
		if err != nil || len(fs) == 0 {
			t.Fatalf("faces of %s: %v, %v", path, fs, err)
		}
		best := math.Inf(1)
		for _, f := range fs {
			b := f.Box
			if b.Width <= 0 || b.X+b.Width < 0 || b.X > 250 || f.Score <= 0 || f.Score > 1 || math.IsInf(f.Fit, 0) || len(f.Descriptor) != 128 {
				t.Errorf("%s: face %+v", filepath.Base(path), f)
			}
			var lmSealed, thumbSealed []byte
			if err := l.db.QueryRow(`SELECT landmarks, thumbnail FROM faces WHERE id = ?`, f.ID).Scan(&lmSealed, &thumbSealed); err != nil {
				t.Fatal(err)
			}
			plain, err := l.Unseal("faces", "landmarks", f.ID, lmSealed)
			if err != nil {
				t.Fatal(err)
			}
			lm, err := DecodeLandmarks(plain)
			if err != nil {
				t.Fatal(err)
			}
			for _, pt := range lm {
				if pt[0] < b.X-b.Width/2 || pt[0] > b.X+1.5*b.Width || pt[1] < b.Y-b.Height/2 || pt[1] > b.Y+1.5*b.Height {
					t.Errorf("%s: landmark %v far from box %+v", filepath.Base(path), pt, b)
					break
				}
			}
			thumb, err := l.Unseal("faces", "thumbnail", f.ID, thumbSealed)
			if err != nil {
				t.Fatal(err)
			}
			if m, err := jpeg.Decode(bytes.NewReader(thumb)); err != nil || max(m.Bounds().Dx(), m.Bounds().Dy()) != ThumbSize {
				t.Errorf("thumbnail: %v", err)
			}
			cx, cy := b.Center()
			if d := math.Hypot(cx-125, cy-125); d < best {
				best, central[filepath.Base(path)] = d, f.Descriptor
			}
		}
	}
	same := euclid(central["Aaron_Peirsol_0001.jpg"], central["Aaron_Peirsol_0002.jpg"])
	diff := euclid(central["Aaron_Peirsol_0001.jpg"], central["Abdullah_Gul_0001.jpg"])
	if !(same < 0.6 && diff > same) {
		t.Errorf("same person %.3f, different %.3f", same, diff)
	}
}

func euclid(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i] - b[i])
		s += d * d
	}
	return math.Sqrt(s)
}

func TestParseBox(t *testing.T) {
	tests := []struct {
		in   string
		want Box
		ok   bool
	}{
		{"10,20,30,40", Box{X: 10, Y: 20, Width: 30, Height: 40}, true},
		{" 1.5, -2 ,3e1,4 ", Box{X: 1.5, Y: -2, Width: 30, Height: 4}, true},
		{"10,20,30", Box{}, false},
		{"10,20,30,40,50", Box{}, false},
		{"", Box{}, false},
		{"a,b,c,d", Box{}, false},
		{"10,20,0,40", Box{}, false},
		{"10,20,30,-1", Box{}, false},
		{"NaN,20,30,40", Box{}, false},
		{"10,Inf,30,40", Box{}, false},
		{"10,20,1e400,40", Box{}, false},
		{"10;20;30;40", Box{}, false},
	}
	for _, tc := range tests {
		got, err := ParseBox(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBox(%q) = %+v, %v; want %+v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBox) {
			t.Errorf("ParseBox(%q): %v does not wrap ErrBox", tc.in, err)
		}
	}
}

// FuzzParseBox: any accepted box is finite with a positive size.
func FuzzParseBox(f *testing.F) {
	for _, s := range []string{"10,20,30,40", "1.5,-2,3e1,4", "NaN,1,1,1", ",,,", "0x10,1,1,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBox(s)
		if err != nil {
			if !errors.Is(err, ErrBox) {
				t.Fatalf("%v does not wrap ErrBox", err)
			}
			return
		}
		for _, v := range []float64{b.X, b.Y, b.Width, b.Height} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("accepted %+v", b)
			}
		}
		if b.Width <= 0 || b.Height <= 0 {
			t.Fatalf("accepted %+v", b)
		}
	})
}

func TestAddManualFace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the face networks")
	}
	dir := t.TempDir()
	paths := copyLFW(t, dir, "Aaron_Peirsol_0001")
	photo := paths[0]
	p, err := face.NewPipeline(PipelineOptions(""))
	if err != nil {
		t.Fatal(err)
	}
	l := indexTestLibrary(t)
	if _, err := l.Index(context.Background(), []string{dir}, IndexOptions{Pipeline: p}); err != nil {
		t.Fatal(err)
	}
	detected, err := l.Faces(FaceFilter{Photo: photo, Descriptors: true})
	if err != nil || len(detected) == 0 {
		t.Fatalf("faces %v, %v", detected, err)
	}
	det := detected[0]
	ctx := context.Background()

	// Bad inputs change nothing.
	outsider := filepath.Join(dir, "not-added.jpg")
	writePhoto(t, outsider, 200, 150, 1)
	bad := []struct {
		name   string
		path   string
		box    Box
		person string
		want   error
	}{
		{"same place as a face", photo, det.Box, "", ErrDuplicateFace},
		{"outside the photo", photo, Box{X: 240, Y: 240, Width: 60, Height: 60}, "", ErrBox},
		{"wholly outside", photo, Box{X: -500, Y: 10, Width: 60, Height: 60}, "", ErrBox},
		{"too small", photo, Box{X: 10, Y: 10, Width: 5, Height: 60}, "", ErrBox},
		{"not a number", photo, Box{X: math.NaN(), Y: 10, Width: 60, Height: 60}, "", ErrBox},
		{"photo not in the library", outsider, Box{X: 10, Y: 10, Width: 60, Height: 60}, "", ErrUnknownPhoto},
		{"bad name", photo, Box{X: 0, Y: 0, Width: 60, Height: 60}, "\x00", ErrInvalidName},
	}
	for _, tc := range bad {
		if _, err := l.AddManualFace(ctx, p, tc.path, tc.box, tc.person); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if fs, _ := l.Faces(FaceFilter{Removed: true}); len(fs) != len(detected) {
		t.Fatalf("a refused face was stored: %d faces", len(fs))
	}

	// A face in a corner, named: landmarks and descriptor computed there.
	corner, err := l.AddManualFace(ctx, p, photo, Box{X: 0, Y: 0, Width: 60, Height: 60}, "Dee")
	if err != nil {
		t.Fatal(err)
	}
	if corner.Source != Manual || corner.Score != 0 || corner.Person != "Dee" || corner.AssignedBy != ByUser || math.IsInf(corner.Fit, 0) {
		t.Errorf("manual face %+v", corner)
	}
	// Drawn on the detector's box (after removing the detected face), the
	// hand-drawn face gets the detected face's landmarks and descriptor:
	// both are computed from the box alone.
	if err := l.RemoveFace(det.ID); err != nil {
		t.Fatal(err)
	}
	again, err := l.AddManualFace(ctx, p, photo, det.Box, "")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := l.Faces(FaceFilter{IDs: []int64{again.ID}, Descriptors: true})
	if d := euclid(got[0].Descriptor, det.Descriptor); d > 1e-4 {
		t.Errorf("descriptor of the same box differs by %g", d)
	}
	if d := euclid(got[0].Descriptor, mustFace(t, l, corner.ID).Descriptor); d < 0.3 {
		t.Errorf("the corner's descriptor is %g from the face's: not computed in its box", d)
	}
	// A changed file is refused.
	writePhoto(t, photo, 250, 250, 3)
	if _, err := l.AddManualFace(ctx, p, photo, Box{X: 100, Y: 0, Width: 60, Height: 60}, ""); err == nil || !strings.Contains(err.Error(), "changed since") {
		t.Errorf("changed file: %v", err)
	}
}

func mustFace(t *testing.T, l *Library, id int64) Face {
	t.Helper()
	fs, err := l.Faces(FaceFilter{IDs: []int64{id}, Descriptors: true})
	if err != nil || len(fs) != 1 {
		t.Fatalf("face %d: %v, %v", id, fs, err)
	}
	return fs[0]
}

// indexLFWPhotos is how many photos BenchmarkIndexLFW and
// BenchmarkPipelineLFW use.
var indexLFWPhotos = flag.Int("index-lfw-photos", 200, "photos BenchmarkIndexLFW and BenchmarkPipelineLFW use (the first of each of LFW's first N people)")

// lfwFirstPhotos returns the names (Name_0001) of the first photo of each
// of LFW's first -index-lfw-photos people, in folder order.
func lfwFirstPhotos(b *testing.B) []string {
	b.Helper()
	people, err := os.ReadDir(lfwDir(b))
	if err != nil {
		b.Fatal(err)
	}
	n := *indexLFWPhotos
	if n < 1 || n > len(people) {
		b.Fatalf("-index-lfw-photos %d: want 1 to %d", n, len(people))
	}
	var names []string
	for _, p := range people[:n] {
		names = append(names, p.Name()+"_0001")
	}
	return names
}

// BenchmarkIndexLFW measures indexing throughput on every core: the first
// photo of each of LFW's first 200 people (folder order; -index-lfw-photos
// N for fewer, e.g. to profile), indexed into a fresh library per
// iteration (MeasureIndexing). Run with
//
//	go test ./tagging -run '^$' -bench IndexLFW -benchtime 1x
func BenchmarkIndexLFW(b *testing.B) {
	names := lfwFirstPhotos(b)
	n := len(names)
	dir := b.TempDir()
	copyLFW(b, dir, names...)
	p, err := face.NewPipeline(PipelineOptions(""))
	if err != nil {
		b.Fatal(err)
	}
	var last *Throughput
	b.ResetTimer()
	for b.Loop() {
		if last, err = MeasureIndexing(context.Background(), []string{dir}, IndexOptions{Pipeline: p}); err != nil {
			b.Fatal(err)
		}
		if last.Photos != n {
			b.Fatalf("indexed %d of %d photos", last.Photos, n)
		}
	}
	b.ReportMetric(last.PhotosPerSecond, "photos/s")
	b.ReportMetric(last.CPUSPerPhoto, "cpu-s/photo")
	b.ReportMetric(float64(last.Faces)/float64(last.Photos), "faces/photo")
}

// BenchmarkPipelineLFW measures what BenchmarkIndexLFW's photos cost in
// the face pipeline alone, one photo at a time, split by stage: decoding,
// each detector of PipelineOptions (SSD, then the tiny detector, at the
// floors of the pipeline's rule, combined as Detect combines them), and
// completing the faces (68 landmarks, both alignments, two descriptor
// passes per face). The processor time per photo of each stage is
// reported; BenchmarkIndexLFW's cpu-s/photo minus this total is what
// indexing adds (hashing, EXIF, thumbnails, sealing, SQLite). Run with
//
//	go test ./tagging -run '^$' -bench PipelineLFW -benchtime 1x -index-lfw-photos 30
func BenchmarkPipelineLFW(b *testing.B) {
	names := lfwFirstPhotos(b)
	var data [][]byte
	for _, n := range names {
		person := n[:strings.LastIndexByte(n, '_')]
		d, err := os.ReadFile(filepath.Join(lfwDir(b), person, n+".jpg"))
		if err != nil {
			b.Fatal(err)
		}
		data = append(data, d)
	}
	p, err := face.NewPipeline(PipelineOptions(""))
	if err != nil {
		b.Fatal(err)
	}
	rule := p.Options().Rule
	floorSSD, floorTiny := min(rule.SSD, rule.PairSSD), min(rule.Tiny, rule.PairTiny)
	var decode, ssd, tiny, complete time.Duration
	faces := 0
	b.ResetTimer()
	for b.Loop() {
		decode, ssd, tiny, complete, faces = 0, 0, 0, 0, 0
		for _, d := range data {
			c0 := processCPU()
			img, _, err := imaging.Decode(d, imaging.DefaultLimits())
			if err != nil {
				b.Fatal(err)
			}
			c1 := processCPU()
			s, err := p.Detections(img, face.SSD, floorSSD)
			if err != nil {
				b.Fatal(err)
			}
			c2 := processCPU()
			t, err := p.Detections(img, face.Tiny, floorTiny)
			if err != nil {
				b.Fatal(err)
			}
			c3 := processCPU()
			fs := rule.Combine(s, t)
			if _, err := p.Complete(img, fs); err != nil {
				b.Fatal(err)
			}
			c4 := processCPU()
			decode, ssd, tiny, complete = decode+c1-c0, ssd+c2-c1, tiny+c3-c2, complete+c4-c3
			faces += len(fs)
		}
	}
	per := func(d time.Duration) float64 { return d.Seconds() / float64(len(data)) }
	b.ReportMetric(per(decode), "decode-cpu-s/photo")
	b.ReportMetric(per(ssd), "ssd-cpu-s/photo")
	b.ReportMetric(per(tiny), "tiny-cpu-s/photo")
	b.ReportMetric(per(complete), "complete-cpu-s/photo")
	b.ReportMetric(per(decode+ssd+tiny+complete), "cpu-s/photo")
	b.ReportMetric(float64(faces)/float64(len(data)), "faces/photo")
}

func TestMeasureIndexing(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 5; i++ {
		writePhoto(t, filepath.Join(dir, string(rune('a'+i))+".jpg"), 210, 150, uint8(50*i))
	}
	writeTree(t, dir, map[string]string{"bad.jpg": "x"})
	th, err := MeasureIndexing(context.Background(), []string{dir}, IndexOptions{Workers: 2, run: fakeRun})
	if err != nil {
		t.Fatal(err)
	}
	if th.Photos != 5 || th.Faces != 10 || th.Failed != 1 || th.Workers != 2 || th.WallS <= 0 || math.Abs(th.PhotosPerSecond-5/th.WallS) > 1e-9 ||
		th.CPUS <= 0 || math.Abs(th.CPUSPerPhoto-th.CPUS/5) > 1e-9 {
		t.Errorf("throughput %+v", th)
	}
}

// readCounter counts the files indexing reads, by path.
type readCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *readCounter) read(path string, maxBytes int64) (*Content, error) {
	c.mu.Lock()
	c.n[path]++
	c.mu.Unlock()
	return ReadContent(path, maxBytes)
}

// index runs Index counting reads, and returns the report and the reads.
func (c *readCounter) index(t *testing.T, l *Library, opt IndexOptions, dir string) (*IndexReport, map[string]int) {
	t.Helper()
	c.n = map[string]int{}
	opt.read = c.read
	return fakeIndex(t, l, opt, dir), c.n
}

// setMtime sets a file's modification time.
func setMtime(t *testing.T, path string, mt time.Time) {
	t.Helper()
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

func mtimeOf(t *testing.T, path string) time.Time {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

// TestIndexSkipsUnchangedFiles: a file whose size, modification time and
// inode are as recorded is not read again; any change of them (a new
// mtime with the same bytes or new bytes of the same size, a new size
// with the old mtime put back, a file replaced by a rename keeping size
// and mtime) makes indexing read and hash it, and a file modified just
// before it was read is read again next time (its mtime may not yet show a
// later write).
func TestIndexSkipsUnchangedFiles(t *testing.T) {
	l := indexTestLibrary(t)
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a.jpg"), filepath.Join(dir, "b.jpg"), filepath.Join(dir, "c.jpg")
	writePhoto(t, a, 200, 150, 10)
	writePhoto(t, b, 200, 150, 100)
	writePhoto(t, c, 210, 150, 200)
	hour := time.Now().Add(-time.Hour).Truncate(time.Second)
	setMtime(t, a, hour)
	setMtime(t, b, hour.Add(-time.Minute))
	setMtime(t, c, hour.Add(-2*time.Minute))
	var rc readCounter
	rep, reads := rc.index(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Added: 3, Faces: 4})
	if len(reads) != 3 {
		t.Fatalf("first run read %v", reads)
	}

	rep, reads = rc.index(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Unchanged: 3})
	if len(reads) != 0 {
		t.Errorf("a run over unchanged files read %v, want none", reads)
	}

	// A new mtime, same bytes: read once, unchanged, then skipped again.
	setMtime(t, a, hour.Add(time.Minute))
	rep, reads = rc.index(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Unchanged: 3})
	if !maps.Equal(reads, map[string]int{a: 1}) {
		t.Errorf("after touching a: read %v, want a once", reads)
	}
	if _, reads = rc.index(t, l, IndexOptions{}, dir); len(reads) != 0 {
		t.Errorf("the run after: read %v, want none", reads)
	}

	// New bytes of the same size (a quantisation value changed) and a new
	// mtime: read and re-analysed.
	data, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	dqt := bytes.Index(data, []byte{0xFF, 0xDB})
	if dqt < 0 {
		t.Fatal("no quantisation table in the test JPEG")
	}
	data[dqt+10]++
	if err := os.WriteFile(b, data, 0o644); err != nil {
		t.Fatal(err)
	}
	setMtime(t, b, hour.Add(2*time.Minute))
	rep, reads = rc.index(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Unchanged: 2, Updated: 1, Faces: 1})
	if reads[b] == 0 || reads[a]+reads[c] != 0 {
		t.Errorf("after rewriting b: read %v, want b only", reads)
	}

	// A new size with the recorded mtime put back: read.
	old := mtimeOf(t, c)
	f, err := os.OpenFile(c, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("trailing bytes after the image")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	setMtime(t, c, old)
	rep, reads = rc.index(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Unchanged: 2, Updated: 1, Faces: 2})
	if reads[c] == 0 {
		t.Errorf("c grew with its mtime put back but was not read: %v", reads)
	}

	// Replaced by a rename (an editor's atomic save): same bytes, size and
	// mtime, another inode. Read where the system has inode numbers.
	fi, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "a.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	setMtime(t, tmp, fi.ModTime())
	if err := os.Rename(tmp, a); err != nil {
		t.Fatal(err)
	}
	rep, reads = rc.index(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Unchanged: 3})
	if inodeOf(fi) != 0 && reads[a] != 1 {
		t.Errorf("a replaced by a rename was not read: %v", reads)
	}

	// A file written just now gets no stamp: read again next run, until
	// it is older than racyWindow when read.
	d := filepath.Join(dir, "d.jpg")
	writePhoto(t, d, 200, 150, 50)
	rep, _ = rc.index(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Added: 1, Unchanged: 3, Faces: 1})
	if _, reads = rc.index(t, l, IndexOptions{}, dir); !maps.Equal(reads, map[string]int{d: 1}) {
		t.Errorf("the run after adding a fresh file read %v, want d once", reads)
	}
	setMtime(t, d, hour)
	rc.index(t, l, IndexOptions{}, dir)
	if _, reads = rc.index(t, l, IndexOptions{}, dir); len(reads) != 0 {
		t.Errorf("once d is old: read %v, want none", reads)
	}

	// A moved file is read at its new path once (its bytes say which photo
	// it is); the move records its stamp, so the next run reads nothing.
	e := filepath.Join(dir, "e.jpg")
	if err := os.Rename(d, e); err != nil {
		t.Fatal(err)
	}
	rep, reads = rc.index(t, l, IndexOptions{}, dir)
	wantCounts(t, rep, counts{Moved: 1, Unchanged: 3})
	if !maps.Equal(reads, map[string]int{e: 1}) {
		t.Errorf("after moving d to e: read %v, want e once", reads)
	}
	if _, reads = rc.index(t, l, IndexOptions{}, dir); len(reads) != 0 {
		t.Errorf("the run after the move: read %v, want none", reads)
	}

	// Rehash reads everything.
	rep, reads = rc.index(t, l, IndexOptions{Rehash: true}, dir)
	wantCounts(t, rep, counts{Unchanged: 4})
	if len(reads) != 4 {
		t.Errorf("Rehash read %v, want all four", reads)
	}
}

// TestStampOfRacy: a file modified within racyWindow of being read, or in
// the future, gets no stamp; an older one does.
func TestStampOfRacy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		age   time.Duration
		known bool
	}{
		{-time.Hour, false},
		{0, false},
		{racyWindow - time.Millisecond, false},
		{racyWindow, true},
		{24 * time.Hour, true},
	} {
		setMtime(t, path, now.Add(-tc.age))
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := stampOf(fi, now).known(); got != tc.known {
			t.Errorf("modified %v before reading: stamp known %v, want %v", tc.age, got, tc.known)
		}
	}
}

// BenchmarkReindexUnchanged measures a run of Index over 50 photos of 4 MiB
// each (a camera's JPEG size: a small JPEG padded after its end), all
// recorded and unchanged: quick-check skips them unread, rehash reads and
// hashes every one (as every run did before the quick check).
func BenchmarkReindexUnchanged(b *testing.B) {
	l, err := Create(b.TempDir(), []byte("bench"), CreateOptions{KDF: KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	dir := b.TempDir()
	pad := make([]byte, 4<<20)
	old := time.Now().Add(-time.Hour)
	for i := range 50 {
		m := image.NewRGBA(image.Rect(0, 0, 200, 150))
		for k := range m.Pix {
			m.Pix[k] = uint8(i + k)
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, m, nil); err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, fmt.Sprintf("p%02d.jpg", i))
		if err := os.WriteFile(path, append(buf.Bytes(), pad...), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			b.Fatal(err)
		}
	}
	opt := IndexOptions{run: fakeRun}
	if _, err := l.Index(context.Background(), []string{dir}, opt); err != nil {
		b.Fatal(err)
	}
	for _, rehash := range []bool{false, true} {
		name := "quick-check"
		if rehash {
			name = "rehash"
		}
		b.Run(name, func(b *testing.B) {
			opt.Rehash = rehash
			for b.Loop() {
				rep, err := l.Index(context.Background(), []string{dir}, opt)
				if err != nil || rep.Unchanged != 50 {
					b.Fatalf("%+v, %v", rep, err)
				}
			}
		})
	}
}
