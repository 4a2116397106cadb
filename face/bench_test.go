package face

import (
	"bytes"
	"image/jpeg"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/internal/datadir"
)

func TestNewBenchRefusesBadOptions(t *testing.T) {
	p, err := NewPipeline(Options{ModelDir: datadir.ModelDirForTest(t), Descriptors: true})
	if err != nil {
		t.Fatal(err)
	}
	noDesc, err := NewPipeline(Options{ModelDir: datadir.ModelDirForTest(t)})
	if err != nil {
		t.Fatal(err)
	}
	photos := [][]byte{{0xff}}
	for _, tc := range []struct {
		name string
		o    BenchOptions
		want string
	}{
		{"no pipeline", BenchOptions{Photos: photos, Rounds: 1, Workers: 1}, "no pipeline"},
		{"no descriptors", BenchOptions{Pipeline: noDesc, Photos: photos, Rounds: 1, Workers: 1}, "does not compute descriptors"},
		{"no photos", BenchOptions{Pipeline: p, Rounds: 1, Workers: 1}, "no photos"},
		{"no rounds", BenchOptions{Pipeline: p, Photos: photos, Workers: 1}, "at least 1"},
		{"no workers", BenchOptions{Pipeline: p, Photos: photos, Rounds: 1}, "at least 1"},
		{"negative size", BenchOptions{Pipeline: p, Photos: photos, Rounds: 1, Workers: 1, PhotoPixels: -1}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewBench(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// BenchPhotos scales a photo to the asked longer side (or keeps it) and
// re-encodes it as JPEG; a bench of one demo photo reports every stage,
// the throughput and the descriptor network, with the ratios to face-api
// computed from them.
func TestBench(t *testing.T) {
	paths := nets.DemoImages(datadir.ModelDirForTest(t))[:1]
	for _, tc := range []struct {
		size    int
		longest func(w, h int) bool
	}{
		{320, func(w, h int) bool { return max(w, h) == 320 }},
		{0, func(w, h int) bool { return max(w, h) > 320 }},
	} {
		photos, err := BenchPhotos(paths, tc.size)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := jpeg.DecodeConfig(bytes.NewReader(photos[0]))
		if err != nil || !tc.longest(cfg.Width, cfg.Height) {
			t.Fatalf("size %d: photo %dx%d (err %v)", tc.size, cfg.Width, cfg.Height, err)
		}
	}
	if _, err := BenchPhotos([]string{t.TempDir() + "/missing.jpg"}, 0); err == nil {
		t.Fatal("a missing photo was read")
	}
	photos, err := BenchPhotos(paths, 640)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPipeline(Options{ModelDir: datadir.ModelDirForTest(t), Detector: Tiny, Align: AlignFaceAPI, Descriptors: true})
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	b, err := NewBench(BenchOptions{Pipeline: p, Photos: photos, PhotoPixels: 640, Rounds: 1, Workers: 2, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := b.Run()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Photos != 1 || rep.PhotoPixels != 640 || rep.Workers != 2 || rep.Detector != string(Tiny) || !(rep.FacesPerPhoto >= 1) {
		t.Fatalf("report %+v", rep)
	}
	for _, k := range []string{"decode", "detect", "landmarks", "align", "descriptor"} {
		if !(rep.MS[k] > 0) {
			t.Errorf("stage %s: %v ms", k, rep.MS[k])
		}
	}
	if !(rep.PhotosPerS > 0 && rep.FacesPerS >= rep.PhotosPerS && rep.DescriptorsPerS > 0) || rep.PhotoMSWall != 1000/rep.PhotosPerS {
		t.Errorf("throughput %+v", rep)
	}
	if rep.VsFaceAPI["photo_throughput"] != PeerPhotoMs/rep.PhotoMSWall || rep.VsFaceAPI["detect_latency"] != PeerDetectMs/rep.MS["detect"] {
		t.Errorf("ratios %v", rep.VsFaceAPI)
	}
	if !strings.Contains(progress.String(), "warming up") {
		t.Errorf("progress %q", progress.String())
	}
}
