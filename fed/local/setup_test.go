package local_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/local/localtest"
)

// TestLoadDataNamesTheMissingFolderAndLoadsAPart: a folder without LFW's
// identities list, or without the centre photos, is named with the flag
// that sets it before anything is read; with both present, LoadData
// loads the part asked for, the same as training.LoadData does.
func TestLoadDataNamesTheMissingFolderAndLoadsAPart(t *testing.T) {
	dir := t.TempDir()
	full, o := localtest.Data(t, dir, 6)
	d := local.DataOptions{LFW: dir, MinImages: o.Data.MinImages, CentreImages: o.Data.CentreImages, CentreCount: o.Data.CentreCount,
		Describers: o.Describers}

	empty := d
	empty.LFW = t.TempDir()
	if _, err := local.LoadData(o.Model, o.Optim, empty); err == nil || !strings.Contains(err.Error(), "no LFW data at "+empty.LFW) ||
		!strings.Contains(err.Error(), "--data") {
		t.Errorf("an empty LFW folder: %v", err)
	}
	noCentre := d
	noCentre.CentreImages = filepath.Join(t.TempDir(), "absent")
	if _, err := local.LoadData(o.Model, o.Optim, noCentre); err == nil || !strings.Contains(err.Error(), "--centre-images") {
		t.Errorf("no centre photos: %v", err)
	}
	if _, err := os.Stat(noCentre.CentreImages); !os.IsNotExist(err) {
		t.Fatalf("LoadData created the centre folder: %v", err)
	}

	got, err := local.LoadData(o.Model, o.Optim, d)
	if err != nil {
		t.Fatal(err)
	}
	if got.Train.Len() != full.Train.Len() || got.Identities != full.Identities {
		t.Errorf("loaded %d examples of %d people, want %d of %d", got.Train.Len(), got.Identities, full.Train.Len(), full.Identities)
	}
}
