package nets

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// detFaces is the part of faceapi-reference/faces.json the detector tests use.
type detFaces struct {
	Images []struct {
		File   string `json:"file"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
		SSD    []struct {
			Score float64 `json:"score"`
			Box   struct {
				X      float64 `json:"x"`
				Y      float64 `json:"y"`
				Width  float64 `json:"width"`
				Height float64 `json:"height"`
			} `json:"detection_box"`
		} `json:"ssd"`
		Tiny []struct {
			Score float64 `json:"score"`
			Box   struct {
				X      float64 `json:"x"`
				Y      float64 `json:"y"`
				Width  float64 `json:"width"`
				Height float64 `json:"height"`
			} `json:"detection_box"`
		} `json:"tiny"`
	} `json:"images"`
}

func TestDetectorsEndToEndMatchFaceAPI(t *testing.T) {
	data, err := os.ReadFile(datadir.ForTest(t, "faceapi-reference", "faces.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref detFaces
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Images) != 6 {
		t.Fatalf("faces.json has %d images, want 6", len(ref.Images))
	}
	ssd, tiny := loadSSD(t), loadTiny(t)
	for _, im := range ref.Images {
		t.Run(im.File, func(t *testing.T) {
			img, _, err := imaging.DecodeFile(datadir.ForTest(t, "faceapi-reference", "images", im.File), imaging.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if img.W != im.Width || img.H != im.Height {
				t.Fatalf("decoded %dx%d, want %dx%d", img.W, img.H, im.Width, im.Height)
			}
			got, err := ssd.Detect(img, SSDOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]detRef, len(im.SSD))
			for i, f := range im.SSD {
				want[i].Score, want[i].Box = f.Score, f.Box
			}
			t.Run("ssd", func(t *testing.T) { detCompare(t, got, want, 0.5) })
			got, err = tiny.Detect(img, TinyOptions{InputSize: 416, ScoreThreshold: 0.5})
			if err != nil {
				t.Fatal(err)
			}
			want = make([]detRef, len(im.Tiny))
			for i, f := range im.Tiny {
				want[i].Score, want[i].Box = f.Score, f.Box
			}
			t.Run("tiny", func(t *testing.T) { detCompare(t, got, want, 0.5) })
		})
	}
}

// TestDetInputMatchesImaging checks the fused pad+resize against
// imaging.PadToSquare followed by imaging.ResizeBilinear, bit for bit.
func TestDetInputMatchesImaging(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name       string
		w, h, size int
	}{
		{"landscape down", 97, 61, 32},
		{"portrait down", 50, 83, 64},
		{"landscape up", 20, 13, 64},
		{"square same", 32, 32, 32},
		{"square down", 45, 45, 32},
		{"thin", 1, 40, 32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := imaging.NewRGB(tc.w, tc.h)
			for i := range img.Pix {
				img.Pix[i] = uint8(r.IntN(256))
			}
			sq, _, _ := imaging.PadToSquare(img.ToFloat(), false)
			want := sq
			if sq.W != tc.size {
				want = imaging.ResizeBilinear(sq, tc.size, tc.size)
			}
			got, err := detInput(img, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if got.W != tc.size || got.H != tc.size || len(got.Pix) != len(want.Pix) {
				t.Fatalf("got %dx%d (%d values), want %d² (%d)", got.W, got.H, len(got.Pix), tc.size, len(want.Pix))
			}
			for i := range want.Pix {
				if got.Pix[i] != want.Pix[i] {
					t.Fatalf("value %d: %v, want %v", i, got.Pix[i], want.Pix[i])
				}
			}
		})
	}
}

// detDemoImage decodes demo image n (1..6) of the reference data.
func detDemoImage(t testing.TB, n int) *imaging.RGB {
	t.Helper()
	p := datadir.ForTest(t, "faceapi-reference", "images", filepath.Base("sample"+string(rune('0'+n))+".jpg"))
	img, _, err := imaging.DecodeFile(p, imaging.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// detBenchImage is demo photo 1 cropped to 1920×1080.
func detBenchImage(b *testing.B) *imaging.RGB {
	b.Helper()
	img, err := detDemoImage(b, 1).Crop(0, 0, 1920, 1080)
	if err != nil {
		b.Fatal(err)
	}
	return img
}

// detCPUTime returns the process's user+system CPU time.
func detCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// detBenchParallel runs fn b.N times spread over n goroutines, so ns/op is
// the time per image at n images in flight. It also reports cpu-ms/op, the
// process CPU time per image, which stays meaningful when other processes
// share the cores.
func detBenchParallel(b *testing.B, n int, fn func() error) {
	b.Helper()
	if err := fn(); err != nil { // compile outside the timer
		b.Fatal(err)
	}
	cpu0 := detCPUTime()
	defer func() {
		b.ReportMetric(float64(detCPUTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	}()
	b.ResetTimer()
	next := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		go func() {
			var first error
			for range next {
				if err := fn(); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for range b.N {
		next <- struct{}{}
	}
	close(next)
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSSD(b *testing.B) {
	net := loadSSD(b)
	in := loadFaRGB(b, "sample1_ssd_input_512.rgb", 512)
	img := detBenchImage(b)
	raw := func() error { _, _, err := net.Raw(in); return err }
	detect := func() error { _, err := net.Detect(img, SSDOptions{}); return err }
	b.Run("raw512", func(b *testing.B) { detBenchParallel(b, 1, raw) })
	b.Run("detect1920x1080", func(b *testing.B) { detBenchParallel(b, 1, detect) })
	b.Run("detect1920x1080-parallel2", func(b *testing.B) { detBenchParallel(b, 2, detect) })
}

func BenchmarkTiny(b *testing.B) {
	net := loadTiny(b)
	in := loadFaRGB(b, "sample1_tiny_input_416.rgb", 416)
	img := detBenchImage(b)
	raw := func() error { _, err := net.Raw(in); return err }
	detect := func() error { _, err := net.Detect(img, TinyOptions{}); return err }
	b.Run("raw416", func(b *testing.B) { detBenchParallel(b, 1, raw) })
	b.Run("detect1920x1080", func(b *testing.B) { detBenchParallel(b, 1, detect) })
	b.Run("detect1920x1080-parallel2", func(b *testing.B) { detBenchParallel(b, 2, detect) })
}

func BenchmarkDetInput(b *testing.B) {
	img := detBenchImage(b)
	for b.Loop() {
		if _, err := detInput(img, SSDInputSize); err != nil {
			b.Fatal(err)
		}
	}
}
