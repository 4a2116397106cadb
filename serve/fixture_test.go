package serve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/tagging"
)

// The test library: three LFW photos each of twelve people, indexed with
// the real face pipeline. The first eight people are named on their first
// photo (so their other photos get suggestions); Alastair Campbell's second
// photo is named "A. Campbell" (a duplicate person to merge); the last four
// are unnamed (clusters of unknown faces).
var fixturePeople = []string{
	"Albert_Costa", "Angela_Bassett", "Arminio_Fraga", "Ahmed_Chalabi", "Ai_Sugiyama", "Alan_Greenspan",
	"Angela_Merkel", "Alastair_Campbell", "Antonio_Banderas", "Ashanti", "Benazir_Bhutto", "Allyson_Felix",
}

const (
	fixturePass  = "serve test passphrase"
	fixtureNamed = 8
	fixturePhoto = 3
)

// fixture is built once per test binary and copied for each test.
type fixture struct {
	photos string // the photos' folder
	lib    string // a closed library to copy
	pipe   *face.Pipeline
}

var (
	fixtureOnce sync.Once
	fixtureVal  *fixture
	fixtureErr  error
)

func displayName(dir string) string {
	r := []rune(dir)
	for i, c := range r {
		if c == '_' {
			r[i] = ' '
		}
	}
	return string(r)
}

// getFixture builds (once) the test library.
func getFixture(t testing.TB) *fixture {
	t.Helper()
	lfw := datadir.ForTest(t, "lfw", "images_deepfunneled")
	fixtureOnce.Do(func() { fixtureVal, fixtureErr = buildFixture(lfw) })
	if fixtureErr != nil {
		t.Fatalf("building the test library: %v", fixtureErr)
	}
	return fixtureVal
}

func buildFixture(lfw string) (*fixture, error) {
	root, err := os.MkdirTemp("", "veil-serve-test-")
	if err != nil {
		return nil, err
	}
	f := &fixture{photos: filepath.Join(root, "photos"), lib: filepath.Join(root, "lib")}
	for _, p := range fixturePeople {
		dir := filepath.Join(f.photos, p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		for i := 1; i <= fixturePhoto; i++ {
			name := fmt.Sprintf("%s_%04d.jpg", p, i)
			b, err := os.ReadFile(filepath.Join(lfw, p, name))
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return nil, err
			}
		}
	}
	if f.pipe, err = face.NewPipeline(tagging.PipelineOptions("")); err != nil {
		return nil, err
	}
	l, err := tagging.Create(f.lib, []byte(fixturePass), tagging.CreateOptions{KDF: tagging.KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if _, err := l.Index(context.Background(), []string{f.photos}, tagging.IndexOptions{Pipeline: f.pipe}); err != nil {
		return nil, err
	}
	name := func(person string, n int, as string) error {
		id, err := centralFace(l, filepath.Join(f.photos, person, fmt.Sprintf("%s_%04d.jpg", person, n)))
		if err != nil {
			return err
		}
		_, err = l.NameFaces([]int64{id}, as)
		return err
	}
	for _, p := range fixturePeople[:fixtureNamed] {
		if err := name(p, 1, displayName(p)); err != nil {
			return nil, err
		}
	}
	if err := name("Alastair_Campbell", 2, "A. Campbell"); err != nil {
		return nil, err
	}
	o, err := tagging.NewClusterOptions(tagging.DefaultClusterAlgorithm)
	if err != nil {
		return nil, err
	}
	if _, err := l.UpdateClusters(context.Background(), o, false); err != nil {
		return nil, err
	}
	return f, l.Close()
}

// centralFace returns the id of the photo's face nearest its centre (LFW
// photos are centred on their person).
func centralFace(l *tagging.Library, path string) (int64, error) {
	ph, err := l.PhotoByPath(path)
	if err != nil {
		return 0, err
	}
	fs, err := l.Faces(tagging.FaceFilter{Photo: ph.Path})
	if err != nil {
		return 0, err
	}
	if len(fs) == 0 {
		return 0, fmt.Errorf("%s: no face found", path)
	}
	best, bestD := int64(0), 0.0
	for _, f := range fs {
		dx := f.Box.X + f.Box.Width/2 - float64(ph.Width)/2
		dy := f.Box.Y + f.Box.Height/2 - float64(ph.Height)/2
		if d := dx*dx + dy*dy; best == 0 || d < bestD {
			best, bestD = f.ID, d
		}
	}
	return best, nil
}

// openCopy copies the fixture library into a temporary folder and opens it.
func openCopy(t testing.TB) *tagging.Library {
	t.Helper()
	f := getFixture(t)
	dir := t.TempDir()
	ents, err := os.ReadDir(f.lib)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f.lib, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := tagging.Open(dir, []byte(fixturePass))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// testServer is a Server on a real loopback socket and a browser-like
// client holding a session and its CSRF token.
type testServer struct {
	t    testing.TB
	srv  *Server
	ts   *httptest.Server
	lib  *tagging.Library
	c    *http.Client
	csrf string
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

func newTestServer(t testing.TB, mod func(*Options)) *testServer {
	t.Helper()
	l := openCopy(t)
	o := Options{Library: l, Pipeline: getFixture(t).pipe}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.Get(ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfMeta.FindSubmatch(body)
	if resp.StatusCode != 200 || m == nil {
		t.Fatalf("GET /: status %d, no CSRF token in the page", resp.StatusCode)
	}
	return &testServer{t: t, srv: s, ts: ts, lib: l, c: c, csrf: string(m[1])}
}
