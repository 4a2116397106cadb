package serve

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCSRF plays a hostile page: state-changing requests without the
// session's CSRF token, with another session's token, or from another
// origin are refused, and the library is unchanged.
func TestCSRF(t *testing.T) {
	s := newTestServer(t, nil)
	other := newTestServer(t, nil) // another server's session and token
	costa := s.person("Albert Costa")
	path := fmt.Sprintf("/api/v1/people/%d", costa.ID)
	rename := map[string]any{"name": "Pwned"}
	tests := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no token", map[string]string{CSRFHeader: ""}, 403},
		{"wrong token", map[string]string{CSRFHeader: "x" + s.csrf}, 403},
		{"another session's token", map[string]string{CSRFHeader: other.csrf}, 403},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"foreign origin", map[string]string{"Origin": "http://evil.example"}, 403},
		{"foreign host (DNS rebinding)", map[string]string{"Host": "evil.example:7470"}, 421},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.doHost(tc.hdr, "PATCH", path, rename)
			if r.status != tc.want {
				t.Fatalf("status %d, want %d: %s", r.status, tc.want, r.body)
			}
			if _, err := s.lib.PersonByName("Pwned"); err == nil {
				t.Fatal("the person was renamed")
			}
		})
	}
	// Without a session cookie the API answers nothing, not even reads.
	resp, err := http.Get(s.ts.URL + "/api/v1/people")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || strings.Contains(string(b), "Albert") {
		t.Fatalf("GET without a session: %d %s", resp.StatusCode, b)
	}
	// A rebinding page cannot read either.
	if r := s.doHost(map[string]string{"Host": "evil.example"}, "GET", "/api/v1/people", nil); r.status != 421 || strings.Contains(string(r.body), "Albert") {
		t.Fatalf("GET with a foreign host: %d %s", r.status, r.body)
	}
	// The honest request passes.
	if r := s.do("PATCH", path, rename, nil); r.status != 200 {
		t.Fatalf("with the token: %d %s", r.status, r.body)
	}
}

// doHost is do with a Host header that net/http otherwise takes from the URL.
func (s *testServer) doHost(hdr map[string]string, method, path string, body any) reply {
	h := map[string]string{}
	host := ""
	for k, v := range hdr {
		if k == "Host" {
			host = v
			continue
		}
		h[k] = v
	}
	if host == "" {
		return s.do(method, path, body, h)
	}
	old := s.c.Transport
	s.c.Transport = hostTransport{host: host}
	defer func() { s.c.Transport = old }()
	return s.do(method, path, body, h)
}

type hostTransport struct{ host string }

func (h hostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r.Host = h.host
	return http.DefaultTransport.RoundTrip(r)
}

// TestToken: another program calls the API with the bearer token and no
// session or CSRF token; a wrong token is refused.
func TestToken(t *testing.T) {
	const token = "0123456789abcdef-token"
	s := newTestServer(t, func(o *Options) { o.Token = token })
	req := func(method, path, tok string, body string) int {
		r, _ := http.NewRequest(method, s.ts.URL+path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+tok)
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	costa := s.person("Albert Costa")
	if st := req("GET", "/api/v1/people", token, ""); st != 200 {
		t.Fatalf("GET with the token: %d", st)
	}
	if st := req("GET", "/api/v1/people", token+"x", ""); st != 401 {
		t.Fatalf("GET with a wrong token: %d", st)
	}
	if st := req("PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), "wrong-token-wrong-token", `{"hidden":true}`); st != 401 {
		t.Fatalf("PATCH with a wrong token: %d", st)
	}
	if s.person("Albert Costa").Hidden {
		t.Fatal("hidden with a wrong token")
	}
	if st := req("PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), token, `{"hidden":true}`); st != 200 {
		t.Fatalf("PATCH with the token: %d", st)
	}
	if !s.person("Albert Costa").Hidden {
		t.Fatal("not hidden with the token")
	}
	if _, err := New(Options{Library: s.lib, Token: "short"}); err == nil {
		t.Fatal("a 5-character token was accepted")
	}
}

// pngHeader returns the first bytes of a PNG claiming w×h pixels, with a
// valid header checksum and no pixel data: a decompression bomb's header.
func pngHeader(w, h uint32) []byte {
	var ihdr bytes.Buffer
	ihdr.WriteString("IHDR")
	binary.Write(&ihdr, binary.BigEndian, w)
	binary.Write(&ihdr, binary.BigEndian, h)
	ihdr.Write([]byte{8, 2, 0, 0, 0})
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	binary.Write(&b, binary.BigEndian, uint32(13))
	b.Write(ihdr.Bytes())
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(ihdr.Bytes()))
	return b.Bytes()
}

// TestUploadLimits: oversized bodies, a decompression bomb's header, a
// non-image and an oversized JSON body are refused with JSON errors; an
// upload is never written to a temporary file (Go's ParseMultipartForm
// would put a file over its memory limit in $TMPDIR).
func TestUploadLimits(t *testing.T) {
	s := newTestServer(t, func(o *Options) { o.Limits.MaxBytes, o.Limits.MaxPixels = 1<<20, 50_000_000 })
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	big := bytes.Repeat([]byte{0xff}, 3<<20)
	if r := s.do("POST", "/api/v1/search", upload(t, map[string][]byte{"file": big}), nil); r.status != 413 {
		t.Fatalf("3 MiB upload over a 1 MiB limit: %d %s", r.status, r.body)
	}
	start := time.Now()
	if r := s.do("POST", "/api/v1/detect", upload(t, map[string][]byte{"file": pngHeader(100000, 100000)}), nil); r.status != 413 || !strings.Contains(string(r.body), "pixels") {
		t.Fatalf("decompression bomb: %d %s", r.status, r.body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the bomb took %v: it was decoded", d)
	}
	if r := s.do("POST", "/api/v1/search", upload(t, map[string][]byte{"file": []byte("GIF89a not supported")}), nil); r.status != 400 || !strings.Contains(string(r.body), "not a JPEG or PNG") {
		t.Fatalf("non-image: %d %s", r.status, r.body)
	}
	huge := `{"faces":[` + strings.Repeat("1,", DefaultMaxJSON) + `1],"person":"x"}`
	if r := s.do("POST", "/api/v1/faces/assign", huge, nil); r.status != 413 {
		t.Fatalf("oversized JSON: %d %.200s", r.status, r.body)
	}
	// A valid photo of 0.9 MiB (an LFW photo padded after its end marker)
	// is searched in memory: nothing lands in TMPDIR.
	photo := append(lfwPhoto(t, "Ashanti", 1), bytes.Repeat([]byte{0}, 900<<10)...)
	if r := s.do("POST", "/api/v1/search", upload(t, map[string][]byte{"file": photo}), nil); r.status != 200 {
		t.Fatalf("search: %d %s", r.status, r.body)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("the upload left %d files in TMPDIR: %v", len(ents), ents[0].Name())
	}
}

var inlineScript = regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]|\son[a-z]+\s*=|javascript:|https?://`)

// TestPages loads every page: HTML with the strict CSP, no inline script,
// event-handler attribute or reference to another host; unknown ids give an
// error page.
func TestPages(t *testing.T) {
	s := newTestServer(t, nil)
	costa := s.person("Albert Costa")
	for _, tc := range []struct {
		path string
		want int
		text string
	}{
		{"/", 200, "Albert Costa"},
		{"/?page=1&hidden=all", 200, "Albert Costa"},
		{"/?page=x", 400, "page"},
		{fmt.Sprintf("/people/%d", costa.ID), 200, "Albert Costa"},
		{"/people/999999", 404, "no person"},
		{"/unknown", 200, "Group"},
		{fmt.Sprintf("/photos/%d", s.photoID("Albert_Costa", 1)), 200, "Albert_Costa_0001.jpg"},
		{"/photos/999999", 404, "no photo"},
		{"/search", 200, "Search"},
		{"/library", 200, "Folders"},
		{"/privacy", 200, "encrypted"},
		{"/static/app.js", 200, "X-CSRF-Token"},
		{"/static/app.css", 200, "grid"},
		{"/nothing", 404, ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			r := s.do("GET", tc.path, nil, nil)
			if r.status != tc.want || !strings.Contains(string(r.body), tc.text) {
				t.Fatalf("status %d, want %d with %q: %.300s", r.status, tc.want, tc.text, r.body)
			}
			if r.header.Get("Content-Security-Policy") != ContentSecurityPolicy {
				t.Fatalf("CSP %q", r.header.Get("Content-Security-Policy"))
			}
			if strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
				if m := inlineScript.Find(r.body); m != nil {
					t.Fatalf("the page has %q: inline script or another host", m)
				}
			}
		})
	}
}

func TestTopFolders(t *testing.T) {
	f := func(path string, n int) Folder { return Folder{Path: path, Photos: n} }
	all := []Folder{f("/a", 1), f("/b", 5), f("/c", 2), f("/d", 5), f("/e", 3)}
	for _, tc := range []struct {
		n    int
		want []Folder
		more int
	}{
		{10, all, 0},
		{5, all, 0},
		{3, []Folder{f("/b", 5), f("/d", 5), f("/e", 3)}, 2},
		{1, []Folder{f("/b", 5)}, 4},
	} {
		got, more := topFolders(all, tc.n)
		if !slices.Equal(got, tc.want) || more != tc.more {
			t.Errorf("topFolders(%d) = %v, %d more; want %v, %d more", tc.n, got, more, tc.want, tc.more)
		}
	}
	if all[0] != f("/a", 1) || all[1] != f("/b", 5) {
		t.Errorf("topFolders reordered its argument: %v", all)
	}
}
