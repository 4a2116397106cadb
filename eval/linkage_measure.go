package eval

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/veil-privacy/veil/metric"
)

// LinkMetric is the map a simulated library stores its faceprints under.
type LinkMetric string

const (
	// LinkIdentity stores plain (unit-normalised) descriptors: no
	// per-library metric, the baseline an adversary links at will.
	LinkIdentity LinkMetric = "identity"
	// LinkRotation stores R·x for the library's secret random rotation R
	// (metric.RandomRotation of its key) and learns nothing.
	LinkRotation LinkMetric = "rotation"
	// LinkLMNN stores V·x for V learned by LMNN from the library's names,
	// starting from its secret rotation: what a Veil library does.
	LinkLMNN LinkMetric = "lmnn"
)

// LinkagePerson is one person of the pool the two libraries are drawn from,
// with the descriptors of their photos.
type LinkagePerson struct {
	Name        string
	Descriptors [][]float32
}

// withPhotos returns, in order, the people of pool with at least n photos.
func withPhotos(pool []LinkagePerson, n int) []LinkagePerson {
	var out []LinkagePerson
	for _, p := range pool {
		if len(p.Descriptors) >= n {
			out = append(out, p)
		}
	}
	return out
}

// minLinkImages is the fewest photos a person of the pool needs: a shared
// person gives each library at least two (LMNN needs two named faces of a
// person to learn from them, and a library can only tag a person whose
// other face it holds).
const minLinkImages = 4

// LinkageOptions configure MeasureLinkage. Zero fields take their defaults.
type LinkageOptions struct {
	// Shared is the number of people in both libraries (default: half of
	// the eligible pool). The others are split evenly between the two
	// libraries as people only one of them has.
	Shared int
	// Known are the numbers m of shared people the aligning adversary
	// knows (default 1, 2, 5, 10, 20, 50, 100, 128, 200, those that leave
	// Evaluated people). 0 is the direct comparison and always measured.
	Known []int
	// Evaluated is the number of shared people never known to the
	// adversary on whom every figure is scored (default: Shared minus the
	// largest m).
	Evaluated int
	// MaxImages caps a person's photos (default 16); a shared person's
	// photos are split between the libraries, the first half (rounded up)
	// to library A: different photos of the same person, as two users
	// would have.
	MaxImages int
	// Trials repeats the experiment with other people, photos and keys
	// (default 1); counts are pooled over trials.
	Trials int
	// Seed makes the draw of people and photos and the libraries' keys
	// reproducible. The keys are derived from it by SHA-256 so that a
	// measurement can be repeated; the attack code never sees them.
	Seed uint64
	// Metrics to measure (default identity, rotation, lmnn).
	Metrics []LinkMetric
	// Methods of the aligning adversary (default Procrustes and least
	// squares).
	Methods []AlignMethod
	// LMNN configures the libraries' metric learning (metric defaults).
	LMNN metric.Options
	// ThresholdFaces caps the faces whose pairs calibrate a library's
	// threshold (default 1500, drawn at random), to bound memory.
	ThresholdFaces int
	// Normalize scales every descriptor to unit length first, as Irene
	// does (ψ̂ = ψ/‖ψ‖); by default descriptors are used as the library
	// stores them (its faceprints are V·x for the pipeline's descriptor x).
	Normalize bool
	// Progress, if set, receives one line per finished step.
	Progress func(string)
}

// LinkageReport is what MeasureLinkage measured.
type LinkageReport struct {
	PoolPeople int `json:"pool_people"`
	Shared     int `json:"shared_people"`
	OnlyA      int `json:"only_a_people"`
	OnlyB      int `json:"only_b_people"`
	Evaluated  int `json:"evaluated_people"`
	// FacesA and FacesB are the libraries' sizes (first trial).
	FacesA int    `json:"faces_a"`
	FacesB int    `json:"faces_b"`
	Trials int    `json:"trials"`
	Seed   uint64 `json:"seed"`
	// Normalized says whether descriptors were scaled to unit length.
	Normalized bool `json:"normalized"`
	// Protocol says in words what was measured.
	Protocol string                `json:"protocol"`
	Metrics  []LinkageMetricReport `json:"metrics"`
}

// LinkageMetricReport is one library metric's figures, pooled over trials.
type LinkageMetricReport struct {
	Metric LinkMetric `json:"metric"`
	// ThresholdA and ThresholdB are the libraries' own tagging thresholds
	// (mean over trials); the adversary tags with library A's.
	ThresholdA float64 `json:"threshold_a"`
	ThresholdB float64 `json:"threshold_b"`
	// Within is library A tagging its own faces of the evaluated people
	// (leave-one-out): what the adversary would like to reach.
	Within LinkRates `json:"within_library"`
	// Direct is B's faces of the evaluated people tagged against A's by
	// nearest neighbour with A's threshold (Irene's experiment).
	Direct LinkRates `json:"direct"`
	// ChanceNearest is the forced-choice rate of a random guess (one over
	// the number of people in A).
	ChanceNearest float64 `json:"chance_nearest"`
	// Aligned is the aligning adversary's curve over m.
	Aligned []LinkagePoint `json:"aligned"`
	// LearnSeconds is the time spent learning both libraries' metrics
	// (all trials).
	LearnSeconds float64 `json:"learn_s,omitempty"`
}

// LinkagePoint is the aligning adversary's result with Known shared people.
type LinkagePoint struct {
	Method AlignMethod `json:"method"`
	Known  int         `json:"known"`
	LinkRates
}

func (o *LinkageOptions) withDefaults(pool int) error {
	if o.Shared < 0 || o.Evaluated < 0 || o.MaxImages < 0 || o.Trials < 0 || o.ThresholdFaces < 0 {
		return errors.New("eval: linkage sizes must not be negative")
	}
	if o.Shared == 0 {
		o.Shared = pool / 2
	}
	if o.Shared > pool {
		return fmt.Errorf("eval: %d shared people asked, the pool has %d people with at least %d photos", o.Shared, pool, minLinkImages)
	}
	if o.MaxImages == 0 {
		o.MaxImages = 16
	}
	if o.MaxImages < minLinkImages {
		return fmt.Errorf("eval: at most %d photos per person is too few (at least %d)", o.MaxImages, minLinkImages)
	}
	if o.Trials == 0 {
		o.Trials = 1
	}
	if o.ThresholdFaces == 0 {
		o.ThresholdFaces = 1500
	}
	if o.Known == nil {
		evaluated := o.Evaluated
		if evaluated == 0 {
			evaluated = max(o.Shared/3, 1)
		}
		for _, m := range []int{1, 2, 5, 10, 20, 50, 100, 128, 200} {
			if m+evaluated <= o.Shared {
				o.Known = append(o.Known, m)
			}
		}
	}
	maxKnown := 0
	for _, m := range o.Known {
		if m < 0 {
			return fmt.Errorf("eval: %d known people", m)
		}
		maxKnown = max(maxKnown, m)
	}
	if o.Evaluated == 0 {
		o.Evaluated = o.Shared - maxKnown
	}
	if o.Evaluated < 1 || o.Evaluated+maxKnown > o.Shared {
		return fmt.Errorf("eval: %d shared people cannot give %d known and %d evaluated people", o.Shared, maxKnown, o.Evaluated)
	}
	if o.Metrics == nil {
		o.Metrics = []LinkMetric{LinkIdentity, LinkRotation, LinkLMNN}
	}
	for _, m := range o.Metrics {
		switch m {
		case LinkIdentity, LinkRotation, LinkLMNN:
		default:
			return fmt.Errorf("eval: unknown library metric %q (want %s, %s or %s)", m, LinkIdentity, LinkRotation, LinkLMNN)
		}
	}
	if o.Methods == nil {
		o.Methods = []AlignMethod{AlignProcrustes, AlignLeastSquares}
	}
	for _, m := range o.Methods {
		if m != AlignProcrustes && m != AlignLeastSquares {
			return fmt.Errorf("eval: unknown alignment method %q (want %s or %s)", m, AlignProcrustes, AlignLeastSquares)
		}
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return nil
}

// linkSplit is one trial's draw: the faces of each library (unit
// descriptors and global person ids) and the evaluated and known people.
type linkSplit struct {
	x         [2][][]float64
	people    [2][]int
	evaluated map[int]bool
	knownPool []int // in the order the adversary learns them
	chance    float64
}

func drawLinkSplit(pool []LinkagePerson, o *LinkageOptions, rng *rand.Rand) (*linkSplit, error) {
	order := rng.Perm(len(pool))
	s := &linkSplit{evaluated: map[int]bool{}}
	add := func(lib, person int, ds [][]float32) error {
		for _, d := range ds {
			u, err := unitDescriptor(d)
			if err != nil {
				return fmt.Errorf("eval: %s: %w", pool[person].Name, err)
			}
			if !o.Normalize {
				for i, v := range d {
					u[i] = float64(v)
				}
			}
			s.x[lib] = append(s.x[lib], u)
			s.people[lib] = append(s.people[lib], person)
		}
		return nil
	}
	peopleA := 0
	for k, person := range order {
		ds := slices.Clone(pool[person].Descriptors)
		rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
		ds = ds[:min(len(ds), o.MaxImages)]
		switch {
		case k < o.Shared:
			half := (len(ds) + 1) / 2
			if err := add(0, person, ds[:half]); err != nil {
				return nil, err
			}
			if err := add(1, person, ds[half:]); err != nil {
				return nil, err
			}
			peopleA++
			if k < o.Evaluated {
				s.evaluated[person] = true
			} else {
				s.knownPool = append(s.knownPool, person)
			}
		case (k-o.Shared)%2 == 0:
			if err := add(0, person, ds); err != nil {
				return nil, err
			}
			peopleA++
		default:
			if err := add(1, person, ds); err != nil {
				return nil, err
			}
		}
	}
	s.chance = 1 / float64(peopleA)
	return s, nil
}

// unitDescriptor returns d / ‖d‖ in float64 (Irene's ψ̂ = ψ/‖ψ‖).
func unitDescriptor(d []float32) ([]float64, error) {
	var n float64
	for _, v := range d {
		n += float64(v) * float64(v)
	}
	n = math.Sqrt(n)
	if n == 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		return nil, errors.New("a descriptor is zero or not finite")
	}
	u := make([]float64, len(d))
	for i, v := range d {
		u[i] = float64(v) / n
	}
	return u, nil
}

// linkKey derives library lib's key for a trial from the public seed.
func linkKey(seed uint64, trial, lib int) [32]byte {
	b := []byte("veil/eval/linkage/v1")
	b = binary.LittleEndian.AppendUint64(b, seed)
	b = binary.LittleEndian.AppendUint64(b, uint64(trial))
	b = append(b, byte('A'+lib))
	return sha256.Sum256(b)
}

// libraryFaceprints returns a library's faceprints under metric kind.
func libraryFaceprints(ctx context.Context, kind LinkMetric, x [][]float64, people []int, key [32]byte, lo metric.Options) ([][]float64, error) {
	if kind == LinkIdentity {
		return x, nil
	}
	d := len(x[0])
	rot, err := metric.RandomRotation(key, d)
	if err != nil {
		return nil, err
	}
	m := rot
	if kind == LinkLMNN {
		local := map[int]int{}
		labels := make([]int, len(people))
		for i, p := range people {
			if _, ok := local[p]; !ok {
				local[p] = len(local)
			}
			labels[i] = local[p]
		}
		l, err := metric.NewLMNN(lo)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		if m, _, err = l.Fit(ctx, metric.Data{X: x, Labels: labels}, rot); err != nil {
			return nil, fmt.Errorf("eval: learning a library's metric: %w", err)
		}
	}
	out := make([][]float64, len(x))
	for i, v := range x {
		out[i] = m.Transform(nil, v)
	}
	return out, nil
}

// calibrate returns a library's balanced threshold on at most n of its
// faces (a random subset when it has more).
func calibrate(f [][]float64, people []int, n int, rng *rand.Rand) (float64, error) {
	if len(f) <= n {
		return BalancedThreshold(f, people)
	}
	idx := rng.Perm(len(f))[:n]
	sub := make([][]float64, n)
	sp := make([]int, n)
	for k, i := range idx {
		sub[k], sp[k] = f[i], people[i]
	}
	return BalancedThreshold(sub, sp)
}

// MeasureLinkage simulates two libraries drawn from pool and measures how
// well colluding holders of both can link their faceprints: directly, and
// after aligning the spaces on m known shared people, for each metric in
// o.Metrics. Only people with at least four descriptors are used.
//
// In each trial the eligible people are shuffled; the first o.Shared are in
// both libraries (their photos split between them), the first o.Evaluated
// of those are scored and never known to the adversary, the next ones are
// known in order (m known = the first m), and the remaining people go to
// one library each, alternately. Every face is named by its library (LMNN
// learns from all of them; with every face named, rejections would add
// nothing). Each library calibrates its own threshold (BalancedThreshold).
func MeasureLinkage(ctx context.Context, pool []LinkagePerson, o LinkageOptions) (*LinkageReport, error) {
	eligible := withPhotos(pool, minLinkImages)
	if len(eligible) < 3 {
		return nil, fmt.Errorf("eval: only %d people have at least %d photos; linkage needs more", len(eligible), minLinkImages)
	}
	if err := o.withDefaults(len(eligible)); err != nil {
		return nil, err
	}
	d := len(eligible[0].Descriptors[0])
	for _, p := range eligible {
		for _, v := range p.Descriptors {
			if len(v) != d || d == 0 {
				return nil, fmt.Errorf("eval: %s has a descriptor of length %d, expected %d", p.Name, len(v), d)
			}
		}
	}
	rest := len(eligible) - o.Shared
	rep := &LinkageReport{PoolPeople: len(eligible), Shared: o.Shared, OnlyA: (rest + 1) / 2, OnlyB: rest / 2,
		Evaluated: o.Evaluated, Trials: o.Trials, Seed: o.Seed, Normalized: o.Normalize,
		Protocol: "two libraries drawn from the pool: shared people's photos split between them, the others in one library each; every face named; " +
			"faceprints are descriptors (unit-length if normalized) under each library's map; B's faces of the evaluated shared people are tagged by their nearest face in A " +
			"if within A's own balanced threshold; the aligning adversary first maps B's faceprints into A's space by a map fitted on the centroids of m known shared people"}
	type acc struct {
		thrA, thrB     float64
		within, direct LinkCounts
		aligned        map[AlignMethod][]LinkCounts
		learn          time.Duration
		chance         float64
	}
	accs := make([]acc, len(o.Metrics))
	for i := range accs {
		accs[i].aligned = map[AlignMethod][]LinkCounts{}
		for _, m := range o.Methods {
			accs[i].aligned[m] = make([]LinkCounts, len(o.Known))
		}
	}
	for trial := range o.Trials {
		rng := rand.New(rand.NewPCG(o.Seed, uint64(trial)))
		s, err := drawLinkSplit(eligible, &o, rng)
		if err != nil {
			return nil, err
		}
		if trial == 0 {
			rep.FacesA, rep.FacesB = len(s.x[0]), len(s.x[1])
		}
		for mi, kind := range o.Metrics {
			a := &accs[mi]
			var libs [2]LinkLibrary
			start := time.Now()
			for lib := range 2 {
				f, err := libraryFaceprints(ctx, kind, s.x[lib], s.people[lib], linkKey(o.Seed, trial, lib), o.LMNN)
				if err != nil {
					return nil, err
				}
				libs[lib] = LinkLibrary{Faceprints: f, People: s.people[lib]}
			}
			if kind == LinkLMNN {
				a.learn += time.Since(start)
			}
			for lib := range 2 {
				t, err := calibrate(libs[lib].Faceprints, libs[lib].People, o.ThresholdFaces, rng)
				if err != nil {
					return nil, err
				}
				libs[lib].Threshold = t
			}
			a.thrA += libs[0].Threshold
			a.thrB += libs[1].Threshold
			a.chance += s.chance
			w, err := LinkWithin(libs[0], s.evaluated)
			if err != nil {
				return nil, err
			}
			a.within = a.within.Add(w)
			// Only the evaluated people (and B's strangers) are scored, at
			// every m, so every point of the curve is measured on the same
			// faces.
			notScored := map[int]bool{}
			for _, p := range s.knownPool {
				notScored[p] = true
			}
			c, err := AlignAttack(libs[0], libs[1], nil, AlignProcrustes, notScored)
			if err != nil {
				return nil, err
			}
			a.direct = a.direct.Add(c)
			for _, method := range o.Methods {
				for ki, m := range o.Known {
					c, err := AlignAttack(libs[0], libs[1], s.knownPool[:m], method, notScored)
					if err != nil {
						return nil, err
					}
					a.aligned[method][ki] = a.aligned[method][ki].Add(c)
				}
			}
			o.Progress(fmt.Sprintf("trial %d/%d, %s: direct linked %.1f%%, within A %.1f%%", trial+1, o.Trials, kind,
				100*c.Rates().Linked, 100*w.Rates().Linked))
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("eval: linkage measurement stopped: %w", err)
			}
		}
	}
	nt := float64(o.Trials)
	for mi, kind := range o.Metrics {
		a := accs[mi]
		r := LinkageMetricReport{Metric: kind, ThresholdA: a.thrA / nt, ThresholdB: a.thrB / nt,
			Within: a.within.Rates(), Direct: a.direct.Rates(), ChanceNearest: a.chance / nt, LearnSeconds: a.learn.Seconds()}
		for _, method := range o.Methods {
			for ki, m := range o.Known {
				r.Aligned = append(r.Aligned, LinkagePoint{Method: method, Known: m, LinkRates: a.aligned[method][ki].Rates()})
			}
		}
		rep.Metrics = append(rep.Metrics, r)
	}
	return rep, nil
}
