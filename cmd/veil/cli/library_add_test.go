package cli

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

// writeWall writes a 200×150 JPEG of a smooth gradient: a photo without a
// face.
func writeWall(t *testing.T, dir, name string) string {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, 200, 150))
	for y := range 150 {
		for x := range 200 {
			m.Set(x, y, color.RGBA{uint8(60 + x/2), uint8(90 + y/3), 140, 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, name, b.Bytes())
}

// copyLFWPhotos copies LFW deep-funnelled images (Name_000N) into dir.
func copyLFWPhotos(t *testing.T, dir string, names ...string) {
	t.Helper()
	src := datadir.ForTest(t, "lfw", "images_deepfunneled")
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(src, n[:strings.LastIndex(n, "_")], n+".jpg"))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, n+".jpg", b)
	}
}

// decodeObject decodes a JSON object generically, so the test sees exactly
// the fields the output has.
func decodeObject(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return m
}

// TestLibraryAddStatusAndFacesAdd drives the indexing commands as a user
// would: add a folder with two photos and a broken file, add it again,
// read the status (which lists the photo without a face), then draw a face
// by hand (the photo leaves that list) and get the bad boxes refused.
func TestLibraryAddStatusAndFacesAdd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the face networks")
	}
	lib := initTestLibrary(t)
	photos := t.TempDir()
	copyLFWPhotos(t, photos, "Aaron_Peirsol_0001", "Abdullah_Gul_0001")
	broken := writeFile(t, photos, "broken.jpg", []byte("not a photo"))
	wall := writeWall(t, photos, "wall.jpg")

	out := veilOK(t, "library", "add", "--library", lib, "--json", "--quiet", photos)
	doc := decodeObject(t, out)
	for _, k := range []string{"photos_added", "photos_skipped", "photos_failed", "faces", "errors", "wall_s"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("library add --json lacks %q: %s", k, out)
		}
	}
	if doc["photos_added"] != 3.0 || doc["photos_skipped"] != 0.0 || doc["photos_failed"] != 1.0 || doc["faces"].(float64) < 2 {
		t.Errorf("first add: %s", out)
	}
	errs, _ := doc["errors"].([]any)
	if len(errs) != 1 {
		t.Fatalf("errors %v", doc["errors"])
	}
	e0 := errs[0].(map[string]any)
	if e0["path"] != broken || !strings.Contains(e0["error"].(string), "not a JPEG or PNG") || len(e0) != 2 {
		t.Errorf("error entry %v", e0)
	}
	// Again: nothing new.
	doc = decodeObject(t, veilOK(t, "library", "add", "--library", lib, "--json", "--quiet", photos))
	if doc["photos_added"] != 0.0 || doc["photos_skipped"] != 3.0 || doc["photos_failed"] != 1.0 || doc["faces"] != 0.0 {
		t.Errorf("second add: %v", doc)
	}

	st := decodeObject(t, veilOK(t, "library", "status", "--library", lib, "--json"))
	if st["photos"] != 3.0 || st["schema_version"].(float64) < 1 || st["missing"] != 0.0 || st["people"] != 0.0 {
		t.Errorf("status %v", st)
	}
	if noFace, _ := st["no_face_paths"].([]any); len(noFace) != 1 || noFace[0] != wall {
		t.Errorf("status no_face_paths %v, want [%s]", st["no_face_paths"], wall)
	}
	if failed, _ := st["failed"].([]any); len(failed) != 1 || failed[0].(map[string]any)["path"] != broken {
		t.Errorf("status failed %v", st["failed"])
	}
	text := veilOK(t, "library", "status", "--library", lib)
	if !strings.Contains(text, "photos  3 (missing 0)") || !strings.Contains(text, broken) ||
		!strings.Contains(text, "photos without a face (1; veil faces add") || !strings.Contains(text, "  "+wall+"\n") {
		t.Errorf("status text:\n%s", text)
	}

	gul := filepath.Join(photos, "Abdullah_Gul_0001.jpg")
	mustFail(t, "bad face box", "faces", "add", "--library", lib, gul, "--box", "10,10,60")
	mustFail(t, "bad face box", "faces", "add", "--library", lib, gul, "--box", "10,10,-60,60")
	mustFail(t, "lies outside the 250x250 photo", "faces", "add", "--library", lib, gul, "--box", "240,240,60,60")
	mustFail(t, "--box", "faces", "add", "--library", lib, gul)
	mustFail(t, "no such photo in the library", "faces", "add", "--library", lib, broken, "--box", "0,0,60,60")
	existing := listFaces(t, lib, "--photo", gul)
	if len(existing) == 0 {
		t.Fatal("no face found in Abdullah_Gul_0001")
	}
	b := existing[0]["box"].(map[string]any)
	mustFail(t, "already has a face there", "faces", "add", "--library", lib, gul, "--box",
		strings.Join([]string{fmtNum(b["x"]), fmtNum(b["y"]), fmtNum(b["width"]), fmtNum(b["height"])}, ","))

	added := decodeObject(t, veilOK(t, "faces", "add", "--library", lib, gul, "--box", "0,0,60,60", "--person", "Someone", "--json"))
	if added["source"] != "manual" || added["person"] != "Someone" || added["photo"] != gul || added["score"] != 0.0 {
		t.Errorf("faces add: %v", added)
	}
	var manual []string
	for _, f := range listFaces(t, lib, "--person", "Someone") {
		manual = append(manual, f["source"].(string))
	}
	if !slices.Equal(manual, []string{"manual"}) {
		t.Errorf("Someone's faces: %v", manual)
	}
	st = decodeObject(t, veilOK(t, "library", "status", "--library", lib, "--json"))
	if st["manual_faces"] != 1.0 || st["named_by_user"] != 1.0 || st["people"] != 1.0 {
		t.Errorf("status after faces add: %v", st)
	}
	veilOK(t, "faces", "add", "--library", lib, wall, "--box", "50,40,60,60")
	st = decodeObject(t, veilOK(t, "library", "status", "--library", lib, "--json"))
	if noFace, ok := st["no_face_paths"].([]any); !ok || len(noFace) != 0 {
		t.Errorf("no_face_paths after drawing a face in %s: %v", wall, st["no_face_paths"])
	}
}

func fmtNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestLibraryAddBadInputs(t *testing.T) {
	lib := initTestLibrary(t)
	mustFail(t, "cannot read", "library", "add", "--library", lib, filepath.Join(t.TempDir(), "nope"))
	mustFail(t, "veil library add takes PATH... (got 0 arguments)", "library", "add", "--library", lib)
	mustFail(t, "--workers", "library", "add", "--library", lib, "--workers", "-1", t.TempDir())
	mustFail(t, "no library", "library", "status")
	t.Setenv(envPassphrase, "wrong")
	mustExit(t, exitWrongPassphrase, "wrong passphrase", "library", "status", "--library", lib)
}
