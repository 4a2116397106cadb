package face_test

import (
	"slices"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/internal/datadir"
)

// BenchmarkDetectSecondPass measures what the second pass costs: on every
// 10th of LFW's development test photos (155, colour and their grey
// copies), Detect of Detector Both with and without the second pass
// (SinglePass), alternated photo by photo in the same run so that the
// machine's load falls on both alike. It reports processor seconds per
// photo of each and their ratio, and how many photos the second pass ran
// on. Run it alone: go test ./face -run '^$' -bench DetectSecondPass -benchtime 1x
func BenchmarkDetectSecondPass(b *testing.B) {
	pf, err := dataset.ReadPairsFile(datadir.ForTest(b, "lfw", "pairsDevTest.txt"))
	if err != nil {
		b.Fatal(err)
	}
	dir := datadir.ForTest(b, "lfw", "images_deepfunneled")
	seen := map[string]bool{}
	var all []string
	for _, p := range pf.Pairs {
		for _, second := range []bool{false, true} {
			if path := p.ImagePath(dir, second); !seen[path] {
				seen[path] = true
				all = append(all, path)
			}
		}
	}
	slices.Sort(all)
	paths := eval.EveryNth(all, 10)
	md := datadir.ModelDirForTest(b)
	retry, err := face.NewPipeline(face.Options{ModelDir: md})
	if err != nil {
		b.Fatal(err)
	}
	single, err := face.NewPipeline(face.Options{ModelDir: md, SinglePass: true})
	if err != nil {
		b.Fatal(err)
	}
	var imgs []*imaging.RGB
	for _, path := range paths {
		img, _, err := imaging.DecodeFile(path, imaging.DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		imgs = append(imgs, img, img.Grey())
	}
	b.ResetTimer()
	for range b.N {
		var tSingle, tRetry time.Duration
		retried := 0
		for i, img := range imgs {
			order := []*face.Pipeline{single, retry}
			if i%2 == 1 {
				order[0], order[1] = retry, single
			}
			for _, p := range order {
				t0 := cputime.Process()
				faces, err := p.Detect(img)
				if err != nil {
					b.Fatal(err)
				}
				dt := cputime.Process() - t0
				if p == single {
					tSingle += dt
				} else {
					tRetry += dt
					if len(faces) > 0 && faces[0].Retried || len(faces) == 0 {
						retried++
					}
				}
			}
		}
		n := float64(len(imgs))
		b.ReportMetric(tSingle.Seconds()/n, "cpu-s/photo-single")
		b.ReportMetric(tRetry.Seconds()/n, "cpu-s/photo-retry")
		b.ReportMetric(tRetry.Seconds()/tSingle.Seconds(), "ratio")
		b.ReportMetric(float64(retried), "second-passes")
		b.ReportMetric(n, "photos")
	}
}
