package tagging_test

import (
	"bytes"
	"crypto/sha256"
	"image/jpeg"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/internal/digest"
	"github.com/veil-privacy/veil/internal/vec"
)

// BenchmarkPhotoHashLFW measures the hashing part of a scan (ReadContent's
// SHA-256 of each photo's bytes) where a scan does it: between decodes of
// photos, on GOMAXPROCS+1 goroutines. Each goroutine hashes then decodes
// its share of the first photo of each of LFW's first 300 people, timing
// each hash alone; crypto/sha256 (old) and internal/digest (new) run in
// the same process. Reported: hash-ns/photo (the median hash's time,
// robust to the machine's other load descheduling a thread now and then),
// dirty-% (the share of hashes started with the AVX registers' upper
// halves in use, in which crypto/sha256's SHA-NI code stalls) and
// dirty-hash-ns (the median time of those hashes). Run with
//
//	go test ./tagging -run '^$' -bench PhotoHashLFW -benchtime 3x
func BenchmarkPhotoHashLFW(b *testing.B) {
	dir := datadir.ForTest(b, "lfw", "images_deepfunneled")
	people, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var photos [][]byte
	for _, p := range people[:300] {
		d, err := os.ReadFile(filepath.Join(dir, p.Name(), p.Name()+"_0001.jpg"))
		if err != nil {
			b.Fatal(err)
		}
		photos = append(photos, d)
	}
	for _, bc := range []struct {
		name string
		sum  func([]byte) [32]byte
	}{{"crypto-sha256", sha256.Sum256}, {"digest", digest.Sum256}} {
		b.Run(bc.name, func(b *testing.B) {
			var times, dirty []time.Duration
			for b.Loop() {
				t, d := hashAndDecode(b, photos, bc.sum)
				times = append(times, t...)
				dirty = append(dirty, d...)
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2]), "hash-ns/photo")
			b.ReportMetric(100*float64(len(dirty))/float64(len(times)), "dirty-%")
			if len(dirty) > 0 {
				slices.Sort(dirty)
				b.ReportMetric(float64(dirty[len(dirty)/2]), "dirty-hash-ns")
			}
		})
	}
}

// hashAndDecode hashes and decodes photos on GOMAXPROCS+1 goroutines and
// returns each hash's time, and apart the times of the hashes that
// started with the AVX upper halves in use.
func hashAndDecode(b *testing.B, photos [][]byte, sum func([]byte) [32]byte) (times, dirty []time.Duration) {
	workers := runtime.GOMAXPROCS(0) + 1
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var mine, d []time.Duration
			for i := w; i < len(photos); i += workers {
				in, _ := vec.UpperInUse()
				t0 := time.Now()
				sum(photos[i])
				mine = append(mine, time.Since(t0))
				if in {
					d = append(d, mine[len(mine)-1])
				}
				if _, err := jpeg.Decode(bytes.NewReader(photos[i])); err != nil {
					b.Error(err)
				}
			}
			mu.Lock()
			times = append(times, mine...)
			dirty = append(dirty, d...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return times, dirty
}
