package eval

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/vec"
	"github.com/veil-privacy/veil/metric"
)

// synthPool draws faceprint-like descriptors: each person a random centre,
// each photo the centre plus isotropic noise (spread relative to the
// centres' norm), in d dimensions.
func synthPool(rng *rand.Rand, people, photos, d int, spread float64) []LinkagePerson {
	pool := make([]LinkagePerson, people)
	for p := range pool {
		c := make([]float64, d)
		for i := range c {
			c[i] = rng.NormFloat64()
		}
		pool[p].Name = "person"
		for range photos {
			v := make([]float32, d)
			for i := range v {
				v[i] = float32(c[i] + spread*rng.NormFloat64())
			}
			pool[p].Descriptors = append(pool[p].Descriptors, v)
		}
	}
	return pool
}

// synthLibraries splits a synthetic pool into two libraries (people 0…
// shared−1 in both, photos split; the next ones alternately in A or B) and
// returns their unit descriptors and people.
func synthLibraries(t *testing.T, seed uint64, shared, only, photos, d int) (x [2][][]float64, people [2][]int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	pool := synthPool(rng, shared+2*only, photos, d, 0.35)
	for p, person := range pool {
		for k, desc := range person.Descriptors {
			u, err := unitDescriptor(desc)
			if err != nil {
				t.Fatal(err)
			}
			lib := 0
			switch {
			case p < shared:
				lib = k % 2
			case (p-shared)%2 == 1:
				lib = 1
			}
			x[lib] = append(x[lib], u)
			people[lib] = append(people[lib], p)
		}
	}
	return x, people
}

func key(b byte) [32]byte { return [32]byte{b} }

// libraries builds the two libraries under kind with the given keys and
// calibrates their thresholds.
func libraries(t *testing.T, kind LinkMetric, x [2][][]float64, people [2][]int, keys [2][32]byte) [2]LinkLibrary {
	t.Helper()
	var libs [2]LinkLibrary
	for lib := range 2 {
		f, err := libraryFaceprints(context.Background(), kind, x[lib], people[lib], keys[lib], metric.Options{Solver: metric.Solver{Workers: 2}})
		if err != nil {
			t.Fatal(err)
		}
		th, err := BalancedThreshold(f, people[lib])
		if err != nil {
			t.Fatal(err)
		}
		libs[lib] = LinkLibrary{Faceprints: f, People: people[lib], Threshold: th}
	}
	return libs
}

const (
	synthShared = 60
	synthOnly   = 20
	synthPhotos = 6
	synthDim    = 32
)

// The adversary's attacks, played against each kind of library. Where Veil
// claims protection (two libraries with their own secret keys, compared
// directly) the attack must fail: at most 2% of the shared people's faces
// linked, and the forced choice no better than 3× chance. Where no
// protection is claimed the same attack code must succeed, or the test
// would prove nothing: plain descriptors, two libraries that (wrongly)
// share a key, and an adversary who knows enough shared people to align
// the spaces.
func TestLinkageAttacks(t *testing.T) {
	x, people := synthLibraries(t, 7, synthShared, synthOnly, synthPhotos, synthDim)
	// Procrustes has d(d−1)/2 unknowns and needs about d known people;
	// least squares has d² and, from noisy centroids, needs more than d.
	known, knownLS := make([]int, synthDim), make([]int, 48)
	for i := range knownLS {
		knownLS[i] = i
	}
	copy(known, knownLS)
	cache := map[[2][32]byte]map[LinkMetric][2]LinkLibrary{}
	chance := 1 / float64(synthShared+synthOnly)
	for _, tc := range []struct {
		name    string
		kind    LinkMetric
		keys    [2][32]byte
		known   []int
		method  AlignMethod
		protect bool
	}{
		{"plain descriptors, direct", LinkIdentity, [2][32]byte{key(1), key(2)}, nil, AlignProcrustes, false},
		{"one key shared by both libraries, direct", LinkRotation, [2][32]byte{key(1), key(1)}, nil, AlignProcrustes, false},
		{"secret rotations, direct", LinkRotation, [2][32]byte{key(1), key(2)}, nil, AlignProcrustes, true},
		{"secret rotations, Procrustes on 32 known people", LinkRotation, [2][32]byte{key(1), key(2)}, known, AlignProcrustes, false},
		{"secret rotations, least squares on 48 known people", LinkRotation, [2][32]byte{key(1), key(2)}, knownLS, AlignLeastSquares, false},
		{"learned metrics, direct", LinkLMNN, [2][32]byte{key(1), key(2)}, nil, AlignProcrustes, true},
		{"learned metrics, Procrustes on 32 known people", LinkLMNN, [2][32]byte{key(1), key(2)}, known, AlignProcrustes, false},
		{"learned metrics, least squares on 48 known people", LinkLMNN, [2][32]byte{key(1), key(2)}, knownLS, AlignLeastSquares, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cache[tc.keys] == nil {
				cache[tc.keys] = map[LinkMetric][2]LinkLibrary{}
			}
			libs, ok := cache[tc.keys][tc.kind]
			if !ok {
				libs = libraries(t, tc.kind, x, people, tc.keys)
				cache[tc.keys][tc.kind] = libs
			}
			c, err := AlignAttack(libs[0], libs[1], tc.known, tc.method, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := c.Rates()
			t.Logf("%d probes: linked %.3f, wrong tag %.3f, no tag %.3f, forced choice %.3f (chance %.3f); strangers tagged %.3f; thresholds %.3f / %.3f",
				r.Probes, r.Linked, r.WrongTag, r.NoTag, r.NearestCorrect, chance, r.StrangersTagged, libs[0].Threshold, libs[1].Threshold)
			if want := (synthShared - len(tc.known)) * synthPhotos / 2; r.Probes != want {
				t.Fatalf("%d probes scored, want %d (the unknown shared people's faces in B)", r.Probes, want)
			}
			if c.Strangers != synthOnly*synthPhotos {
				t.Fatalf("%d strangers, want %d", c.Strangers, synthOnly*synthPhotos)
			}
			if tc.protect {
				if r.Linked > 0.02 || r.NearestCorrect > 3*chance {
					t.Errorf("protected libraries linked: %.3f within the threshold, %.3f by forced choice (chance %.3f)", r.Linked, r.NearestCorrect, chance)
				}
				return
			}
			if r.Linked < 0.85 {
				t.Errorf("unprotected libraries: the attack linked only %.3f, want ≥ 0.85 (a test that cannot show an attack succeeding proves nothing)", r.Linked)
			}
		})
	}
}

// Too few known people leave a 32-d rotation underdetermined: with 2
// known people neither alignment links more than a few faces (this is a
// measurement of the attack's reach, not a guarantee: real descriptors
// are far from isotropic, and bench unlink measures them).
func TestLinkageAlignmentNeedsKnownPeople(t *testing.T) {
	x, people := synthLibraries(t, 9, synthShared, synthOnly, synthPhotos, synthDim)
	libs := libraries(t, LinkRotation, x, people, [2][32]byte{key(3), key(4)})
	var prev float64
	for _, m := range []int{2, 8, 16, 32, 48} {
		known := make([]int, m)
		for i := range known {
			known[i] = i
		}
		c, err := AlignAttack(libs[0], libs[1], known, AlignProcrustes, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := c.Rates()
		t.Logf("m = %d: linked %.3f, forced choice %.3f", m, r.Linked, r.NearestCorrect)
		if m == 2 && r.Linked > 0.2 {
			t.Errorf("2 known people already link %.3f of a 32-d rotation's faces", r.Linked)
		}
		if m >= 32 && r.Linked < 0.85 {
			t.Errorf("%d known people link only %.3f", m, r.Linked)
		}
		if m >= 16 && r.Linked < prev-0.05 {
			t.Errorf("more known people linked less: %.3f after %.3f", r.Linked, prev)
		}
		prev = r.Linked
	}
}

// randomOrthogonal returns a d × d orthogonal matrix (row-major).
func randomOrthogonal(t *testing.T, seed byte, d int) []float64 {
	t.Helper()
	r, err := metric.RandomRotation(key(seed), d)
	if err != nil {
		t.Fatal(err)
	}
	return r.Matrix()
}

func apply(m []float64, out, in int, x []float64) []float64 {
	y := make([]float64, out)
	for r := range out {
		y[r] = vec.Dot(m[r*in:(r+1)*in], x)
	}
	return y
}

// Known optima: from d or more exact pairs, Procrustes recovers s·Q and
// least squares recovers any invertible map, up to rounding (and the
// small ridge for least squares).
func TestFitAlignmentRecoversMaps(t *testing.T) {
	const d = 12
	rng := rand.New(rand.NewPCG(3, 4))
	q := randomOrthogonal(t, 5, d)
	scaled := make([]float64, len(q))
	for i := range q {
		scaled[i] = 2.5 * q[i]
	}
	general := make([]float64, d*d)
	for i := range general {
		general[i] = rng.NormFloat64()
	}
	for _, tc := range []struct {
		name   string
		method AlignMethod
		m      []float64
		tol    float64
	}{
		{"Procrustes, rotation", AlignProcrustes, q, 1e-9},
		{"Procrustes, scaled rotation", AlignProcrustes, scaled, 1e-9},
		{"least squares, rotation", AlignLeastSquares, q, 1e-2},
		{"least squares, general map", AlignLeastSquares, general, 1e-2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var from, to [][]float64
			for range 3 * d {
				x := make([]float64, d)
				for i := range x {
					x[i] = rng.NormFloat64()
				}
				from = append(from, x)
				to = append(to, apply(tc.m, d, d, x))
			}
			a, err := FitAlignment(tc.method, from, to)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for i := range tc.m {
				worst = math.Max(worst, math.Abs(a.m[i]-tc.m[i]))
			}
			if worst > tc.tol {
				t.Errorf("largest entry error %.3g, want ≤ %.3g", worst, tc.tol)
			}
		})
	}
}

// LinkNearest's counts on a hand-made case: gallery faces of people 1 and
// 2 on a line; probes of person 1 (near, near the other person, nearer the
// other person but beyond the threshold), person 2, a stranger (person 9)
// and a skipped person (7).
func TestLinkNearestCounts(t *testing.T) {
	g := LinkLibrary{Faceprints: [][]float64{{0}, {10}}, People: []int{1, 2}, Threshold: 1}
	probes := [][]float64{{0.5}, {9.5}, {5.5}, {10.2}, {0.1}, {3}}
	people := []int{1, 1, 1, 2, 9, 7}
	c, err := LinkNearest(g, probes, people, 1, map[int]bool{7: true})
	if err != nil {
		t.Fatal(err)
	}
	want := LinkCounts{Probes: 4, Linked: 2, WrongTag: 1, NearestCorrect: 2, Strangers: 1, StrangersTagged: 1}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	r := c.Rates()
	if r.Linked != 0.5 || r.MisTag != 0.5 || r.WrongTag != 0.25 || r.NoTag != 0.25 || r.StrangersTagged != 1 {
		t.Errorf("rates %+v", r)
	}
}

func TestLinkWithin(t *testing.T) {
	lib := LinkLibrary{Faceprints: [][]float64{{0}, {0.5}, {10}, {10.4}, {20}}, People: []int{1, 1, 2, 2, 3}, Threshold: 0.45}
	c, err := LinkWithin(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Person 3 has one face: not scored. 0↔0.5 is beyond 0.45; 10↔10.4 within.
	want := LinkCounts{Probes: 4, Linked: 2, NearestCorrect: 4}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
}

// BalancedThreshold weighs the classes equally: one same-person pair and
// many different-person pairs must not push the threshold below the
// same-person distance.
func TestBalancedThreshold(t *testing.T) {
	f := [][]float64{{0}, {1}, {3}, {6}, {10}, {15}}
	people := []int{1, 1, 2, 3, 4, 5}
	th, err := BalancedThreshold(f, people)
	if err != nil {
		t.Fatal(err)
	}
	// Distances: same 1; different 2,3,4,5,… The best balanced split
	// accepts exactly the same pair: threshold between 1 and 2.
	if th != 1.5 {
		t.Errorf("threshold %v, want 1.5", th)
	}
	if _, err := BalancedThreshold([][]float64{{0}, {1}}, []int{1, 2}); err == nil {
		t.Error("no same-person pair: want an error")
	}
}

func TestLinkageBadInputs(t *testing.T) {
	good := LinkLibrary{Faceprints: [][]float64{{0, 1}}, People: []int{1}, Threshold: 1}
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"labels", func() error {
			_, err := LinkNearest(LinkLibrary{Faceprints: [][]float64{{0}}, People: nil}, nil, nil, 1, nil)
			return err
		}, "person labels"},
		{"dimension", func() error {
			_, err := LinkNearest(good, [][]float64{{1}}, []int{1}, 1, nil)
			return err
		}, "values"},
		{"threshold", func() error {
			_, err := LinkNearest(good, nil, nil, math.NaN(), nil)
			return err
		}, "threshold"},
		{"non-finite", func() error {
			_, err := LinkNearest(LinkLibrary{Faceprints: [][]float64{{math.Inf(1)}}, People: []int{1}}, nil, nil, 1, nil)
			return err
		}, "not finite"},
		{"method", func() error {
			_, err := FitAlignment("magic", [][]float64{{1}}, [][]float64{{1}})
			return err
		}, "unknown alignment"},
		{"unmatched", func() error {
			_, err := FitAlignment(AlignProcrustes, [][]float64{{1}}, nil)
			return err
		}, "matched"},
		{"unknown person", func() error {
			_, err := AlignAttack(good, good, []int{5}, AlignProcrustes, nil)
			return err
		}, "no face of known person"},
		{"options", func() error {
			_, err := MeasureLinkage(context.Background(), synthPool(rand.New(rand.NewPCG(1, 1)), 10, 4, 4, 0.1), LinkageOptions{Shared: 11})
			return err
		}, "shared people"},
		{"metric", func() error {
			_, err := MeasureLinkage(context.Background(), synthPool(rand.New(rand.NewPCG(1, 1)), 10, 4, 4, 0.1), LinkageOptions{Metrics: []LinkMetric{"pca"}})
			return err
		}, "unknown library metric"},
		{"known too many", func() error {
			_, err := MeasureLinkage(context.Background(), synthPool(rand.New(rand.NewPCG(1, 1)), 10, 4, 4, 0.1), LinkageOptions{Shared: 4, Known: []int{4}})
			return err
		}, "cannot give"},
		{"small pool", func() error {
			_, err := MeasureLinkage(context.Background(), synthPool(rand.New(rand.NewPCG(1, 1)), 10, 3, 4, 0.1), LinkageOptions{})
			return err
		}, "at least 4 photos"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The whole measurement on a synthetic pool: plain descriptors link, a
// library's own metric defeats the direct comparison, and the aligning
// adversary's curve climbs back to linking with enough known people.
func TestMeasureLinkage(t *testing.T) {
	pool := synthPool(rand.New(rand.NewPCG(11, 12)), 100, 6, 16, 0.35)
	rep, err := MeasureLinkage(context.Background(), pool, LinkageOptions{Shared: 60, Known: []int{2, 40}, Trials: 2, Seed: 3, Normalize: true,
		LMNN: metric.Options{Solver: metric.Solver{Workers: 2, Iterations: 60}}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Normalized || rep.PoolPeople != 100 || rep.Shared != 60 || rep.Evaluated != 20 || rep.OnlyA != 20 || rep.OnlyB != 20 || rep.FacesA != 60*3+20*6 {
		t.Fatalf("report sizes %+v", rep)
	}
	if len(rep.Metrics) != 3 {
		t.Fatalf("%d metrics reported", len(rep.Metrics))
	}
	for _, m := range rep.Metrics {
		t.Logf("%s: within %.3f, direct %.3f (forced %.3f, chance %.3f), thresholds %.3f/%.3f, aligned %+v", m.Metric, m.Within.Linked,
			m.Direct.Linked, m.Direct.NearestCorrect, m.ChanceNearest, m.ThresholdA, m.ThresholdB, m.Aligned)
		if m.Direct.Probes != 2*20*3 {
			t.Errorf("%s: %d probes, want %d (20 evaluated people × 3 photos × 2 trials)", m.Metric, m.Direct.Probes, 2*20*3)
		}
		if len(m.Aligned) != 4 {
			t.Fatalf("%s: %d curve points, want 4", m.Metric, len(m.Aligned))
		}
		for _, p := range m.Aligned {
			if p.Probes != m.Direct.Probes {
				t.Errorf("%s %s m=%d scored %d faces, the direct comparison %d: the curve must score the same faces", m.Metric, p.Method, p.Known, p.Probes, m.Direct.Probes)
			}
		}
		if m.Within.Linked < 0.85 {
			t.Errorf("%s: library tags its own faces at %.3f", m.Metric, m.Within.Linked)
		}
		last := m.Aligned[1] // Procrustes, 40 known
		switch m.Metric {
		case LinkIdentity:
			if m.Direct.Linked < 0.85 {
				t.Errorf("plain descriptors linked directly at only %.3f", m.Direct.Linked)
			}
		default:
			if m.Direct.Linked > 0.02 {
				t.Errorf("%s: direct comparison linked %.3f", m.Metric, m.Direct.Linked)
			}
			if last.Linked < 0.85 {
				t.Errorf("%s: 40 known people let Procrustes link only %.3f", m.Metric, last.Linked)
			}
		}
	}
}
