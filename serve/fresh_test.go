package serve

import (
	"slices"
	"testing"

	"github.com/veil-privacy/veil/tagging"
)

// faceIDs reads the face ids of a list reply's items under key.
func faceIDs(t *testing.T, items []any, key string) []int64 {
	t.Helper()
	var out []int64
	for _, x := range items {
		if key == "" {
			out = append(out, int64(x.(float64)))
			continue
		}
		out = append(out, int64(x.(map[string]any)[key].(float64)))
	}
	return out
}

// A change another program commits (here a second connection to the
// library, as veil faces name in a terminal has) shows at the server's
// next request: the cached clusters and suggestions are not reused.
func TestCachesSeeOtherPrograms(t *testing.T) {
	s := newTestServer(t, nil)
	cs := s.do("GET", "/api/v1/clusters", nil, nil).json(t)["items"].([]any)
	if len(cs) == 0 {
		t.Fatal("no clusters")
	}
	cluster := cs[0].(map[string]any)
	named := faceIDs(t, cluster["faces"].([]any), "")
	sugs := s.do("GET", "/api/v1/suggestions", nil, nil).json(t)["items"].([]any)
	if len(sugs) == 0 {
		t.Fatal("no suggestions")
	}
	sugFace := faceIDs(t, sugs[:1], "face")[0]

	other, err := tagging.Open(s.lib.Dir(), []byte(fixturePass))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.NameFaces(append(slices.Clone(named), sugFace), "Named Elsewhere"); err != nil {
		t.Fatal(err)
	}
	other.Close()

	for _, c := range s.do("GET", "/api/v1/clusters?singles=true", nil, nil).json(t)["items"].([]any) {
		for _, f := range faceIDs(t, c.(map[string]any)["faces"].([]any), "") {
			if slices.Contains(named, f) {
				t.Fatalf("face %d, named by another program, is still in a cluster of unknown faces", f)
			}
		}
	}
	for _, f := range faceIDs(t, s.do("GET", "/api/v1/suggestions", nil, nil).json(t)["items"].([]any), "face") {
		if f == sugFace || slices.Contains(named, f) {
			t.Fatalf("face %d, named by another program, is still suggested", f)
		}
	}
}

// Naming a cluster with a face unticked names the others and leaves that
// face unknown, still in the unknown faces' clusters.
func TestNameClusterLeavesUntickedFace(t *testing.T) {
	s := newTestServer(t, nil)
	cs := s.do("GET", "/api/v1/clusters", nil, nil).json(t)["items"].([]any)
	if len(cs) == 0 {
		t.Fatal("no clusters")
	}
	faces := faceIDs(t, cs[0].(map[string]any)["faces"].([]any), "")
	if len(faces) < 2 {
		t.Fatalf("the largest cluster has %d faces", len(faces))
	}
	unticked, ticked := faces[0], faces[1:]
	if r := s.do("POST", "/api/v1/faces/assign", map[string]any{"faces": ticked, "person": "Cluster Person"}, nil); r.status != 200 {
		t.Fatalf("assign: %d %s", r.status, r.body)
	}
	if p := s.person("Cluster Person"); p.Faces != len(ticked) {
		t.Errorf("Cluster Person has %d faces, want the %d ticked", p.Faces, len(ticked))
	}
	if f, err := s.lib.Face(unticked); err != nil || f.PersonID != 0 || f.AssignedBy != "" {
		t.Fatalf("the unticked face %+v, %v: want unknown", f, err)
	}
	unknown := faceIDs(t, s.do("GET", "/api/v1/faces?unknown=true&limit=1000", nil, nil).json(t)["items"].([]any), "id")
	if !slices.Contains(unknown, unticked) {
		t.Errorf("the unticked face %d is not listed as unknown", unticked)
	}
	inCluster := false
	for _, c := range s.do("GET", "/api/v1/clusters?singles=true", nil, nil).json(t)["items"].([]any) {
		inCluster = inCluster || slices.Contains(faceIDs(t, c.(map[string]any)["faces"].([]any), ""), unticked)
	}
	if !inCluster {
		t.Errorf("the unticked face %d is in no cluster of unknown faces", unticked)
	}
}
