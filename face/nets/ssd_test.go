package nets

import (
	"math"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/imaging"
)

var (
	ssdOnce sync.Once
	ssdNet  *SSD
	ssdErr  error
)

func loadSSD(t testing.TB) *SSD {
	t.Helper()
	dir := detModelDir(t)
	ssdOnce.Do(func() { ssdNet, ssdErr = NewSSD(dir, nil) })
	if ssdErr != nil {
		t.Fatal(ssdErr)
	}
	return ssdNet
}

func TestSSDRawMatchesReference(t *testing.T) {
	ref := detLoadUnit(t)
	net := loadSSD(t)
	scores, boxes, err := net.Raw(loadFaRGB(t, "sample1_ssd_input_512.rgb", 512))
	if err != nil {
		t.Fatal(err)
	}
	if len(scores) != SSDAnchors || len(ref.SSDRaw.ScoresAll) != SSDAnchors || len(boxes) != SSDAnchors {
		t.Fatalf("got %d scores and %d boxes, reference %d scores; want %d", len(scores), len(boxes), len(ref.SSDRaw.ScoresAll), SSDAnchors)
	}
	worst := 0.0
	for i, w := range ref.SSDRaw.ScoresAll {
		worst = math.Max(worst, math.Abs(float64(scores[i])-w))
	}
	t.Logf("SSD scores: max abs diff %.3g", worst)
	if worst > 1e-4 {
		t.Fatalf("SSD scores differ from reference by %g", worst)
	}
	if len(ref.SSDRaw.Top20) != 20 {
		t.Fatalf("reference has %d top boxes", len(ref.SSDRaw.Top20))
	}
	worst = 0
	for _, top := range ref.SSDRaw.Top20 {
		if math.Abs(float64(scores[top.Anchor])-top.Score) > 1e-4 {
			t.Errorf("anchor %d: score %v, want %v", top.Anchor, scores[top.Anchor], top.Score)
		}
		for j := range 4 {
			worst = math.Max(worst, math.Abs(float64(boxes[top.Anchor][j])-top.Box[j]))
		}
	}
	t.Logf("SSD top-20 boxes: max abs diff %.3g (relative to the input)", worst)
	if worst > 1e-4 {
		t.Fatalf("SSD top-20 boxes differ from reference by %g", worst)
	}
}

func TestSSDDetectionsOn512MatchReference(t *testing.T) {
	ref := detLoadUnit(t)
	net := loadSSD(t)
	scores, boxes, err := net.Raw(loadFaRGB(t, "sample1_ssd_input_512.rgb", 512))
	if err != nil {
		t.Fatal(err)
	}
	opt, err := SSDOptions{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	got := ssdSelect(scores, boxes, opt, 512, 512, 512, 512)
	detCompare(t, got, ref.SSDDetections, 0.5)
}

func TestSSDOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		opt  SSDOptions
		ok   bool
	}{
		{"defaults", SSDOptions{}, true},
		{"custom", SSDOptions{MinScore: 0.3, MaxResults: 5, IoU: 0.3}, true},
		{"score 1", SSDOptions{MinScore: 1}, false},
		{"negative score", SSDOptions{MinScore: -0.5}, false},
		{"negative max", SSDOptions{MaxResults: -1}, false},
		{"iou above 1", SSDOptions{IoU: 2}, false},
		{"NaN iou", SSDOptions{IoU: math.NaN()}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.opt.withDefaults()
			if (err == nil) != tc.ok {
				t.Fatalf("withDefaults(%+v) error = %v, want ok=%v", tc.opt, err, tc.ok)
			}
		})
	}
}

func TestSSDRejectsBadInput(t *testing.T) {
	net := loadSSD(t)
	if _, _, err := net.Raw(nil); err == nil {
		t.Error("Raw(nil) succeeded")
	}
	if _, _, err := net.Raw(constFloat(416, 0)); err == nil {
		t.Error("Raw on 416x416 succeeded")
	}
	if _, err := net.Detect(nil, SSDOptions{}); err == nil {
		t.Error("Detect(nil) succeeded")
	}
	if _, err := net.Detect(nil, SSDOptions{MinScore: 2}); err == nil {
		t.Error("Detect with MinScore 2 succeeded")
	}
}

func TestSSDConcurrentRunsAgree(t *testing.T) {
	net := loadSSD(t)
	in := loadFaRGB(t, "sample1_ssd_input_512.rgb", 512)
	var wg sync.WaitGroup
	res := make([][]float32, 2)
	errs := make([]error, 2)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], _, errs[i] = net.Raw(in)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range res[0] {
		if res[0][i] != res[1][i] {
			t.Fatalf("score %d differs between goroutines: %v vs %v", i, res[0][i], res[1][i])
		}
	}
}

func TestDetectorsHandleOddImageSizes(t *testing.T) {
	ssd, tiny := loadSSD(t), loadTiny(t)
	for _, sz := range [][2]int{{1, 1}, {3, 700}, {700, 3}, {512, 512}, {416, 416}} {
		img := imaging.NewRGB(sz[0], sz[1])
		for i := range img.Pix {
			img.Pix[i] = uint8(i * 7)
		}
		if _, err := ssd.Detect(img, SSDOptions{}); err != nil {
			t.Errorf("SSD on %dx%d: %v", sz[0], sz[1], err)
		}
		if _, err := tiny.Detect(img, TinyOptions{InputSize: 160}); err != nil {
			t.Errorf("tiny on %dx%d: %v", sz[0], sz[1], err)
		}
	}
}
