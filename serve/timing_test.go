package serve

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/serve/browser"
	"github.com/veil-privacy/veil/tagging"
)

// syntheticLibrary builds a library of nFaces faces, two per photo, with
// synthetic descriptors (one random centre per person plus noise) and real
// thumbnails (LFW faces, repeated): person 1 has 1,000 faces, the other
// people 14 each, and about a fifth of the faces are unnamed, in groups of
// about 20 alike faces.
func syntheticLibrary(b *testing.B, nFaces int) (*tagging.Library, []tagging.Person) {
	b.Helper()
	f := getFixture(b)
	var thumbs [][]byte
	for _, p := range fixturePeople {
		img, _, err := imaging.DecodeFile(filepath.Join(f.photos, p, p+"_0001.jpg"), imaging.DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		th, err := tagging.Thumbnail(img, face.Box{X: 70, Y: 70, Width: 110, Height: 110})
		if err != nil {
			b.Fatal(err)
		}
		thumbs = append(thumbs, th)
	}
	l, err := tagging.Create(b.TempDir(), []byte(fixturePass), tagging.CreateOptions{KDF: tagging.KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	rng := rand.New(rand.NewPCG(1, 2))
	// identity of each face: 0 = the big person, 1.. named people, then
	// unnamed groups (ids from 10000).
	ident := make([]int, nFaces)
	named := nFaces * 4 / 5
	for i := range ident {
		switch {
		case i < 1000:
			ident[i] = 0
		case i < named:
			ident[i] = 1 + (i-1000)/14
		default:
			ident[i] = 10000 + (i-named)/20
		}
	}
	rng.Shuffle(len(ident), func(i, j int) { ident[i], ident[j] = ident[j], ident[i] })
	centres := map[int][]float32{}
	byIdent := map[int][]int64{}
	for ph := 0; ph < nFaces/2; ph++ {
		rec := tagging.PhotoRecord{Path: fmt.Sprintf("/synthetic/%05d/photo.jpg", ph), SHA256: sha256.Sum256([]byte(fmt.Sprint(ph))), Size: 30000, Width: 500, Height: 250}
		var nf []tagging.NewFace
		for k := 0; k < 2; k++ {
			id := ident[2*ph+k]
			c := centres[id]
			if c == nil {
				c = make([]float32, 128)
				for i := range c {
					c[i] = float32(rng.NormFloat64() * 0.1)
				}
				centres[id] = c
			}
			d := make([]float32, 128)
			for i := range d {
				d[i] = c[i] + float32(rng.NormFloat64()*0.02)
			}
			nf = append(nf, tagging.NewFace{Box: face.Box{X: float64(40 + 250*k), Y: 40, Width: 150, Height: 150}, Score: 0.9,
				Source: tagging.Detected, Descriptor: d, Thumbnail: thumbs[(2*ph+k)%len(thumbs)]})
		}
		_, ids, err := l.AddPhoto(rec, nf)
		if err != nil {
			b.Fatal(err)
		}
		for k, id := range ids {
			byIdent[ident[2*ph+k]] = append(byIdent[ident[2*ph+k]], id)
		}
	}
	for id, faces := range byIdent {
		if id >= 10000 {
			continue
		}
		if _, err := l.NameFaces(faces, fmt.Sprintf("Person %04d", id+1)); err != nil {
			b.Fatal(err)
		}
	}
	o, _ := tagging.NewClusterOptions(tagging.DefaultClusterAlgorithm)
	if _, err := l.UpdateClusters(context.Background(), o, false); err != nil {
		b.Fatal(err)
	}
	ps, err := l.People()
	if err != nil {
		b.Fatal(err)
	}
	return l, ps
}

// BenchmarkPages10k measures the pages of a 10,000-face library in headless
// Chromium by Navigation Timing (median of 5 loads each; reported, not
// asserted; the least of the 5 too, as the machine may be shared):
//
//	go test -run '^$' -bench Pages10k -benchtime 1x ./serve
func BenchmarkPages10k(b *testing.B) {
	if _, err := browser.Find(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	l, ps := syntheticLibrary(b, 10000)
	st, _ := l.Status(context.Background())
	b.Logf("library: %d photos, %d faces (%d named), %d people, built in %.1f s", st.Photos, st.Faces, st.Named, st.People, time.Since(start).Seconds())
	s, err := New(Options{Library: l})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bctx, stop, err := browser.Start(ctx, browser.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	var big, small tagging.Person
	for _, p := range ps {
		if p.Faces >= 1000 {
			big = p
		} else if small.ID == 0 {
			small = p
		}
	}
	pages := []struct{ name, path string }{
		{"people", "/"},
		{"person (14 faces)", fmt.Sprintf("/people/%d", small.ID)},
		{"person (1000 faces, page 1 of 5)", fmt.Sprintf("/people/%d", big.ID)},
		{"unknown faces", "/unknown"},
		{"photo", "/photos/1"},
		{"library", "/library"},
		{"privacy", "/privacy"},
	}
	dir := os.Getenv(EnvScreenshots)
	for _, pg := range pages {
		var srv, first, fcp, dcl, load []float64
		for range 5 {
			t, err := browser.Navigate(bctx, ts.URL+pg.path)
			if err != nil {
				b.Fatal(err)
			}
			srv = append(srv, t.Server)
			first, fcp, dcl, load = append(first, t.ResponseStart), append(fcp, t.FirstContentfulPaint), append(dcl, t.DOMContentLoaded), append(load, t.Load)
		}
		fmt.Printf("%-34s server %6.1f ms (least %6.1f), first byte %6.1f ms (least %6.1f), first contentful paint %6.1f ms, DOMContentLoaded %6.1f ms, load %6.1f ms\n",
			pg.name, median(srv), slices.Min(srv), median(first), slices.Min(first), median(fcp), median(dcl), median(load))
		if dir != "" && pg.path == "/" {
			if err := browser.Screenshot(bctx, filepath.Join(dir, "people-10k.png")); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
