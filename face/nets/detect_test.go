package nets

import (
	"encoding/json"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

// detUnitRef is the part of faceapi-reference/unit/sample1_unit.json the
// detector tests use.
type detUnitRef struct {
	SSDRaw struct {
		NumAnchors int       `json:"num_anchors"`
		ScoresAll  []float64 `json:"scores_all"`
		Top20      []struct {
			Anchor int        `json:"anchor"`
			Score  float64    `json:"score"`
			Box    [4]float64 `json:"box"`
		} `json:"top20"`
	} `json:"ssd_raw"`
	SSDDetections []detRef `json:"ssd_detections_on_512"`
	TinyRaw       struct {
		Shape  []int     `json:"shape"`
		Values []float64 `json:"values"`
	} `json:"tiny_raw"`
	TinyDetections []detRef `json:"tiny_detections_on_416"`
}

type detRef struct {
	Score float64 `json:"score"`
	Box   struct {
		X      float64 `json:"x"`
		Y      float64 `json:"y"`
		Width  float64 `json:"width"`
		Height float64 `json:"height"`
	} `json:"box"`
}

var (
	detUnitOnce sync.Once
	detUnitVal  detUnitRef
	detUnitErr  error
)

func detLoadUnit(t testing.TB) *detUnitRef {
	t.Helper()
	p := datadir.ForTest(t, "faceapi-reference", "unit", "sample1_unit.json")
	detUnitOnce.Do(func() {
		data, err := os.ReadFile(p)
		if err != nil {
			detUnitErr = err
			return
		}
		detUnitErr = json.Unmarshal(data, &detUnitVal)
	})
	if detUnitErr != nil {
		t.Fatalf("reading %s: %v", p, detUnitErr)
	}
	return &detUnitVal
}

func detModelDir(t testing.TB) string {
	t.Helper()
	d := DefaultModelDir()
	if _, err := os.Stat(d); err != nil {
		t.Fatalf("models not installed at %s: %v (%s)", d, err, InstallHint)
	}
	return d
}

// detCompare checks detections against a reference within tol pixels.
func detCompare(t *testing.T, got []Detection, want []detRef, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d detections %+v, want %d", len(got), got, len(want))
	}
	worst := 0.0
	defer func() { t.Logf("%d detections, max box diff %.3g px", len(got), worst) }()
	for i, w := range want {
		g := got[i]
		if math.Abs(g.Score-w.Score) > 1e-4 {
			t.Errorf("detection %d: score %v, want %v", i, g.Score, w.Score)
		}
		d := []float64{g.X - w.Box.X, g.Y - w.Box.Y, g.W - w.Box.Width, g.H - w.Box.Height}
		for _, v := range d {
			worst = math.Max(worst, math.Abs(v))
			if math.Abs(v) > tol {
				t.Errorf("detection %d: box %+v, want %+v", i, g, w.Box)
				break
			}
		}
	}
}

func TestNMS(t *testing.T) {
	d := func(x, y, w, h, s float64) Detection { return Detection{X: x, Y: y, W: w, H: h, Score: s} }
	tests := []struct {
		name string
		in   []Detection
		iou  float64
		max  int
		want []int // indices into in, in output order
	}{
		{"empty", nil, 0.5, 0, nil},
		{"single", []Detection{d(0, 0, 10, 10, 0.9)}, 0.5, 0, []int{0}},
		{"sorted by score", []Detection{d(0, 0, 10, 10, 0.6), d(20, 20, 10, 10, 0.9)}, 0.5, 0, []int{1, 0}},
		{"overlap suppressed", []Detection{d(0, 0, 10, 10, 0.8), d(1, 1, 10, 10, 0.9)}, 0.5, 0, []int{1}},
		// IoU of (0,0,10,10) and (5,0,10,10) is 50/150 = 1/3
		{"iou at threshold kept", []Detection{d(0, 0, 10, 10, 0.9), d(5, 0, 10, 10, 0.8)}, 1.0 / 3, 0, []int{0, 1}},
		{"iou above threshold", []Detection{d(0, 0, 10, 10, 0.9), d(5, 0, 10, 10, 0.8)}, 0.3, 0, []int{0}},
		{"chain: suppressed box does not suppress", []Detection{
			d(0, 0, 10, 10, 0.9), d(4, 0, 10, 10, 0.8), d(8, 0, 10, 10, 0.7)}, 0.4, 0, []int{0, 2}},
		{"max results", []Detection{d(0, 0, 1, 1, 0.5), d(10, 10, 1, 1, 0.7), d(20, 20, 1, 1, 0.6)}, 0.5, 2, []int{1, 2}},
		{"ties keep input order", []Detection{d(0, 0, 1, 1, 0.5), d(10, 10, 1, 1, 0.5)}, 0.5, 0, []int{0, 1}},
		{"zero area never suppresses", []Detection{d(0, 0, 0, 10, 0.9), d(0, 0, 10, 10, 0.8)}, 0.1, 0, []int{0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NMS(tc.in, tc.iou, tc.max)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want indices %v", got, tc.want)
			}
			for i, k := range tc.want {
				if got[i] != tc.in[k] {
					t.Fatalf("got %+v, want indices %v", got, tc.want)
				}
			}
		})
	}
	if _, err := NMS(nil, 1.5, 0); err == nil {
		t.Error("NMS accepted IoU threshold 1.5")
	}
}

func TestNMSScoreThresholdAndTieOrder(t *testing.T) {
	boxes := []detBox{{0, 0, 1, 1}, {5, 5, 6, 6}, {10, 10, 11, 11}, {20, 20, 21, 21}}
	scores := []float64{0.5, 0.7, 0.7, 0.4}
	tests := []struct {
		name       string
		min        float64
		laterFirst bool
		want       []int
	}{
		{"strictly above threshold", 0.5, false, []int{1, 2}},
		{"later first on ties", 0.5, true, []int{2, 1}},
		{"all", 0, false, []int{1, 2, 0, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := detNMS(boxes, scores, tc.min, 0.5, 0, tc.laterFirst)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestIoUSortsCorners(t *testing.T) {
	a := detBox{0, 0, 10, 10}
	b := detBox{15, 10, 5, 0} // corners swapped: same as {5,0,15,10}
	if got := detIoU(a, b); math.Abs(got-1.0/3) > 1e-12 {
		t.Fatalf("iou = %v, want 1/3", got)
	}
}
