package collab

import (
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestPlotWritesAPNG(t *testing.T) {
	rep := &Report{Methods: map[string]*MethodReport{}}
	for i, m := range Methods {
		r := &MethodReport{}
		r.Named1 = Score{Coverage: 0.8 + 0.01*float64(i), StrangersRate: 0.01}
		r.Named3 = Score{Coverage: 0.95, StrangersRate: 0.02}
		rep.Methods[m] = r
	}
	path := filepath.Join(t.TempDir(), "collab.png")
	if err := Plot(rep, path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
		t.Fatalf("plot of %v", b)
	}
	if err := Plot(rep, filepath.Join(t.TempDir(), "collab.gif")); err == nil {
		t.Fatal("a .gif plot accepted")
	}
	delete(rep.Methods, "shared_w0")
	if err := Plot(rep, path); err == nil {
		t.Fatal("a report without a method plotted")
	}
}

func TestCheckPlotPath(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"collab.png", true},
		{"out/collab.SVG", true},
		{"collab.Png", true},
		{"collab.gif", false},
		{"collab", false},
		{"png", false},
		{"collab.png.txt", false},
	} {
		err := CheckPlotPath(c.path)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrPlotFormat)) {
			t.Errorf("CheckPlotPath(%q) = %v, want ok %v", c.path, err, c.ok)
		}
		if perr := Plot(&Report{}, filepath.Join(t.TempDir(), c.path)); !c.ok && !errors.Is(perr, ErrPlotFormat) {
			t.Errorf("Plot to %q: %v, want ErrPlotFormat", c.path, perr)
		}
	}
}
