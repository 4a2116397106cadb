package cli

import (
	"strings"
	"testing"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/imaging"
)

// TestCachedDescriberRefusesFolder checks that the descriptor cache's
// reader refuses a folder in the user's words, as DecodeFile does, instead
// of the system's "is a directory", and never calls describe.
func TestCachedDescriberRefusesFolder(t *testing.T) {
	dir := t.TempDir()
	describe := func(*imaging.RGB) (eval.Described, error) {
		t.Fatal("describe called for a folder")
		return eval.Described{}, nil
	}
	_, err := cachedDescriber(nil, describe)(dir)
	if err == nil || !strings.Contains(err.Error(), "is a folder, not an image file") {
		t.Fatalf("got %v, want the folder refused", err)
	}
}
