package nets

import (
	"errors"
	"math"
	"slices"
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
	agOnce.Do(func() { agNet, agErr = NewAgeGenderOn(DefaultModelDir(), nil) })
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
	if _, err := NewAgeGenderOn(dir, nil); !errors.Is(err, ErrModelMissing) {
		t.Errorf("NewAgeGenderOn on empty dir: %v", err)
	}
	if _, err := NewLandmarker(dir, false, nil); !errors.Is(err, ErrModelMissing) {
		t.Errorf("NewLandmarker on empty dir: %v", err)
	}
	if in, _ := LandmarkInput(nil); in != nil {
		t.Error("LandmarkInput(nil) is not nil")
	}
	if AgeGenderInput(&imaging.RGB{}) != nil || DescriptorInput(nil) != nil {
		t.Error("empty crops must give nil inputs")
	}
}

// TestAgeGenderFeaturesFeedTheHeads checks that Features returns the heads'
// input: the age head applied by hand to the features gives Compute's age,
// and the gender logits give its probabilities.
func TestAgeGenderFeaturesFeedTheHeads(t *testing.T) {
	a := testAgeGender(t)
	in := loadFaRGB(t, "sample1_face0_landmark_input_112.rgb", AgeGenderSize)
	res, err := a.Compute([]*imaging.Float{in, in})
	if err != nil {
		t.Fatal(err)
	}
	feats, err := a.Features([]*imaging.Float{in, in})
	if err != nil {
		t.Fatal(err)
	}
	if len(feats) != 2 || len(feats[0]) != AgeGenderFeatures {
		t.Fatalf("got %d vectors of %d values, want 2 of %d", len(feats), len(feats[0]), AgeGenderFeatures)
	}
	f := feats[0]
	age, l0, l1 := float64(a.w.ageB.F32[0]), float64(a.w.gendB.F32[0]), float64(a.w.gendB.F32[1])
	positive := 0
	for i, v := range f {
		if v < 0 || math.IsNaN(float64(v)) {
			t.Fatalf("feature %d = %g: pooled ReLU outputs cannot be negative", i, v)
		}
		if v > 0 {
			positive++
		}
		if feats[1][i] != v {
			t.Fatalf("feature %d differs between two copies of one input: %g, %g", i, v, feats[1][i])
		}
		age += float64(v) * float64(a.w.ageW.F32[i])
		l0 += float64(v) * float64(a.w.gendW.F32[2*i])
		l1 += float64(v) * float64(a.w.gendW.F32[2*i+1])
	}
	if positive < AgeGenderFeatures/10 {
		t.Errorf("only %d of %d features are positive", positive, AgeGenderFeatures)
	}
	male := 1 / (1 + math.Exp(l1-l0))
	if d := math.Abs(age - float64(res[0].Age)); d > 1e-3 {
		t.Errorf("age from features %g, Compute %g", age, res[0].Age)
	}
	if d := math.Abs(male - float64(res[0].MaleProb)); d > 1e-5 {
		t.Errorf("P(male) from features %g, Compute %g", male, res[0].MaleProb)
	}
	if _, err := a.Features([]*imaging.Float{nil}); !errors.Is(err, ErrInput) {
		t.Errorf("Features(nil input) error %v, want ErrInput", err)
	}
}

func TestRegionPool(t *testing.T) {
	// One 3×3 map with one channel holding 0…8: the quadrants are rows and
	// columns [0,2) and [1,3).
	m := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8}
	got := regionPool(m, 1, 3, 1)
	want := []float32{2, 3, 5, 6}
	if !slices.Equal(got, want) {
		t.Errorf("regionPool(0…8) = %v, want %v", got, want)
	}
	// Two maps, two channels: the second map's channels are the first's
	// scaled by 10 and 100, and each map is pooled on its own.
	m2 := make([]float32, 2*9*2)
	for i := range 9 {
		m2[2*i], m2[2*i+1] = float32(i), float32(-i)
		m2[18+2*i], m2[18+2*i+1] = 10*float32(i), 100*float32(i)
	}
	got = regionPool(m2, 2, 3, 2)
	want = []float32{2, -2, 3, -3, 5, -5, 6, -6, 20, 200, 30, 300, 50, 500, 60, 600}
	if !slices.Equal(got, want) {
		t.Errorf("regionPool of two 2-channel maps = %v, want %v", got, want)
	}
}

// TestAgeGenderRegionFeatures checks both feature vectors against the
// last feature map itself: Features is its mean, RegionFeatures the means
// of its four overlapping 4×4 quadrants.
func TestAgeGenderRegionFeatures(t *testing.T) {
	a := testAgeGender(t)
	in := loadFaRGB(t, "sample1_face0_landmark_input_112.rgb", AgeGenderSize)
	k, err := newAgeGenderKern(a.w, newKernPar(nil))
	if err != nil {
		t.Fatal(err)
	}
	ws := k.pool.get(1)
	m, err := k.featureMap(ws, in.Pix, 1)
	if err != nil {
		t.Fatal(err)
	}
	m = slices.Clone(m)
	k.pool.put(ws)
	const c = AgeGenderFeatures
	if len(m) != 49*c {
		t.Fatalf("feature map has %d values, want %d", len(m), 49*c)
	}
	mean := func(y0, x0, side, j int) float64 {
		var s float64
		for y := y0; y < y0+side; y++ {
			for x := x0; x < x0+side; x++ {
				s += float64(m[(y*7+x)*c+j])
			}
		}
		return s / float64(side*side)
	}
	feat, err := a.Features([]*imaging.Float{in})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := a.RegionFeatures([]*imaging.Float{in, in})
	if err != nil {
		t.Fatal(err)
	}
	if len(reg) != 2 || len(reg[0]) != AgeGenderRegionFeatures || !slices.Equal(reg[0], reg[1]) {
		t.Fatalf("got %d region vectors of %d values (equal: %v), want 2 equal ones of %d", len(reg), len(reg[0]), slices.Equal(reg[0], reg[1]), AgeGenderRegionFeatures)
	}
	for j := range c {
		if d := math.Abs(float64(feat[0][j]) - mean(0, 0, 7, j)); d > 1e-4 {
			t.Fatalf("feature %d = %g, map mean %g", j, feat[0][j], mean(0, 0, 7, j))
		}
		for q, o := range [4][2]int{{0, 0}, {0, 3}, {3, 0}, {3, 3}} {
			if d := math.Abs(float64(reg[0][q*c+j]) - mean(o[0], o[1], 4, j)); d > 1e-4 {
				t.Fatalf("region %d feature %d = %g, quadrant mean %g", q, j, reg[0][q*c+j], mean(o[0], o[1], 4, j))
			}
		}
	}
}
