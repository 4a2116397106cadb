package serve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/serve/browser"
	"github.com/veil-privacy/veil/tagging"
)

// EnvScreenshots names the folder the end-to-end test saves its screenshots
// in (default: out/e2e of the checkout).
const EnvScreenshots = "VEIL_SCREENSHOTS"

func screenshotDir(t *testing.T) string {
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		root, ok := datadir.RepoRoot()
		if !ok {
			t.Fatal("cannot find the checkout for out/e2e: set " + EnvScreenshots)
		}
		dir = filepath.Join(root, "out", "e2e")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// eventually polls cond until it holds or 20 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBrowser drives the app in real headless Chromium against a server on
// the LFW test library: it names a cluster, accepts and rejects a
// suggestion, merges two people, draws a face, searches with a photo and
// scans a folder, checking the library after each step, and saves a
// screenshot of every page. Without Chromium it fails: the test command
// (scripts/test.sh) installs it.
func TestBrowser(t *testing.T) {
	exe, err := browser.Find()
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := newTestServer(t, nil)
	shots := screenshotDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bctx, stop, err := browser.Start(ctx, browser.Options{Exec: exe})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		// Each step has a minute, so a step that cannot happen fails
		// with its name instead of using up the whole test's time.
		sctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	shot := func(name string) {
		t.Helper()
		if err := browser.Screenshot(bctx, filepath.Join(shots, name+".png")); err != nil {
			t.Fatal(err)
		}
	}
	open := func(path string) {
		t.Helper()
		// A step's click may have started the page's own reload or
		// redirect, which either aborts a navigation begun meanwhile or
		// lands after it: try again until the browser is on path.
		var at string
		for try := 0; try < 5; try++ {
			_, err := browser.Navigate(bctx, s.ts.URL+path)
			if err != nil && !strings.Contains(err.Error(), "ERR_ABORTED") {
				t.Fatal(err)
			}
			if err == nil {
				// Give a late redirect its chance to land before
				// checking where the browser is.
				time.Sleep(100 * time.Millisecond)
				at, err = chromedp.Run(bctx, chromedp.Evaluate[string](`document.readyState === "complete" ? location.pathname + location.search : ""`))
				if err == nil && at == path {
					return
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("opening %s: the browser is on %q", path, at)
	}

	// People.
	open("/")
	if got := text("#people"); !strings.Contains(got, "Albert Costa") || !strings.Contains(got, "A. Campbell") {
		t.Fatalf("people page: %q", got)
	}
	shot("people")

	// Unknown faces: name the largest cluster.
	o, _ := tagging.NewClusterOptions(tagging.DefaultClusterAlgorithm)
	groups, err := s.lib.UpdateClusters(ctx, o, false)
	if err != nil || len(groups) == 0 || len(groups[0].Faces) < 2 {
		t.Fatalf("clusters %v, %v", groups, err)
	}
	open("/unknown")
	do("name completion", chromedp.WaitReady(chromedp.CSS(`#people-names[data-ready="true"]`)))
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#people-names option").length`)); err != nil || n != fixtureNamed+1 {
		t.Fatalf("name completion offers %d names (%v), want %d", n, err, fixtureNamed+1)
	}
	shot("unknown")
	first := fmt.Sprintf(`form.name-cluster[data-cluster="%d"]`, groups[0].ID)
	// Untick the cluster's first face: it must stay unknown.
	left, err := chromedp.Run(bctx, chromedp.Evaluate[int64](`Number(document.querySelector('`+first+`').closest(".cluster").querySelector("input.pick").value)`))
	if err != nil || !slices.Contains(groups[0].Faces, left) {
		t.Fatalf("the cluster's first tick box is face %d (%v), not one of %v", left, err, groups[0].Faces)
	}
	do("naming a cluster", chromedp.Click(chromedp.CSS(fmt.Sprintf(`input.pick[value="%d"]`, left))),
		chromedp.SendKeys(chromedp.CSS(first+` input[name="person"]`), "Cluster Person"),
		chromedp.Click(chromedp.CSS(first+" button")))
	eventually(t, "the cluster's ticked faces named Cluster Person", func() bool {
		p, err := s.lib.PersonByName("Cluster Person")
		return err == nil && p.Faces == len(groups[0].Faces)-1
	})
	if f, err := s.lib.Face(left); err != nil || f.PersonID != 0 {
		t.Fatalf("the unticked face %+v, %v: want it unknown", f, err)
	}

	// A person's suggestions: accept one.
	sugs, err := s.lib.Suggestions(tagging.DefaultSuggestOptions())
	if err != nil || len(sugs) < 2 {
		t.Fatalf("want two suggestions, got %v, %v", sugs, err)
	}
	acc := sugs[0]
	open(fmt.Sprintf("/people/%d", acc.Person))
	do("suggestions", chromedp.WaitReady(chromedp.CSS(`#suggestions[data-ready="true"]`)))
	shot("person")
	do("accepting", chromedp.Click(chromedp.CSS(fmt.Sprintf(`button.accept[data-face="%d"]`, acc.Face))))
	eventually(t, "the accepted face named", func() bool {
		f, err := s.lib.Face(acc.Face)
		return err == nil && f.PersonID == acc.Person
	})
	// Reject another.
	sugs, _ = s.lib.Suggestions(tagging.DefaultSuggestOptions())
	if len(sugs) == 0 {
		t.Fatal("no suggestion left to reject")
	}
	rej := sugs[0]
	open(fmt.Sprintf("/people/%d", rej.Person))
	do("suggestions", chromedp.WaitReady(chromedp.CSS(`#suggestions[data-ready="true"]`)),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button.reject[data-face="%d"]`, rej.Face))))
	eventually(t, "the rejection recorded", func() bool {
		r, err := s.lib.Rejections()
		return err == nil && slices.Contains(r[rej.Face], rej.Person)
	})
	if f, _ := s.lib.Face(rej.Face); f.PersonID != 0 {
		t.Fatalf("the rejected face is %q", f.Person)
	}

	// Merge A. Campbell into Alastair Campbell.
	dup, into := s.person("A. Campbell"), s.person("Alastair Campbell")
	open(fmt.Sprintf("/people/%d", dup.ID))
	do("merging", chromedp.WaitReady(chromedp.CSS(`#merge-into[data-ready="true"]`)),
		chromedp.SetValue(chromedp.CSS("#merge-into"), fmt.Sprint(into.ID)),
		chromedp.Click(chromedp.CSS("#merge-form button")))
	var got tagging.Person
	merged := func() bool {
		_, err := s.lib.PersonByName("A. Campbell")
		p, err2 := s.lib.PersonByName("Alastair Campbell")
		got = p
		return err != nil && err2 == nil && p.Faces == into.Faces+dup.Faces
	}
	deadline := time.Now().Add(20 * time.Second)
	for !merged() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !merged() {
		page, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`location.href + " | " + (document.getElementById("message") || {}).textContent + " | " + document.getElementById("merge-into")?.value`))
		t.Fatalf("after 20 s: A. Campbell (%d faces) not merged into Alastair Campbell (%d faces, now %+v); the page: %s", dup.Faces, into.Faces, got, page)
	}
	// The page then shows the person merged into.
	eventually(t, "the browser on the merged person's page", func() bool {
		at, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.readyState === "complete" ? location.pathname : ""`))
		return err == nil && at == fmt.Sprintf("/people/%d", into.ID)
	})

	// A photo: draw a face in its bottom-left corner and name it.
	ph := s.photoID("Ashanti", 2)
	open(fmt.Sprintf("/photos/%d", ph))
	rect, err := chromedp.Run(bctx, chromedp.Evaluate[[]float64](`(() => { const r = document.getElementById("photo-img").getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`))
	if err != nil || len(rect) != 4 || rect[2] == 0 {
		t.Fatalf("photo's place %v, %v", rect, err)
	}
	at := func(x, y float64) (float64, float64) { return rect[0] + x*rect[2]/250, rect[1] + y*rect[3]/250 }
	x0, y0 := at(4, 182)
	x1, y1 := at(64, 242)
	do("drawing", chromedp.Click(chromedp.CSS("#draw-button")),
		chromedp.MouseEvent(chromedp.MousePressed, x0, y0, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, (x0+x1)/2, (y0+y1)/2, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, x1, y1, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, x1, y1, chromedp.ButtonLeft),
		chromedp.WaitVisible(chromedp.CSS("#face-form")),
		chromedp.SendKeys(chromedp.CSS(`#face-form input[name="person"]`), "Drawn Person"))
	shot("photo-drawing")
	do("naming the drawn face", chromedp.Click(chromedp.CSS(`#face-form button[value="name"]`)))
	// onlyFace waits for the person's one face.
	onlyFace := func(person string) tagging.Face {
		t.Helper()
		var f tagging.Face
		eventually(t, "a face named "+person, func() bool {
			fs, err := s.lib.Faces(tagging.FaceFilter{Person: person})
			if err != nil || len(fs) != 1 {
				return false
			}
			f = fs[0]
			return true
		})
		return f
	}
	drawn := onlyFace("Drawn Person")
	if drawn.Source != tagging.Manual || drawn.PhotoID != ph || drawn.Box.X > 10 || drawn.Box.Y < 175 || drawn.Box.Width < 50 {
		t.Fatalf("drawn face %+v", drawn)
	}
	do("the photo reloaded with the new face", chromedp.WaitReady(chromedp.CSS(`button.box[data-person="Drawn Person"]`)))
	if got := text("#photo"); !strings.Contains(got, "Drawn Person") {
		t.Fatalf("photo page after drawing: %q", got)
	}
	// The same by keyboard only: Draw a face (Enter on the focused button)
	// puts a 63-pixel box in the middle, + twice grows it by 10, the arrow
	// keys take it to the top-right corner, Enter keeps it, and the name
	// is typed and sent with Enter. (The page's script has run once name
	// completion is ready.)
	do("drawing by keyboard", chromedp.WaitReady(chromedp.CSS(`#people-names[data-ready="true"]`)),
		chromedp.Focus(chromedp.CSS("#draw-button")), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#drawn")))
	if id, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.activeElement.id`)); err != nil || id != "drawn" {
		t.Fatalf("after Draw a face the focus is on %q (%v), want the new box", id, err)
	}
	do("moving and sizing the box by keyboard", chromedp.KeyEvent("++"+strings.Repeat(kb.ArrowUp, 40)+strings.Repeat(kb.ArrowRight, 40)),
		chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.CSS("#face-form")),
		chromedp.KeyEvent("Keyboard Person"), chromedp.KeyEvent(kb.Enter))
	typed := onlyFace("Keyboard Person")
	if b := typed.Box; typed.Source != tagging.Manual || typed.PhotoID != ph || b.X != 177 || b.Y != 0 || b.Width != 73 || b.Height != 73 {
		t.Fatalf("face drawn by keyboard %+v, want a manual face at 177,0 73×73", typed)
	}
	do("the photo reloaded with the keyboard's face", chromedp.WaitReady(chromedp.CSS(`button.box[data-person="Keyboard Person"]`)))
	shot("photo")

	// Search with a photo that is not in the library.
	q := filepath.Join(t.TempDir(), "query.jpg")
	if err := os.WriteFile(q, lfwOriginal(t, "Angela_Bassett", 4), 0o600); err != nil {
		t.Fatal(err)
	}
	open("/search")
	do("searching", chromedp.SetUploadFiles(chromedp.CSS("#search-file"), []string{q}),
		chromedp.Click(chromedp.CSS("#search-form button")),
		chromedp.WaitVisible(chromedp.CSS("#search-summary")))
	if got := text("#search-results"); !strings.Contains(got, "Angela Bassett") {
		t.Fatalf("search results: %q", got)
	}
	shot("search")

	// Library: scan a folder with one new photo, followed live.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "new.jpg"), lfwOriginal(t, "Ashanti", 4), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := s.lib.Photos()
	open("/library")
	do("scanning", chromedp.SendKeys(chromedp.CSS("#scan-path"), dir), chromedp.Click(chromedp.CSS("#scan-form button")),
		chromedp.WaitReady(chromedp.CSS(`#scan-text[data-finished="true"]`)))
	if got := text("#scan-text"); !strings.Contains(got, "done") {
		t.Fatalf("scan progress: %q", got)
	}
	after, _ := s.lib.Photos()
	if len(after) != len(before)+1 {
		t.Fatalf("photos %d after the scan, want %d", len(after), len(before)+1)
	}
	shot("library-scan")
	open("/library")
	shot("library")
	open("/privacy")
	shot("privacy")
	open("/")
	shot("people-after")
	t.Logf("screenshots in %s", shots)
}
