package nets

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/veil-privacy/veil/imaging"
)

var (
	agOnce sync.Once
	agNet  *AgeGender
	agErr  error
)

func testAgeGender(t testing.TB) *AgeGender {
	t.Helper()
	agOnce.Do(func() { agNet, agErr = NewAgeGender(DefaultModelDir()) })
	if agErr != nil {
		t.Fatal(agErr)
	}
	return agNet
}

func TestAgeGenderMatchesFaceAPI(t *testing.T) {
	u := loadFaRef(t)
	a := testAgeGender(t)
	in := loadFaRGB(t, "sample1_face0_landmark_input_112.rgb", AgeGenderSize)
	got, err := a.Compute([]*imaging.Float{in})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(u.AgeGender.Age) != 1 || len(u.AgeGender.Gender) != 2 {
		t.Fatalf("got %d results; reference %v", len(got), u.AgeGender)
	}
	r := got[0]
	checks := []struct {
		name      string
		got, want float64
		tol       float64
	}{
		{"age", float64(r.Age), u.AgeGender.Age[0], 1e-3},
		{"P(male)", float64(r.MaleProb), u.AgeGender.Gender[0], 1e-4},
		{"P(female)", float64(r.FemaleProb), u.AgeGender.Gender[1], 1e-4},
	}
	for _, c := range checks {
		if d := math.Abs(c.got - c.want); d > c.tol {
			t.Errorf("%s = %g, want %g (±%g)", c.name, c.got, c.want, c.tol)
		} else {
			t.Logf("%s = %g (face-api %g, diff %.2g)", c.name, c.got, c.want, d)
		}
	}
	if g, p := r.Gender(); g != "female" || math.Abs(float64(p)-u.AgeGender.Gender[1]) > 1e-4 {
		t.Errorf("Gender() = %s %g, want female %g", g, p, u.AgeGender.Gender[1])
	}
}

func TestAgeGenderBatchAndConcurrency(t *testing.T) {
	a := testAgeGender(t)
	in := loadFaRGB(t, "sample1_face0_landmark_input_112.rgb", AgeGenderSize)
	dark := &imaging.Float{W: 112, H: 112, C: 3, Pix: make([]float32, len(in.Pix))}
	for i, v := range in.Pix {
		dark.Pix[i] = v * 0.5
	}
	inputs := []*imaging.Float{in, dark, faConst(112, 200)}
	flat := func(rs []AgeGenderResult) [][]float32 {
		var out [][]float32
		for _, r := range rs {
			out = append(out, []float32{r.Age, r.MaleProb, r.FemaleProb})
		}
		return out
	}
	var single []AgeGenderResult
	for _, x := range inputs {
		r, err := a.Compute([]*imaging.Float{x})
		if err != nil {
			t.Fatal(err)
		}
		single = append(single, r[0])
	}
	batch, err := a.Compute(inputs)
	if err != nil {
		t.Fatal(err)
	}
	faSame(t, "batch vs single", flat(batch), flat(single), 1e-5)
	var wg sync.WaitGroup
	res := make([][]AgeGenderResult, 2)
	errs := make([]error, 2)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[g], errs[g] = a.Compute(inputs)
		}()
	}
	wg.Wait()
	for g := range 2 {
		if errs[g] != nil {
			t.Fatal(errs[g])
		}
		faSame(t, "concurrent", flat(res[g]), flat(single), 1e-5)
	}
	for _, r := range single {
		if s := r.MaleProb + r.FemaleProb; math.Abs(float64(s)-1) > 1e-5 {
			t.Errorf("probabilities sum to %g", s)
		}
	}
}

func TestLandmarkAndAgeGenderErrors(t *testing.T) {
	a := testAgeGender(t)
	l := testLandmarker(t, true)
	bad := []*imaging.Float{nil, faConst(150, 1), {W: 112, H: 112, C: 3, Pix: make([]float32, 5)}}
	for i, in := range bad {
		if _, err := a.Compute([]*imaging.Float{in}); !errors.Is(err, ErrInput) {
			t.Errorf("age/gender bad input %d: err = %v, want ErrInput", i, err)
		}
		if _, err := l.Compute([]*imaging.Float{in}); !errors.Is(err, ErrInput) {
			t.Errorf("landmarks bad input %d: err = %v, want ErrInput", i, err)
		}
	}
	dir := t.TempDir()
	if _, err := NewAgeGender(dir); !errors.Is(err, ErrModelMissing) {
		t.Errorf("NewAgeGender on empty dir: %v", err)
	}
	if _, err := NewLandmarker(dir, false); !errors.Is(err, ErrModelMissing) {
		t.Errorf("NewLandmarker on empty dir: %v", err)
	}
	if in, _ := LandmarkInput(nil); in != nil {
		t.Error("LandmarkInput(nil) is not nil")
	}
	if AgeGenderInput(&imaging.RGB{}) != nil || DescriptorInput(nil) != nil {
		t.Error("empty crops must give nil inputs")
	}
}
