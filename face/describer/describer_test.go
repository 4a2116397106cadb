package describer

import (
	"bytes"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/nn/arch"
)

// TestCachedRefusesFolder checks that the descriptor cache's reader
// refuses a folder in the user's words, as DecodeFile does, instead of the
// system's "is a directory", and never calls describe.
func TestCachedRefusesFolder(t *testing.T) {
	dir := t.TempDir()
	describe := func(*imaging.RGB) (eval.Described, error) {
		t.Fatal("describe called for a folder")
		return eval.Described{}, nil
	}
	_, err := Cached(nil, describe)(dir)
	if err == nil || !strings.Contains(err.Error(), "is a folder, not an image file") {
		t.Fatalf("got %v, want the folder refused", err)
	}
}

// TestAgeGenderFeaturesRefuseOtherFraming: the age/gender features are
// those of LFW's fixed face box, so an image of another size is refused,
// and unknown features are named.
func TestAgeGenderFeaturesRefuseOtherFraming(t *testing.T) {
	if FeaturesAgeGender != arch.HeadAgeGender {
		t.Fatalf("the age/gender features are %q here and %q to the heads", FeaturesAgeGender, arch.HeadAgeGender)
	}
	desc, dim, err := Options{NoCache: true}.Inputs(FeaturesAgeGender)
	if err != nil {
		t.Fatal(err)
	}
	if dim != 2048 {
		t.Errorf("input size %d, want 2048", dim)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 120, 100)), nil); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "small.jpg")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := desc(p); err == nil || !strings.Contains(err.Error(), "not a 250×250 deep-funnelled LFW image") {
		t.Errorf("120×100 image: error %v, want one about LFW's framing", err)
	}
	if _, _, err := (Options{}).Inputs("pixels"); err == nil || !strings.Contains(err.Error(), "unknown --features") {
		t.Errorf("unknown features: error %v", err)
	}
}
