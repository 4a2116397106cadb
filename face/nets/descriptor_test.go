package nets

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// faRef is the part of faceapi-reference/unit/sample1_unit.json these
// tests use.
type faRef struct {
	Landmark68Raw     []float64 `json:"landmark68_raw"`
	Landmark68TinyRaw []float64 `json:"landmark68tiny_raw"`
	AgeGender         struct {
		Age    []float64 `json:"age"`
		Gender []float64 `json:"gender_softmax"`
	} `json:"age_gender_on_landmark_input"`
	Descriptor       []float64             `json:"recognition_descriptor"`
	DescriptorGrey   []float64             `json:"recognition_descriptor_grey128"`
	LandmarkInput    struct{ Shape []int } `json:"landmark_input"`
	RecognitionInput struct{ Shape []int } `json:"recognition_input"`
}

func loadFaRef(t testing.TB) *faRef {
	t.Helper()
	data, err := os.ReadFile(datadir.ForTest(t, "faceapi-reference", "unit", "sample1_unit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var u faRef
	if err := json.Unmarshal(data, &u); err != nil {
		t.Fatal(err)
	}
	return &u
}

// loadFaRGB reads an exact-size uint8 RGB input as a 0..255 float image.
func loadFaRGB(t testing.TB, name string, size int) *imaging.Float {
	t.Helper()
	data, err := os.ReadFile(datadir.ForTest(t, "faceapi-reference", "unit", name))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != size*size*3 {
		t.Fatalf("%s has %d bytes, want %d", name, len(data), size*size*3)
	}
	f := &imaging.Float{W: size, H: size, C: 3, Pix: make([]float32, len(data))}
	for i, b := range data {
		f.Pix[i] = float32(b)
	}
	return f
}

func faConst(size int, v float32) *imaging.Float {
	f := &imaging.Float{W: size, H: size, C: 3, Pix: make([]float32, size*size*3)}
	for i := range f.Pix {
		f.Pix[i] = v
	}
	return f
}

func faL2(a []float32, b []float64) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - b[i]
		s += d * d
	}
	return math.Sqrt(s)
}

var (
	descOnce sync.Once
	descNet  *Descriptor
	descErr  error
)

// testDescriptor loads the descriptor once per test binary.
func testDescriptor(t testing.TB) *Descriptor {
	t.Helper()
	descOnce.Do(func() { descNet, descErr = NewDescriptor(DefaultModelDir(), nil) })
	if descErr != nil {
		t.Fatal(descErr)
	}
	return descNet
}

func TestDescriptorMatchesFaceAPI(t *testing.T) {
	u := loadFaRef(t)
	d := testDescriptor(t)
	face := loadFaRGB(t, "sample1_face0_recognition_input_150.rgb", 150)
	grey := faConst(150, 128)
	tests := []struct {
		name string
		in   *imaging.Float
		want []float64
	}{
		{"sample1 face0", face, u.Descriptor},
		{"constant 128", grey, u.DescriptorGrey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Compute([]*imaging.Float{tc.in})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || len(got[0]) != DescriptorDim || len(tc.want) != DescriptorDim {
				t.Fatalf("got %d descriptors of %d, reference has %d values", len(got), len(got[0]), len(tc.want))
			}
			if e := faL2(got[0], tc.want); e > 1e-4 {
				t.Errorf("L2 distance to face-api's descriptor = %g, want ≤ 1e-4", e)
			} else {
				t.Logf("L2 distance to face-api's descriptor = %.3g", e)
			}
		})
	}
}

func TestDescriptorBatchAndConcurrency(t *testing.T) {
	d := testDescriptor(t)
	face := loadFaRGB(t, "sample1_face0_recognition_input_150.rgb", 150)
	// Distinct inputs: the face, its mirror, a grey and a darker face.
	mirror := &imaging.Float{W: 150, H: 150, C: 3, Pix: make([]float32, len(face.Pix))}
	dark := &imaging.Float{W: 150, H: 150, C: 3, Pix: make([]float32, len(face.Pix))}
	for y := 0; y < 150; y++ {
		for x := 0; x < 150; x++ {
			for c := 0; c < 3; c++ {
				mirror.Pix[(y*150+x)*3+c] = face.Pix[(y*150+149-x)*3+c]
				dark.Pix[(y*150+x)*3+c] = face.Pix[(y*150+x)*3+c] * 0.6
			}
		}
	}
	inputs := []*imaging.Float{face, mirror, faConst(150, 128), dark, face}
	var single [][]float32
	for _, in := range inputs {
		r, err := d.Compute([]*imaging.Float{in})
		if err != nil {
			t.Fatal(err)
		}
		single = append(single, r[0])
	}
	batch, err := d.Compute(inputs)
	if err != nil {
		t.Fatal(err)
	}
	faSame(t, "batch vs single", batch, single, 1e-5)
	// Two goroutines at once.
	var wg sync.WaitGroup
	res := make([][][]float32, 2)
	errs := make([]error, 2)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[g], errs[g] = d.Compute(inputs[:3])
		}()
	}
	wg.Wait()
	for g := range 2 {
		if errs[g] != nil {
			t.Fatal(errs[g])
		}
		faSame(t, "concurrent", res[g], single[:3], 1e-5)
	}
	if faL2(single[0], faF64(single[1])) < 1e-3 {
		t.Error("face and its mirror gave the same descriptor: inputs are not reaching the network")
	}
}

func faF64(a []float32) []float64 {
	out := make([]float64, len(a))
	for i, v := range a {
		out[i] = float64(v)
	}
	return out
}

// faSame compares two lists of vectors element-wise.
func faSame(t *testing.T, what string, got, want [][]float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: result %d has %d values, want %d", what, i, len(got[i]), len(want[i]))
		}
		for j := range got[i] {
			if math.Abs(float64(got[i][j]-want[i][j])) > tol {
				t.Fatalf("%s: result %d value %d = %g, want %g", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

func TestDescriptorErrors(t *testing.T) {
	d := testDescriptor(t)
	tests := []struct {
		name string
		in   *imaging.Float
	}{
		{"nil", nil},
		{"wrong size", faConst(112, 1)},
		{"short pixels", &imaging.Float{W: 150, H: 150, C: 3, Pix: make([]float32, 10)}},
		{"one channel", &imaging.Float{W: 150, H: 150, C: 1, Pix: make([]float32, 150*150)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Compute([]*imaging.Float{faConst(150, 1), tc.in})
			if !errors.Is(err, ErrInput) {
				t.Fatalf("err = %v, want ErrInput", err)
			}
		})
	}
	if out, err := d.Compute(nil); err != nil || len(out) != 0 {
		t.Fatalf("empty input: %v, %v", out, err)
	}
	if _, err := NewDescriptor(t.TempDir(), nil); !errors.Is(err, ErrModelMissing) {
		t.Fatalf("missing model: err = %v, want ErrModelMissing", err)
	}
}
