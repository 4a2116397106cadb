package training

import (
	"path/filepath"
	"testing"
)

// TestDefaultFolders: only the folders left empty take their places in
// the data folder; given ones are kept.
func TestDefaultFolders(t *testing.T) {
	root := filepath.Join("data", "root")
	for _, tc := range []struct {
		name     string
		in, want DataOptions
	}{
		{"all empty", DataOptions{}, DataOptions{LFW: filepath.Join(root, "lfw"), MTFL: filepath.Join(root, "mtfl"),
			CentreImages: filepath.Join(root, "mtfl", "net_7876")}},
		{"all given", DataOptions{LFW: "a", MTFL: "b", CentreImages: "c"}, DataOptions{LFW: "a", MTFL: "b", CentreImages: "c"}},
		{"LFW given", DataOptions{LFW: "a"}, DataOptions{LFW: "a", MTFL: filepath.Join(root, "mtfl"),
			CentreImages: filepath.Join(root, "mtfl", "net_7876")}},
	} {
		got := tc.in
		got.DefaultFolders(root)
		if got.LFW != tc.want.LFW || got.MTFL != tc.want.MTFL || got.CentreImages != tc.want.CentreImages {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
