package nets

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/imaging"
)

var (
	tinyOnce sync.Once
	tinyNet  *Tiny
	tinyErr  error
)

func loadTiny(t testing.TB) *Tiny {
	t.Helper()
	dir := detModelDir(t)
	tinyOnce.Do(func() { tinyNet, tinyErr = NewTiny(dir, nil) })
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyNet
}

func TestTinyRawMatchesReference(t *testing.T) {
	ref := detLoadUnit(t)
	net := loadTiny(t)
	in := loadFaRGB(t, "sample1_tiny_input_416.rgb", 416)
	got, err := net.Raw(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 13, 13, 25}; len(ref.TinyRaw.Shape) != 4 || ref.TinyRaw.Shape[1] != want[1] || ref.TinyRaw.Shape[3] != want[3] {
		t.Fatalf("reference shape %v, want %v", ref.TinyRaw.Shape, want)
	}
	if len(got) != len(ref.TinyRaw.Values) {
		t.Fatalf("got %d values, want %d", len(got), len(ref.TinyRaw.Values))
	}
	worst := 0.0
	for i, w := range ref.TinyRaw.Values {
		worst = math.Max(worst, math.Abs(float64(got[i])-w))
	}
	t.Logf("tiny grid: max abs diff %.3g", worst)
	if worst > 1e-4 {
		t.Fatalf("tiny grid differs from reference by %g", worst)
	}
}

func TestTinyDetectionsOn416MatchReference(t *testing.T) {
	ref := detLoadUnit(t)
	net := loadTiny(t)
	grid, err := net.Raw(loadFaRGB(t, "sample1_tiny_input_416.rgb", 416))
	if err != nil {
		t.Fatal(err)
	}
	opt, err := TinyOptions{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	got := tinyDecode(grid, opt, 416, 416, 416, 416)
	detCompare(t, got, ref.TinyDetections, 0.5)
}

func TestTinyOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		opt  TinyOptions
		ok   bool
	}{
		{"defaults", TinyOptions{}, true},
		{"320", TinyOptions{InputSize: 320}, true},
		{"not multiple of 32", TinyOptions{InputSize: 400}, false},
		{"negative size", TinyOptions{InputSize: -32}, false},
		{"threshold 1", TinyOptions{ScoreThreshold: 1}, false},
		{"negative threshold", TinyOptions{ScoreThreshold: -0.1}, false},
		{"iou above 1", TinyOptions{IoU: 1.5}, false},
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

func TestTinyRejectsBadInput(t *testing.T) {
	net := loadTiny(t)
	if _, err := net.Raw(nil); err == nil {
		t.Error("Raw(nil) succeeded")
	}
	if _, err := net.Raw(constFloat(100, 0)); err == nil {
		t.Error("Raw on 100x100 succeeded")
	}
	if _, err := net.Detect(nil, TinyOptions{}); err == nil {
		t.Error("Detect(nil) succeeded")
	}
	if _, err := net.Detect(&imaging.RGB{W: 4, H: 4, Pix: make([]uint8, 5)}, TinyOptions{}); err == nil {
		t.Error("Detect on a malformed image succeeded")
	}
}

func TestTinyConcurrentRunsAgree(t *testing.T) {
	net := loadTiny(t)
	in := loadFaRGB(t, "sample1_tiny_input_416.rgb", 416)
	var wg sync.WaitGroup
	res := make([][]float32, 2)
	errs := make([]error, 2)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = net.Raw(in)
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
			t.Fatalf("value %d differs between goroutines: %v vs %v", i, res[0][i], res[1][i])
		}
	}
}

func TestMissingModelIsReported(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewTiny(dir, nil); !errors.Is(err, ErrModelMissing) {
		t.Errorf("NewTiny on an empty folder: %v, want ErrModelMissing", err)
	}
	if _, err := NewSSD(dir, nil); !errors.Is(err, ErrModelMissing) {
		t.Errorf("NewSSD on an empty folder: %v, want ErrModelMissing", err)
	}
}

// constFloat is a size×size×3 image filled with v.
func constFloat(size int, v float32) *imaging.Float {
	f := &imaging.Float{W: size, H: size, C: 3, Pix: make([]float32, size*size*3)}
	for i := range f.Pix {
		f.Pix[i] = v
	}
	return f
}
