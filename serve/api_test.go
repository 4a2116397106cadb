package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/tagging"
)

// reply is a response read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body (the test fails if it is not JSON).
func (r reply) json(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("response %d is not a JSON object: %v: %.200s", r.status, err, r.body)
	}
	return v
}

// do sends a request with the session cookie and, unless noCSRF, the CSRF
// token. body is a string (sent as is, JSON), []byte or anything else
// (encoded as JSON).
func (s *testServer) do(method, path string, body any, hdr map[string]string) reply {
	s.t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case *multipartBody:
		rd, ct = bytes.NewReader(b.buf.Bytes()), b.ct
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, s.ts.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set(CSRFHeader, s.csrf)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := s.c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

type multipartBody struct {
	buf bytes.Buffer
	ct  string
}

func upload(t testing.TB, files map[string][]byte) *multipartBody {
	t.Helper()
	m := &multipartBody{}
	w := multipart.NewWriter(&m.buf)
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fw, err := w.CreateFormFile(k, k+".jpg")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(files[k])
	}
	w.Close()
	m.ct = w.FormDataContentType()
	return m
}

// lfwOriginal reads an LFW photo that is not in the test library.
func lfwOriginal(t testing.TB, person string, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(datadir.ForTest(t, "lfw", "images_deepfunneled"), person, fmt.Sprintf("%s_%04d.jpg", person, n)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func lfwPhoto(t testing.TB, person string, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(getFixture(t).photos, person, fmt.Sprintf("%s_%04d.jpg", person, n)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (s *testServer) person(name string) tagging.Person {
	s.t.Helper()
	p, err := s.lib.PersonByName(name)
	if err != nil {
		s.t.Fatalf("person %q: %v", name, err)
	}
	return p
}

func (s *testServer) face(person string, n int) int64 {
	s.t.Helper()
	id, err := centralFace(s.lib, filepath.Join(getFixture(s.t).photos, person, fmt.Sprintf("%s_%04d.jpg", person, n)))
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

func (s *testServer) photoID(person string, n int) int64 {
	s.t.Helper()
	ph, err := s.lib.PhotoByPath(filepath.Join(getFixture(s.t).photos, person, fmt.Sprintf("%s_%04d.jpg", person, n)))
	if err != nil {
		s.t.Fatal(err)
	}
	return ph.ID
}

// TestRoutes calls every route with good and bad input: unknown ids,
// malformed ids and JSON, wrong fields; each answer's status and, for
// errors, a JSON body with a message and no stack trace.
func TestRoutes(t *testing.T) {
	s := newTestServer(t, nil)
	costa := s.person("Albert Costa")
	costa2 := s.face("Albert_Costa", 2)
	photo := s.photoID("Albert_Costa", 1)
	unnamed := s.face("Ashanti", 1)
	clusters := s.do("GET", "/api/v1/clusters", nil, nil).json(t)
	if len(clusters["items"].([]any)) == 0 {
		t.Fatalf("no clusters: %v", clusters)
	}
	cl := int(clusters["items"].([]any)[0].(map[string]any)["id"].(float64))
	tests := []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "/api/v1/openapi.json", nil, 200},
		{"GET", "/api/v1/status", nil, 200},
		{"GET", "/api/v1/people", nil, 200},
		{"GET", "/api/v1/people?limit=2&offset=1", nil, 200},
		{"GET", "/api/v1/people?limit=-1", nil, 400},
		{"GET", "/api/v1/people?limit=100000", nil, 400},
		{"GET", "/api/v1/people?offset=x", nil, 400},
		{"GET", fmt.Sprintf("/api/v1/people/%d", costa.ID), nil, 200},
		{"GET", "/api/v1/people/999999", nil, 404},
		{"GET", "/api/v1/people/abc", nil, 400},
		{"GET", "/api/v1/people/-3", nil, 400},
		{"PATCH", "/api/v1/people/999999", map[string]any{"name": "X"}, 404},
		{"PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), `{"name":`, 400},
		{"PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), `{"nom":"x"}`, 400},
		{"PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), `{}`, 400},
		{"PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), `{"name":"a"} {"name":"b"}`, 400},
		{"PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), map[string]any{"name": ""}, 400},
		{"PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), map[string]any{"name": "Angela Bassett"}, 409},
		{"PATCH", fmt.Sprintf("/api/v1/people/%d", costa.ID), map[string]any{"cover": unnamed}, 400},
		{"POST", fmt.Sprintf("/api/v1/people/%d/merge", costa.ID), map[string]any{"into": 999999}, 404},
		{"POST", fmt.Sprintf("/api/v1/people/%d/merge", costa.ID), map[string]any{"into": costa.ID}, 400},
		{"GET", fmt.Sprintf("/api/v1/people/%d/similar", costa.ID), nil, 200},
		{"GET", "/api/v1/people/999999/similar", nil, 404},
		{"GET", fmt.Sprintf("/api/v1/people/%d/thumbnail", costa.ID), nil, 200},
		{"GET", "/api/v1/people/999999/thumbnail", nil, 404},
		{"GET", "/api/v1/faces", nil, 200},
		{"GET", fmt.Sprintf("/api/v1/faces?photo=%d", photo), nil, 200},
		{"GET", fmt.Sprintf("/api/v1/faces?person=%d", costa.ID), nil, 200},
		{"GET", fmt.Sprintf("/api/v1/faces?cluster=%d", cl), nil, 200},
		{"GET", "/api/v1/faces?unknown=true", nil, 200},
		{"GET", "/api/v1/faces?unknown=maybe", nil, 400},
		{"GET", "/api/v1/faces?photo=999999", nil, 404},
		{"GET", "/api/v1/faces?person=999999", nil, 404},
		{"GET", "/api/v1/faces?cluster=999999", nil, 404},
		{"GET", "/api/v1/faces?photo=x", nil, 400},
		{"GET", fmt.Sprintf("/api/v1/faces?photo=%d&person=%d", photo, costa.ID), nil, 400},
		{"GET", fmt.Sprintf("/api/v1/faces/%d", costa2), nil, 200},
		{"GET", "/api/v1/faces/999999", nil, 404},
		{"GET", fmt.Sprintf("/api/v1/faces/%d/thumbnail", costa2), nil, 200},
		{"GET", "/api/v1/faces/999999/thumbnail", nil, 404},
		{"DELETE", "/api/v1/faces/999999", nil, 404},
		{"POST", "/api/v1/faces/assign", map[string]any{"faces": []int64{999999}, "person": "X Y"}, 404},
		{"POST", "/api/v1/faces/assign", map[string]any{"faces": []int64{}, "person": "X Y"}, 400},
		{"POST", "/api/v1/faces/assign", map[string]any{"faces": []int64{unnamed}}, 400},
		{"POST", "/api/v1/faces/assign", `[1,2]`, 400},
		{"POST", "/api/v1/faces/assign", map[string]any{"faces": []int64{unnamed}, "person": "bad\x01name"}, 400},
		{"POST", "/api/v1/faces/reject", map[string]any{"faces": []int64{999999}, "person": "Albert Costa"}, 404},
		{"POST", "/api/v1/faces/reject", map[string]any{"faces": []int64{unnamed}, "person": "Nobody Known"}, 404},
		{"POST", "/api/v1/faces/unassign", map[string]any{"faces": []int64{999999}}, 404},
		{"POST", "/api/v1/faces/unassign", map[string]any{"faces": []int64{unnamed}, "person": "x"}, 400},
		{"POST", "/api/v1/faces", map[string]any{"photo": 999999, "box": map[string]any{"x": 1, "y": 1, "width": 50, "height": 50}}, 404},
		{"POST", "/api/v1/faces", map[string]any{"photo": photo}, 400},
		{"POST", "/api/v1/faces", map[string]any{"photo": photo, "box": map[string]any{"x": 1, "y": 1, "width": -5, "height": 50}}, 400},
		{"POST", "/api/v1/faces", map[string]any{"photo": photo, "box": map[string]any{"x": 5000, "y": 5000, "width": 50, "height": 50}}, 400},
		{"GET", "/api/v1/clusters", nil, 200},
		{"GET", "/api/v1/clusters?singles=true", nil, 200},
		{"GET", "/api/v1/suggestions", nil, 200},
		{"GET", fmt.Sprintf("/api/v1/suggestions?person=%d", costa.ID), nil, 200},
		{"GET", "/api/v1/suggestions?person=999999", nil, 404},
		{"GET", "/api/v1/suggestions?person=x", nil, 400},
		{"POST", "/api/v1/suggestions/accept", map[string]any{"faces": []int64{999999}}, 404},
		{"POST", "/api/v1/suggestions/accept", `{"faces":"all"}`, 400},
		{"POST", "/api/v1/suggestions/reject", map[string]any{"faces": []int64{999999}, "person": "Albert Costa"}, 404},
		{"GET", "/api/v1/photos", nil, 200},
		{"GET", fmt.Sprintf("/api/v1/photos/%d", photo), nil, 200},
		{"GET", "/api/v1/photos/999999", nil, 404},
		{"GET", fmt.Sprintf("/api/v1/photos/%d/image", photo), nil, 200},
		{"GET", "/api/v1/photos/999999/image", nil, 404},
		{"GET", "/api/v1/scans/1", nil, 404},
		{"GET", "/api/v1/scans/x", nil, 400},
		{"GET", "/api/v1/scans/1/events", nil, 404},
		{"POST", "/api/v1/scans", map[string]any{"paths": []string{}}, 400},
		{"POST", "/api/v1/scans", map[string]any{"paths": []string{"relative/path"}}, 400},
		{"POST", "/api/v1/scans", map[string]any{"paths": []string{"/no/such/folder"}}, 400},
		{"POST", "/api/v1/search", `{}`, 415},
		{"POST", "/api/v1/recognize", upload(t, map[string][]byte{"file": []byte("not an image at all")}), 400},
		{"POST", "/api/v1/recognize?prediction_count=0", upload(t, map[string][]byte{"file": lfwPhoto(t, "Ashanti", 1)}), 400},
		{"POST", "/api/v1/detect", upload(t, map[string][]byte{"other": lfwPhoto(t, "Ashanti", 1)}), 400},
		{"POST", "/api/v1/verify", upload(t, map[string][]byte{"source_image": lfwPhoto(t, "Ashanti", 1)}), 400},
		{"GET", "/api/v1/nothing-here", nil, 404},
		{"PUT", "/api/v1/people", nil, 405},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := s.do(tc.method, tc.path, tc.body, nil)
			if r.status != tc.want {
				t.Fatalf("status %d, want %d: %.300s", r.status, tc.want, r.body)
			}
			ct := r.header.Get("Content-Type")
			switch {
			case tc.want >= 400 && tc.want != 405:
				e := r.json(t)
				msg, _ := e["error"].(string)
				if msg == "" || strings.Contains(msg, "goroutine") || strings.Contains(msg, ".go:") {
					t.Fatalf("error body %q: want a message without a stack trace", r.body)
				}
			case strings.HasSuffix(tc.path, "thumbnail") || strings.HasSuffix(tc.path, "/image"):
				if ct != "image/jpeg" || r.header.Get("Cache-Control") != "no-store" || !bytes.HasPrefix(r.body, []byte{0xff, 0xd8}) {
					t.Fatalf("image: Content-Type %q, Cache-Control %q, %d bytes", ct, r.header.Get("Cache-Control"), len(r.body))
				}
			default:
				r.json(t)
			}
		})
	}
}

// TestEdits changes the library through the API and checks each change
// through the library itself.
func TestEdits(t *testing.T) {
	s := newTestServer(t, nil)
	costa := s.person("Albert Costa")
	base := fmt.Sprintf("/api/v1/people/%d", costa.ID)
	if r := s.do("PATCH", base, map[string]any{"name": "Albert Costa Jr"}, nil); r.status != 200 {
		t.Fatalf("rename: %d %s", r.status, r.body)
	}
	if _, err := s.lib.PersonByName("Albert Costa Jr"); err != nil {
		t.Fatalf("renamed person: %v", err)
	}
	if r := s.do("PATCH", base, map[string]any{"hidden": true}, nil); r.status != 200 || r.json(t)["hidden"] != true {
		t.Fatalf("hide: %d %s", r.status, r.body)
	}
	if !s.person("Albert Costa Jr").Hidden {
		t.Fatal("the person is not hidden")
	}
	list := s.do("GET", "/api/v1/people", nil, nil).json(t)
	for _, p := range list["items"].([]any) {
		if p.(map[string]any)["name"] == "Albert Costa Jr" {
			t.Fatal("a hidden person is listed without hidden=all")
		}
	}
	// Name an unknown face, then reject and unassign.
	f := s.face("Ashanti", 1)
	if r := s.do("POST", "/api/v1/faces/assign", map[string]any{"faces": []int64{f}, "person": "Ashanti"}, nil); r.status != 200 {
		t.Fatalf("assign: %d %s", r.status, r.body)
	}
	if got, _ := s.lib.Face(f); got.Person != "Ashanti" || got.AssignedBy != tagging.ByUser {
		t.Fatalf("face after assign: %+v", got)
	}
	if r := s.do("POST", "/api/v1/faces/unassign", map[string]any{"faces": []int64{f}}, nil); r.status != 200 {
		t.Fatalf("unassign: %d %s", r.status, r.body)
	}
	if got, _ := s.lib.Face(f); got.PersonID != 0 {
		t.Fatalf("face after unassign: %+v", got)
	}
	// Merge the duplicate person.
	dup, into := s.person("A. Campbell"), s.person("Alastair Campbell")
	if r := s.do("POST", fmt.Sprintf("/api/v1/people/%d/merge", dup.ID), map[string]any{"into": into.ID}, nil); r.status != 200 {
		t.Fatalf("merge: %d %s", r.status, r.body)
	}
	if _, err := s.lib.PersonByName("A. Campbell"); err == nil {
		t.Fatal("the merged person still exists")
	}
	if p := s.person("Alastair Campbell"); p.Faces < 2 {
		t.Fatalf("after the merge Alastair Campbell has %d faces", p.Faces)
	}
	// Remove a face as not a face.
	g := s.face("Benazir_Bhutto", 2)
	if r := s.do("DELETE", fmt.Sprintf("/api/v1/faces/%d", g), nil, nil); r.status != 200 || r.json(t)["removed"] != true {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	// Suggestions: accept one, reject another.
	sugs := s.do("GET", "/api/v1/suggestions", nil, nil).json(t)["items"].([]any)
	if len(sugs) < 2 {
		t.Fatalf("want two suggestions or more in the test library, got %v", sugs)
	}
	a, b := sugs[0].(map[string]any), sugs[1].(map[string]any)
	af, bf := int64(a["face"].(float64)), int64(b["face"].(float64))
	r := s.do("POST", "/api/v1/suggestions/accept", map[string]any{"faces": []int64{af}}, nil)
	if r.status != 200 || len(r.json(t)["accepted"].([]any)) != 1 {
		t.Fatalf("accept: %d %s", r.status, r.body)
	}
	if got, _ := s.lib.Face(af); got.Person != a["person"] {
		t.Fatalf("accepted face %d is %q, want %q", af, got.Person, a["person"])
	}
	if r := s.do("POST", "/api/v1/suggestions/reject", map[string]any{"faces": []int64{bf}, "person": b["person"]}, nil); r.status != 200 {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	rej, _ := s.lib.Rejections()
	if !slices.Contains(rej[bf], int64(b["person_id"].(float64))) {
		t.Fatalf("rejection not recorded: %v", rej)
	}
	// Draw a face where there is none (Ashanti's photo 2, bottom left
	// corner, away from the detected face), named.
	ph := s.photoID("Ashanti", 2)
	r = s.do("POST", "/api/v1/faces", map[string]any{"photo": ph, "box": map[string]any{"x": 2, "y": 180, "width": 60, "height": 60}, "person": "Ashanti"}, nil)
	if r.status != 201 {
		t.Fatalf("add face: %d %s", r.status, r.body)
	}
	nf, err := s.lib.Face(int64(r.json(t)["id"].(float64)))
	if err != nil || nf.Source != tagging.Manual || nf.Person != "Ashanti" {
		t.Fatalf("drawn face %+v, %v", nf, err)
	}
	if r := s.do("POST", "/api/v1/faces", map[string]any{"photo": ph, "box": map[string]any{"x": 2, "y": 180, "width": 60, "height": 60}}, nil); r.status != 409 {
		t.Fatalf("the same box again: %d, want 409 %s", r.status, r.body)
	}
}

// TestUploads runs search, recognize, verify and detect on real photos.
func TestUploads(t *testing.T) {
	s := newTestServer(t, nil)
	q := lfwOriginal(t, "Angela_Bassett", 4)
	r := s.do("POST", "/api/v1/search", upload(t, map[string][]byte{"file": q}), nil)
	if r.status != 200 {
		t.Fatalf("search: %d %s", r.status, r.body)
	}
	if !strings.Contains(string(r.body), `"person":"Angela Bassett"`) {
		t.Fatalf("search did not find Angela Bassett: %s", r.body)
	}
	r = s.do("POST", "/api/v1/recognize?prediction_count=2", upload(t, map[string][]byte{"file": q}), nil)
	if r.status != 200 {
		t.Fatalf("recognize: %d %s", r.status, r.body)
	}
	var rec struct {
		Result []struct {
			Box      cfBox       `json:"box"`
			Subjects []cfSubject `json:"subjects"`
		} `json:"result"`
	}
	json.Unmarshal(r.body, &rec)
	found := false
	for _, x := range rec.Result {
		if len(x.Subjects) > 0 && x.Subjects[0].Subject == "Angela Bassett" && x.Subjects[0].Similarity > 0.5 && x.Box.XMax > x.Box.XMin {
			found = true
		}
	}
	if !found {
		t.Fatalf("recognize: %s", r.body)
	}
	r = s.do("POST", "/api/v1/detect", upload(t, map[string][]byte{"file": q}), nil)
	if r.status != 200 || len(r.json(t)["result"].([]any)) == 0 {
		t.Fatalf("detect: %d %s", r.status, r.body)
	}
	same := s.do("POST", "/api/v1/verify", upload(t, map[string][]byte{"source_image": lfwPhoto(t, "Angela_Merkel", 1), "target_image": lfwPhoto(t, "Angela_Merkel", 2)}), nil)
	diff := s.do("POST", "/api/v1/verify", upload(t, map[string][]byte{"source_image": lfwPhoto(t, "Angela_Merkel", 1), "target_image": lfwPhoto(t, "Ahmed_Chalabi", 1)}), nil)
	if !strings.Contains(string(same.body), `"same_person":true`) || strings.Contains(string(diff.body), `"same_person":true`) {
		t.Fatalf("verify: same %d %s; different %d %s", same.status, same.body, diff.status, diff.body)
	}
}

// TestScan scans a folder through the API and follows it by server-sent
// events to the end.
func TestScan(t *testing.T) {
	s := newTestServer(t, nil)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "new.jpg"), lfwOriginal(t, "Ashanti", 4), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.jpg"), []byte("not a photo"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := s.do("POST", "/api/v1/scans", map[string]any{"paths": []string{dir}}, nil)
	if r.status != 202 {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	id := int(r.json(t)["id"].(float64))
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/scans/%d/events", s.ts.URL, id), nil)
	resp, err := s.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events: Content-Type %q", ct)
	}
	body, err := io.ReadAll(resp.Body) // the stream ends with the scan
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), "event: end\n") {
		t.Fatalf("no end event: %s", body)
	}
	st := s.do("GET", fmt.Sprintf("/api/v1/scans/%d", id), nil, nil).json(t)
	if st["state"] != "done" || st["added"].(float64) != 1 || len(st["errors"].([]any)) != 1 {
		t.Fatalf("scan state %v", st)
	}
	if r := s.do("POST", "/api/v1/scans", map[string]any{"paths": []string{dir}}, nil); r.status != 202 {
		t.Fatalf("second scan after the first ended: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st := s.do("GET", "/api/v1/scans/2", nil, nil).json(t)
		if st["state"] == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second scan did not finish: %v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOpenAPI checks the OpenAPI document against the registered routes,
// both ways: every API route is documented with its method, and every
// documented operation is a route.
func TestOpenAPI(t *testing.T) {
	s := newTestServer(t, nil)
	r := s.do("GET", "/api/v1/openapi.json", nil, nil)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q, want 3.x", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	registered := map[string]bool{}
	for _, rt := range s.srv.routes {
		if strings.HasPrefix(rt.pattern, "/api/") {
			registered[rt.method+" "+rt.pattern] = true
		}
	}
	for k := range registered {
		if !documented[k] {
			t.Errorf("route %s is not in openapi.json", k)
		}
	}
	for k := range documented {
		if !registered[k] {
			t.Errorf("openapi.json documents %s, which is not a route", k)
		}
	}
	if len(registered) < 25 {
		t.Fatalf("only %d API routes registered", len(registered))
	}
}

// TestSuggestionsFresh: the server's cached suggestions never outlive a
// change made through it: a face named after the list was read leaves the
// list at once, and accepting its old suggestion assigns nothing over the
// user's name.
func TestSuggestionsFresh(t *testing.T) {
	s := newTestServer(t, nil)
	sugs := s.do("GET", "/api/v1/suggestions", nil, nil).json(t)["items"].([]any)
	if len(sugs) == 0 {
		t.Fatal("no suggestions")
	}
	f := int64(sugs[0].(map[string]any)["face"].(float64))
	if r := s.do("POST", "/api/v1/faces/assign", map[string]any{"faces": []int64{f}, "person": "Someone Else"}, nil); r.status != 200 {
		t.Fatalf("assign: %d %s", r.status, r.body)
	}
	for _, x := range s.do("GET", "/api/v1/suggestions", nil, nil).json(t)["items"].([]any) {
		if int64(x.(map[string]any)["face"].(float64)) == f {
			t.Fatalf("face %d, named meanwhile, is still suggested: %v", f, x)
		}
	}
	r := s.do("POST", "/api/v1/suggestions/accept", map[string]any{"faces": []int64{f}}, nil)
	got := r.json(t)
	if r.status != 200 || len(got["accepted"].([]any)) != 0 || len(got["without_suggestion"].([]any)) != 1 {
		t.Fatalf("accepting a stale suggestion: %d %s", r.status, r.body)
	}
	if face, _ := s.lib.Face(f); face.Person != "Someone Else" || face.AssignedBy != tagging.ByUser {
		t.Fatalf("the user's name was overridden: %+v", face)
	}
}
