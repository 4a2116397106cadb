package collab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/metric"
	"github.com/veil-privacy/veil/tagging"
)

// Split is one LFW identity list laid out as in veil bench tagging: the
// people with at least 5 photos (who get named) and the people with one
// photo (strangers); one face per photo.
type Split struct {
	Descs [][]float32
	// Public, if not nil, holds each face's public features (the
	// age/gender network's region features, LoadSplitPublic), beside
	// Descs.
	Public   [][]float32
	Identity []int  // per face: its person
	Stranger []bool // per person
}

// Options configures the experiment. Zero fields take the defaults in
// brackets.
type Options struct {
	// Users is the number of simulated training users [24] and HeldOut of
	// held-out users [4].
	Users, HeldOut int
	// MaxUsersPerPerson: a training person is in 1…this many users'
	// libraries, uniformly [4].
	MaxUsersPerPerson int
	// PhotosPerUser caps a person's photos in one training library [10].
	PhotosPerUser int
	// Trials is the number of random choices of the named photos averaged
	// (pooled) per figure [3].
	Trials int
	// Classes is the number of hashed-tag classes n [1024]; Alpha Eq. 2's α [0.9].
	Classes int
	Alpha   float64
	// Hidden is ψ's hidden width (0: linear).
	Hidden int
	// Epochs, Batch, LearningRate drive bootstrapping [20, 64, 1e-3].
	Epochs, Batch int
	LearningRate  float64
	// Epsilon is the DP target per person of a library for bootstrapping
	// (0: no DP), Delta its δ [1e-5]; EpsilonW0 the target of W₀'s
	// exchange (SharedMetricDP) [Epsilon; without DP W₀ is fitted by
	// metric.MTLMNN with no bound]. Each training user's ledger has
	// budget Budget [Epsilon + EpsilonW0] and is charged before each
	// training.
	Epsilon, Delta, EpsilonW0, Budget float64
	// W0 configures W₀'s private exchange (its ε and δ come from
	// EpsilonW0 and Delta).
	W0 W0DP
	// PublicEpochs and PublicLearningRate drive the bootstrapping of ψ
	// on public features [Epochs, LearningRate], PublicOut its output
	// size [128] and PublicHidden its hidden width [256, as the
	// federation's head; -1: linear]; used when the splits carry public
	// features.
	PublicEpochs       int
	PublicLearningRate float64
	PublicOut          int
	PublicHidden       int
	// Iterations bound every LMNN and MT-LMNN fit [100].
	Iterations int
	// Workers for the metric fits [GOMAXPROCS].
	Workers int
	// Seed seeds the simulation, the named photos and the initial
	// weights (not privacy noise, which comes from a CSPRNG).
	Seed uint64
	// Engine runs ψ's training (nil: a private default).
	Engine *engine.Engine
	// Progress, if set, gets a line per stage.
	Progress func(string)
}

// Validate reports the first option out of range (defaults filled in on a
// copy).
func (o Options) Validate() error { return o.defaults() }

func (o *Options) defaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Users, 24)
	def(&o.HeldOut, 4)
	def(&o.MaxUsersPerPerson, 4)
	def(&o.PhotosPerUser, 10)
	def(&o.Trials, 3)
	def(&o.Classes, 1024)
	def(&o.Iterations, 100)
	if o.Alpha == 0 {
		o.Alpha = 0.9
	}
	if o.Delta == 0 {
		o.Delta = 1e-5
	}
	if o.EpsilonW0 == 0 {
		o.EpsilonW0 = o.Epsilon
	}
	if o.Budget == 0 {
		o.Budget = o.Epsilon + o.EpsilonW0
	}
	def(&o.PublicOut, 128)
	def(&o.PublicHidden, 256)
	o.PublicHidden = max(o.PublicHidden, 0)
	if o.PublicEpochs == 0 {
		o.PublicEpochs = o.Epochs
	}
	if o.PublicLearningRate == 0 {
		o.PublicLearningRate = o.LearningRate
	}
	switch {
	case o.Users < 2 || o.HeldOut < 1:
		return fmt.Errorf("collab: need at least 2 training users and 1 held-out user, got %d and %d", o.Users, o.HeldOut)
	case o.MaxUsersPerPerson < 1 || o.MaxUsersPerPerson > o.Users:
		return fmt.Errorf("collab: a person's users must be 1…%d, got %d", o.Users, o.MaxUsersPerPerson)
	case o.PhotosPerUser < 4:
		return fmt.Errorf("collab: at least 4 photos of a person per library (3 named and one to suggest), got %d", o.PhotosPerUser)
	case o.Trials < 1 || o.Iterations < 1:
		return errors.New("collab: trials and iterations must be at least 1")
	case o.Epsilon < 0 || o.EpsilonW0 < 0 || o.Budget < 0 || math.IsNaN(o.Epsilon) || math.IsNaN(o.EpsilonW0):
		return errors.New("collab: ε and the budget must not be negative")
	case o.Epsilon == 0 && o.EpsilonW0 > 0:
		return errors.New("collab: W₀'s ε needs bootstrapping under DP too (--epsilon > 0): ψ would leak without a bound")
	case o.PublicOut < 1 || o.PublicEpochs < 0 || o.PublicLearningRate < 0:
		return errors.New("collab: the public head's output size, epochs and learning rate must be positive")
	case o.Epsilon > 0 && o.Budget < o.Epsilon:
		return fmt.Errorf("collab: the users' budget %g is below the training's ε %g: every ledger would refuse", o.Budget, o.Epsilon)
	}
	return nil
}

// Figures are held-out users' suggestions at one setting per space,
// with 1 and 3 named photos per person.
type Figures struct {
	Named1 Score `json:"named_1"`
	Named3 Score `json:"named_3"`
	// Train is the setting chosen on the training users (3 named photos)
	// and their figures there; absent for methods whose users each carry
	// the threshold over from the base space (metric.MatchThreshold).
	Train *Score `json:"train_users_named_3,omitempty"`
	// Fitted counts the held-out libraries (over all trials) that learned
	// their own metric, with 1 and 3 named photos; the others had too few
	// names and stayed in the base space.
	Fitted *[2]int `json:"metric_fitted_named_1_3,omitempty"`
}

// MethodReport is one method's figures for held-out users: at the setting
// chosen by the matched goal (Report.Goal) and by the library's goal.
type MethodReport struct {
	Figures
	// EpsilonPerUser is ε per person of a user's library spent by what
	// the method shares (0: nothing leaves the library; null: shared
	// without a DP bound).
	EpsilonPerUser *float64 `json:"epsilon_per_user"`
	// BytesPerUser is what one user's device would send and receive if
	// the method ran federated as built, in the federation's plaintext
	// weights encoding (WireBytes; secure aggregation's masking adds to
	// the uploads: 1.029× measured for a 557,824-value head, about 2× for
	// ψ's 16,512 values, which pad to 32,768): for ψ's bootstrapping one FedAvg round per epoch, each
	// ψ's download and its update's upload (BootstrapBytes); for W₀ its
	// private exchange's steps, each V₀'s gradient up and V₀ down
	// (W0Bytes), on top of ψ's; 0 for methods that share nothing; null
	// for shared_w0 without DP, whose MT-LMNN fit has no federated form.
	BytesPerUser *int64 `json:"bytes_per_user"`
	// LibraryGoal is the same at the setting chosen by LibraryGoal.
	LibraryGoal Figures `json:"library_goal"`
}

// Report is the experiment's outcome.
type Report struct {
	Methods map[string]*MethodReport `json:"methods"`
	// Goal is the criterion of the methods' main figures, chosen on the
	// training users: precision ≥ 99.5% and a strangers' rate no higher
	// than plain descriptors' at the library's thresholds there.
	Goal Goal `json:"goal"`
	// PlainDefaults are plain descriptors at the library's thresholds
	// (tagging.DefaultSuggestOptions): today's suggestions.
	PlainDefaults  Figures `json:"plain_defaults"`
	EpsilonUnit    string  `json:"epsilon_unit"`
	Delta          float64 `json:"delta"`
	Users          int     `json:"users"`
	HeldOutUsers   int     `json:"held_out_users"`
	TrainingPeople int     `json:"training_people"`
	// PersonLibraries counts (person, library) pairs of the training users:
	// the units of bootstrapping.
	PersonLibraries int `json:"person_libraries"`
	// ClassesShared is the share of hashed-tag classes holding more than
	// one person-of-a-library (collisions Eq. 2 must absorb).
	ClassesShared float64          `json:"classes_shared"`
	Classes       int              `json:"classes"`
	Trials        int              `json:"trials"`
	Bootstrap     *BootstrapReport `json:"bootstrap"`
	// W0 is W₀'s private exchange (absent without DP).
	W0 *W0Report `json:"w0_exchange,omitempty"`
	// W0Public is W₀'s private exchange on ψ's output on public features
	// (absent without DP or without them).
	W0Public *W0Report `json:"w0_exchange_public,omitempty"`
	// BootstrapPublic is ψ's bootstrapping on public features (absent
	// without them).
	BootstrapPublic *BootstrapReport   `json:"bootstrap_public,omitempty"`
	WallS           map[string]float64 `json:"wall_s"`
}

// Method names, in report order.
var Methods = []string{"plain", "local_lmnn", "shared_bootstrap", "shared_w0", "per_user_metric"}

// PublicMethods are the methods on public features, reported when the
// splits carry them: plain public features (a random projection's
// starting point is not a method: public_plain is the raw 2,048 values),
// ψ bootstrapped on them, and W₀ tuned on ψ's output (Irene's two
// stages, as shared_bootstrap and shared_w0 on the descriptors).
var PublicMethods = []string{"public_plain", "shared_bootstrap_public", "shared_w0_public"}

// simulate lays the split's people out as libraries. Training users: each
// named person in 1…maxUsers random users' libraries, each holding an
// independent random subset of at most perUser of the person's photos;
// each stranger in one random library. Held-out users: the people dealt
// out, each person (all photos) in exactly one library.
func simulate(s *Split, users, maxUsers, perUser int, disjoint bool, rng *rand.Rand) []*Library {
	libs := make([]*Library, users)
	local := make([]map[int]int, users)
	for u := range libs {
		libs[u] = &Library{Stranger: map[int]bool{}}
		local[u] = map[int]int{}
	}
	byPerson := make([][]int, len(s.Stranger))
	for i, p := range s.Identity {
		byPerson[p] = append(byPerson[p], i)
	}
	put := func(u, p int, faces []int) {
		l := libs[u]
		q, ok := local[u][p]
		if !ok {
			q = len(local[u])
			local[u][p] = q
			l.origin = append(l.origin, p)
			if s.Stranger[p] {
				l.Stranger[q] = true
			}
		}
		for _, i := range faces {
			l.Descs = append(l.Descs, s.Descs[i])
			if s.Public != nil {
				l.Public = append(l.Public, s.Public[i])
			}
			l.Person = append(l.Person, q)
		}
	}
	next := 0
	for _, p := range rng.Perm(len(byPerson)) {
		faces := byPerson[p]
		if len(faces) == 0 {
			continue
		}
		if s.Stranger[p] || disjoint {
			u := rng.IntN(users)
			if disjoint && !s.Stranger[p] {
				u = next % users
				next++
			}
			put(u, p, faces)
			continue
		}
		k := 1 + rng.IntN(maxUsers)
		for _, u := range rng.Perm(users)[:k] {
			f := append([]int(nil), faces...)
			rng.Shuffle(len(f), func(i, j int) { f[i], f[j] = f[j], f[i] })
			put(u, p, f[:min(len(f), perUser)])
		}
	}
	return libs
}

// chooseNamed draws named photos of every non-stranger person of a library.
func chooseNamed(l *Library, named int, rng *rand.Rand) []bool {
	by := map[int][]int{}
	for i, p := range l.Person {
		if !l.Stranger[p] {
			by[p] = append(by[p], i)
		}
	}
	isNamed := make([]bool, len(l.Descs))
	for p := range len(l.Person) {
		faces, ok := by[p]
		if !ok {
			continue
		}
		rng.Shuffle(len(faces), func(i, j int) { faces[i], faces[j] = faces[j], faces[i] })
		for _, i := range faces[:min(named, len(faces))] {
			isNamed[i] = true
		}
	}
	return isNamed
}

// space maps descriptors; nil is the identity.
type space func([]float32) ([]float32, error)

func mapAll(sp space, xs [][]float32) ([][]float32, error) {
	if sp == nil {
		return xs, nil
	}
	out := make([][]float32, len(xs))
	for i, x := range xs {
		y, err := sp(x)
		if err != nil {
			return nil, err
		}
		out[i] = y
	}
	return out, nil
}

func metricSpace(m *metric.Metric, base space) space {
	return func(x []float32) ([]float32, error) {
		if base != nil {
			var err error
			if x, err = base(x); err != nil {
				return nil, err
			}
		}
		y := m.Transform(nil, to64(x))
		out := make([]float32, len(y))
		for i, v := range y {
			out[i] = float32(v)
		}
		return out, nil
	}
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// trialRNG is the generator of one library's named photos in one trial.
func trialRNG(seed uint64, trial, lib, named int) *rand.Rand {
	return rand.New(rand.NewPCG(seed^uint64(named)<<48, uint64(trial)<<32|uint64(lib)))
}

// querySets computes every library's queries in a space, per trial.
func querySets(libs []*Library, sp space, named, trials int, seed uint64) ([][]query, error) {
	var out [][]query
	for li, l := range libs {
		xs, err := mapAll(sp, l.Descs)
		if err != nil {
			return nil, err
		}
		for t := range trials {
			qs, err := queries(l, xs, chooseNamed(l, named, trialRNG(seed, t, li, named)))
			if err != nil {
				return nil, err
			}
			out = append(out, qs)
		}
	}
	return out, nil
}

func scoreAt(sets [][]query, d, m float64) Score {
	var c Counts
	for _, qs := range sets {
		c.count(qs, d, m)
	}
	return c.score(d, m)
}

// tuned is a space with its suggestion setting chosen on the training users.
type tuned struct {
	sp       space
	dist, mg float64
	train    Score
}

// tune chooses a space's setting for each goal on the training users with
// 3 named photos, over a grid scaled to the space (the ratio of the median
// nearest-named distance to plain descriptors').
func tune(train []*Library, sp space, plainMedian float64, o *Options, goals []Goal) ([]tuned, error) {
	return tuneFrom(train, sp, plainMedian, o, goals, 30)
}

// tuneFrom is tune over distances scale·[lo/100, 0.65]: public features
// need lower ones than the descriptor's spaces.
func tuneFrom(train []*Library, sp space, plainMedian float64, o *Options, goals []Goal, lo int) ([]tuned, error) {
	sets, err := querySets(train, sp, 3, o.Trials, o.Seed)
	if err != nil {
		return nil, err
	}
	scale := 1.0
	if sp != nil {
		scale = medianNearest(sets) / plainMedian
	}
	out := make([]tuned, len(goals))
	for i, g := range goals {
		s := choose(sets, scale, g, lo)
		out[i] = tuned{sp: sp, dist: s.Distance, mg: s.Margin, train: s}
	}
	return out, nil
}

// heldOut scores held-out users in a tuned space.
func heldOut(libs []*Library, t tuned, named int, o *Options) (Score, error) {
	sets, err := querySets(libs, t.sp, named, o.Trials, o.Seed)
	if err != nil {
		return Score{}, err
	}
	return scoreAt(sets, t.dist, t.mg), nil
}

// ownMetric scores held-out users who each learn an LMNN metric from
// their named faces on top of base (the library's LearnMetric: the
// distance carried over by metric.MatchThreshold, the margin scaled
// alike); a library with too few names stays in base. It returns the
// score and how many libraries learned one.
func ownMetric(ctx context.Context, libs []*Library, base tuned, named int, o *Options) (Score, int, error) {
	lm, err := metric.NewLMNN(metric.Options{Solver: metric.Solver{Iterations: o.Iterations, Workers: o.Workers}})
	if err != nil {
		return Score{}, 0, err
	}
	var c Counts
	fitted := 0
	for li, l := range libs {
		xs, err := mapAll(base.sp, l.Descs)
		if err != nil {
			return Score{}, 0, err
		}
		for t := range o.Trials {
			isNamed := chooseNamed(l, named, trialRNG(o.Seed, t, li, named))
			m, _, namedX, unnamedX, err := OwnMetric(ctx, lm, xs, l.Person, isNamed)
			if err != nil {
				return Score{}, 0, err
			}
			dist, mg := base.dist, base.mg
			ys := xs
			if m != nil {
				nd, err := metric.MatchThreshold(m, namedX, unnamedX, base.dist)
				if err != nil {
					return Score{}, 0, err
				}
				mg = base.mg * nd / base.dist
				dist = nd
				if ys, err = mapAll(metricSpace(m, nil), xs); err != nil {
					return Score{}, 0, err
				}
				fitted++
			}
			qs, err := queries(l, ys, isNamed)
			if err != nil {
				return Score{}, 0, err
			}
			c.count(qs, dist, mg)
		}
	}
	return c.score(0, 0), fitted, nil
}

// OwnMetric is what a library learns alone (veil library learn): an LMNN
// metric fitted on its named faces (isNamed) of xs, with its report (the
// training loss before and after). A library with fewer than two named
// people, or no person with two named faces, learns none (nil metric).
// It also returns the named and the unnamed faces as float64 vectors.
func OwnMetric(ctx context.Context, lm *metric.LMNN, xs [][]float32, person []int, isNamed []bool) (*metric.Metric, *metric.Report, [][]float64, [][]float64, error) {
	var d metric.Data
	var unnamedX [][]float64
	per := map[int]int{}
	for i, x := range xs {
		if isNamed[i] {
			d.X = append(d.X, to64(x))
			d.Labels = append(d.Labels, person[i])
			per[person[i]]++
		} else {
			unnamedX = append(unnamedX, to64(x))
		}
	}
	two := false
	for _, n := range per {
		two = two || n >= 2
	}
	if len(per) < 2 || !two {
		return nil, nil, d.X, unnamedX, nil
	}
	m, rep, err := lm.Fit(ctx, d, nil)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("collab: a library's own metric: %w", err)
	}
	return m, rep, d.X, unnamedX, nil
}

// pooled builds the training users' hashed-tag data: every person of a
// library (all its faces: a mature library's names and accepted
// suggestions) under its class, hashed with the library's own key. It
// also returns each library's classes by local person.
func pooled(train []*Library, classes int, rng *rand.Rand) (*Tagged, float64, []map[int]int, error) {
	data := &Tagged{}
	count := map[int]int{}
	classOf := make([]map[int]int, len(train))
	for li, l := range train {
		classOf[li] = map[int]int{}
		var key [32]byte
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		by := map[int][][]float32{}
		for i, p := range l.Person {
			if !l.Stranger[p] {
				by[p] = append(by[p], l.Descs[i])
			}
		}
		for p := range len(l.Person) {
			descs, ok := by[p]
			if !ok {
				continue
			}
			c, err := tagging.HashedTag(key[:], strconv.Itoa(p), classes)
			if err != nil {
				return nil, 0, nil, err
			}
			count[c]++
			classOf[li][p] = c
			if err := data.Add(c, descs); err != nil {
				return nil, 0, nil, err
			}
		}
	}
	shared := 0
	for _, n := range count {
		if n > 1 {
			shared++
		}
	}
	return data, ratio(shared, len(count)), classOf, nil
}

// Run runs the experiment on LFW's development training identities
// (train: the simulated users who train) and test identities (test: the
// held-out users).
func Run(ctx context.Context, train, test *Split, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	say := func(f string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(f, a...))
		}
	}
	wall := map[string]float64{}
	t0 := time.Now()
	rng := rand.New(rand.NewPCG(o.Seed, 0xc011ab))
	users := simulate(train, o.Users, o.MaxUsersPerPerson, o.PhotosPerUser, false, rng)
	held := simulate(test, o.HeldOut, 1, math.MaxInt, true, rng)
	rep := &Report{Methods: map[string]*MethodReport{}, EpsilonUnit: "one person of one user's library (all their faces in it)",
		Delta: o.Delta, Users: o.Users, HeldOutUsers: o.HeldOut, Classes: o.Classes, Trials: o.Trials, WallS: wall}
	for _, s := range train.Stranger {
		if !s {
			rep.TrainingPeople++
		}
	}
	zero := 0.0
	def := tagging.DefaultSuggestOptions()
	plainSets, err := querySets(users, nil, 3, o.Trials, o.Seed)
	if err != nil {
		return nil, err
	}
	plainMedian := medianNearest(plainSets)
	defTrain := scoreAt(plainSets, def.Distance, def.Margin)
	rep.Goal = Goal{Precision: 0.995, Strangers: defTrain.StrangersRate + 1e-9}
	goals := []Goal{rep.Goal, LibraryGoal}
	held1 := func(t tuned, withTrain bool) (Figures, error) { return heldFigures(held, t, withTrain, &o) }
	if rep.PlainDefaults, err = held1(tuned{dist: def.Distance, mg: def.Margin, train: defTrain}, true); err != nil {
		return nil, err
	}
	addHeld := func(name string, ts []tuned, eps *float64) error {
		return addHeldOn(held, name, ts, eps, &o, rep, say)
	}
	own1 := func(base tuned) (Figures, error) {
		f := Figures{Fitted: &[2]int{}}
		var err error
		if f.Named1, f.Fitted[0], err = ownMetric(ctx, held, base, 1, &o); err != nil {
			return f, err
		}
		f.Named3, f.Fitted[1], err = ownMetric(ctx, held, base, 3, &o)
		return f, err
	}
	addOwn := func(name string, bases []tuned, eps *float64) error {
		r := &MethodReport{EpsilonPerUser: eps}
		var err error
		if r.Figures, err = own1(bases[0]); err != nil {
			return err
		}
		if r.LibraryGoal, err = own1(bases[1]); err != nil {
			return err
		}
		rep.Methods[name] = r
		say("%s: held-out coverage %.3f / %.3f (1 / 3 named), strangers %.3f / %.3f", name, r.Named1.Coverage, r.Named3.Coverage, r.Named1.StrangersRate, r.Named3.StrangersRate)
		return nil
	}
	plain, err := tune(users, nil, plainMedian, &o, goals)
	if err != nil {
		return nil, err
	}
	if err := addHeld("plain", plain, &zero); err != nil {
		return nil, err
	}
	rep.Methods["plain"].BytesPerUser = new(int64)
	t1 := time.Now()
	if err := addOwn("local_lmnn", plain, &zero); err != nil {
		return nil, err
	}
	rep.Methods["local_lmnn"].BytesPerUser = new(int64)
	wall["local_lmnn"] = time.Since(t1).Seconds()

	// Bootstrapping ψ on the pooled hashed-tag data.
	data, shared, _, err := pooled(users, o.Classes, rng)
	if err != nil {
		return nil, err
	}
	rep.PersonLibraries, rep.ClassesShared = data.Units, shared
	ψ, err := NewPsi(PsiOptions{Hidden: o.Hidden, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	led, charge, err := userLedgers(len(users), &o)
	if err != nil {
		return nil, err
	}
	bo := o.bootstrapOptions(charge, say)
	t1 = time.Now()
	br, err := Bootstrap(ctx, ψ, data, bo)
	if err != nil {
		return nil, err
	}
	wall["bootstrap"] = time.Since(t1).Seconds()
	rep.Bootstrap = br
	var eps *float64
	if o.Epsilon > 0 {
		e := br.Epsilon
		eps = &e
	}
	psiSpace := space(ψ.Apply)
	sb, err := tune(users, psiSpace, plainMedian, &o, goals)
	if err != nil {
		return nil, err
	}
	if err := addHeld("shared_bootstrap", sb, eps); err != nil {
		return nil, err
	}
	psiBytes, err := BootstrapBytes(ψ, br.Epochs)
	if err != nil {
		return nil, err
	}
	rep.Methods["shared_bootstrap"].BytesPerUser = &psiBytes

	// Tuning: MT-LMNN over the training users on ψ's output, W₀ kept;
	// under DP by the private exchange, charged to the same ledgers.
	st := w0Stage{name: "shared_w0", wall: "mt_lmnn", users: users, ψ: ψ, psiBytes: psiBytes, led: led, charge: charge,
		report: func(name string, sp space, eps *float64) error {
			ts, err := tune(users, sp, plainMedian, &o, goals)
			if err != nil {
				return err
			}
			return addHeld(name, ts, eps)
		}}
	if rep.W0, err = st.run(ctx, &o, rep, say); err != nil {
		return nil, err
	}
	if err := addOwn("per_user_metric", sb, eps); err != nil {
		return nil, err
	}
	rep.Methods["per_user_metric"].BytesPerUser = &psiBytes
	if train.Public != nil && test.Public != nil {
		if err := runPublic(ctx, rep, users, held, &o); err != nil {
			return nil, err
		}
	}
	wall["total"] = time.Since(t0).Seconds()
	return rep, nil
}

// heldFigures scores held-out users in a tuned space with 1 and 3 named
// photos, with the training users' figures if withTrain.
func heldFigures(held []*Library, t tuned, withTrain bool, o *Options) (Figures, error) {
	var f Figures
	var err error
	if withTrain {
		tr := t.train
		f.Train = &tr
	}
	if f.Named1, err = heldOut(held, t, 1, o); err != nil {
		return f, err
	}
	f.Named3, err = heldOut(held, t, 3, o)
	return f, err
}

// addHeldOn reports a method: held-out users' figures at the settings
// chosen for the main goal (ts[0]) and the library's goal (ts[1]).
func addHeldOn(held []*Library, name string, ts []tuned, eps *float64, o *Options, rep *Report, say func(string, ...any)) error {
	r := &MethodReport{EpsilonPerUser: eps}
	var err error
	if r.Figures, err = heldFigures(held, ts[0], true, o); err != nil {
		return err
	}
	if r.LibraryGoal, err = heldFigures(held, ts[1], true, o); err != nil {
		return err
	}
	rep.Methods[name] = r
	say("%s: held-out coverage %.3f / %.3f (1 / 3 named), strangers %.3f / %.3f", name, r.Named1.Coverage, r.Named3.Coverage, r.Named1.StrangersRate, r.Named3.StrangersRate)
	return nil
}

// bootstrapOptions are ψ's bootstrapping options from o, under DP when
// o.Epsilon > 0 with the ledgers' charge.
func (o *Options) bootstrapOptions(charge func(dp.Event) error, say func(string, ...any)) BootstrapOptions {
	bo := BootstrapOptions{Classes: o.Classes, Alpha: o.Alpha, Epochs: o.Epochs, Batch: o.Batch, LearningRate: o.LearningRate,
		Seed: o.Seed, Engine: o.Engine, Progress: func(e int, l float64) { say("bootstrapping epoch %d: loss %.4f", e, l) }}
	if o.Epsilon > 0 {
		bo.DP = &BootstrapDP{Epsilon: o.Epsilon, Delta: o.Delta}
		bo.Charge = charge
	}
	return bo
}

// userLedgers gives every training user a ledger with o's budget and
// returns the charge that spends an event on every user's ledger, or
// refuses (changing none) when one would go over its budget. Without DP
// it returns nil ledgers and charge.
func userLedgers(users int, o *Options) (*dp.Ledger, func(dp.Event) error, error) {
	if o.Epsilon == 0 {
		return nil, nil, nil
	}
	led, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		return nil, nil, err
	}
	for u := range users {
		if err := led.SetBudget(userID(u), dp.Budget{Epsilon: o.Budget, Delta: o.Delta}); err != nil {
			return nil, nil, err
		}
	}
	charge := func(ev dp.Event) error {
		for u := range users {
			if ok, err := led.CanCharge(userID(u), ev); err != nil || !ok {
				return fmt.Errorf("user %d's ledger refuses (budget ε = %g): %w", u, o.Budget, errors.Join(err, dp.ErrBudgetExceeded))
			}
		}
		for u := range users {
			if _, err := led.Charge(userID(u), ev); err != nil {
				return err
			}
		}
		return nil
	}
	return led, charge, nil
}

// runPublic is the papers' setting: ψ a head on the public features
// (PsiOptions.Out: a random projection to PublicOut values at the start),
// bootstrapped as on the descriptors from the same hashed tags, under DP
// with its own ledgers (a deployment would share one of the two ψ, so the
// two designs' ε are not added). Suggestions are made in ψ's output;
// public_plain makes them in the raw public features.
func runPublic(ctx context.Context, rep *Report, users, held []*Library, o *Options) error {
	say := func(f string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(f, a...))
		}
	}
	pub := func(libs []*Library) []*Library {
		out := make([]*Library, len(libs))
		for i, l := range libs {
			c := *l
			c.Descs, c.Public = l.Public, nil
			out[i] = &c
		}
		return out
	}
	pu, ph := pub(users), pub(held)
	// The same hashed tags (the same key stream) as the descriptor design.
	data, _, _, err := pooled(pu, o.Classes, rand.New(rand.NewPCG(o.Seed, 0x9ab11c)))
	if err != nil {
		return err
	}
	zero := 0.0
	plainSets, err := querySets(users, nil, 3, o.Trials, o.Seed)
	if err != nil {
		return err
	}
	plainMedian := medianNearest(plainSets)
	goals := []Goal{rep.Goal, LibraryGoal}
	heldPub := func(name string, sp space, eps *float64) error {
		ts, err := tuneFrom(pu, sp, plainMedian, o, goals, 2)
		if err != nil {
			return err
		}
		return addHeldOn(ph, name, ts, eps, o, rep, say)
	}
	if err := heldPub("public_plain", nil, &zero); err != nil {
		return err
	}
	rep.Methods["public_plain"].BytesPerUser = new(int64)
	ψ, err := NewPsi(PsiOptions{Dim: data.Dim, Out: o.PublicOut, Hidden: o.PublicHidden, Seed: o.Seed})
	if err != nil {
		return err
	}
	led, charge, err := userLedgers(len(users), o)
	if err != nil {
		return err
	}
	bo := o.bootstrapOptions(charge, say)
	bo.Epochs, bo.LearningRate = o.PublicEpochs, o.PublicLearningRate
	t1 := time.Now()
	br, err := Bootstrap(ctx, ψ, data, bo)
	if err != nil {
		return fmt.Errorf("collab: ψ on public features: %w", err)
	}
	rep.WallS["bootstrap_public"] = time.Since(t1).Seconds()
	rep.BootstrapPublic = br
	var eps *float64
	if o.Epsilon > 0 {
		e := br.Epsilon
		eps = &e
	}
	if err := heldPub("shared_bootstrap_public", ψ.Apply, eps); err != nil {
		return err
	}
	b, err := BootstrapBytes(ψ, br.Epochs)
	if err != nil {
		return err
	}
	rep.Methods["shared_bootstrap_public"].BytesPerUser = &b
	// Tuning as on the descriptors: W₀ on ψ's output, charged to the
	// same (public) ledgers as ψ's bootstrapping.
	st := w0Stage{name: "shared_w0_public", wall: "mt_lmnn_public", users: pu, ψ: ψ, psiBytes: b, led: led, charge: charge, report: heldPub}
	rep.W0Public, err = st.run(ctx, o, rep, say)
	return err
}

// w0Stage is Irene's second stage on ψ's output: MT-LMNN over the
// training users, W₀ kept, reported as method name.
type w0Stage struct {
	name, wall string // the method's name; its wall-clock entry
	users      []*Library
	ψ          *Psi
	psiBytes   int64 // ψ's bootstrapping's bytes per user
	led        *dp.Ledger
	charge     func(dp.Event) error
	// report tunes a space on the training users and reports it for the
	// held-out users.
	report func(name string, sp space, eps *float64) error
}

// run fits W₀: under DP (o.Epsilon > 0) by the private exchange
// (SharedMetricDP, target o.EpsilonW0) charged to the users' ledgers
// through s.charge, so the method's ε per user is the ledger's
// composition with bootstrapping's and its bytes per user W0Bytes on top
// of ψ's; without DP by SharedMetric, with no bound (ε and bytes null).
// It reports the method in V₀·ψ(x) and returns the exchange's report
// (nil without DP).
func (s w0Stage) run(ctx context.Context, o *Options, rep *Report, say func(string, ...any)) (*W0Report, error) {
	psiSpace := space(s.ψ.Apply)
	t1 := time.Now()
	var w0 *metric.Metric
	var wr *W0Report
	var eps *float64
	var err error
	if o.Epsilon > 0 {
		d := o.W0
		d.Epsilon, d.Delta = o.EpsilonW0, o.Delta
		if w0, wr, err = SharedMetricDP(ctx, s.users, psiSpace, o, d, s.charge); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		sp, err := s.led.Spent(userID(0))
		if err != nil {
			return nil, err
		}
		eps = &sp.Epsilon
		say("%s: W₀ exchanged under DP: ε %.2f alone, %.2f with bootstrapping (σ %.2f, %d steps)", s.name, wr.Epsilon, sp.Epsilon, wr.NoiseMultiplier, wr.Steps)
	} else if w0, err = SharedMetric(ctx, s.users, s.ψ, o); err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	rep.WallS[s.wall] = time.Since(t1).Seconds()
	if err := s.report(s.name, metricSpace(w0, psiSpace), eps); err != nil {
		return nil, err
	}
	if wr != nil {
		b, err := W0Bytes(s.ψ.Options().Out, wr.Steps)
		if err != nil {
			return nil, err
		}
		b += s.psiBytes
		rep.Methods[s.name].BytesPerUser = &b
	}
	return wr, nil
}

func userID(u int) string { return "user-" + strconv.Itoa(u) }

// SharedMetric fits multi-task LMNN (Irene Eq. 7) with one task per
// training library, on ψ's output of up to 3 named faces per person, and
// returns the shared map V₀ (W₀ = V₀ᵀV₀): all a library would exchange.
func SharedMetric(ctx context.Context, libs []*Library, ψ *Psi, o *Options) (*metric.Metric, error) {
	mt, err := metric.NewMTLMNN(metric.MTOptions{Solver: metric.Solver{Iterations: o.Iterations, Workers: o.Workers}})
	if err != nil {
		return nil, err
	}
	var tasks []metric.Task
	for li, l := range libs {
		isNamed := chooseNamed(l, 3, trialRNG(o.Seed^0x3713, 0, li, 3))
		var d metric.Data
		for i, x := range l.Descs {
			if !isNamed[i] {
				continue
			}
			y, err := ψ.Apply(x)
			if err != nil {
				return nil, err
			}
			d.X = append(d.X, to64(y))
			d.Labels = append(d.Labels, l.Person[i])
		}
		if len(d.X) > 0 {
			tasks = append(tasks, metric.Task{Data: d})
		}
	}
	m, _, err := mt.Fit(ctx, tasks, nil)
	if err != nil {
		return nil, fmt.Errorf("collab: MT-LMNN: %w", err)
	}
	return m.Shared, nil
}

// MinImages is the number of photos that makes an LFW person one whom
// users name (as veil bench tagging's); people with one photo are
// strangers, the rest left out.
const MinImages = 5

// LoadSplit describes the people of one LFW people list (file) through
// src: those with at least MinImages photos and the strangers with one.
// Photos that gave no descriptor are left out.
func LoadSplit(src *eval.LFWSource, file string) (*Split, error) {
	people, err := src.People([]string{file}, func(n int) bool { return n == 1 || n >= MinImages }, "describing "+file)
	if err != nil {
		return nil, err
	}
	s := &Split{}
	for _, p := range people {
		s.Stranger = append(s.Stranger, len(p.Descriptors) == 1)
		for _, d := range p.Descriptors {
			if len(d) > 0 {
				s.Descs = append(s.Descs, d)
				s.Identity = append(s.Identity, len(s.Stranger)-1)
			}
		}
	}
	return s, nil
}

// LoadSplitPublic is LoadSplit with each face's public features from pub
// (the age/gender network's region features: describer.Options.AgeGender)
// in Split.Public; faces missing either are left out.
func LoadSplitPublic(src, pub *eval.LFWSource, file string) (*Split, error) {
	keep := func(n int) bool { return n == 1 || n >= MinImages }
	people, err := src.People([]string{file}, keep, "describing "+file)
	if err != nil {
		return nil, err
	}
	public, err := pub.People([]string{file}, keep, "public features of "+file)
	if err != nil {
		return nil, err
	}
	if len(public) != len(people) {
		return nil, fmt.Errorf("collab: %d people described but %d with public features", len(people), len(public))
	}
	s := &Split{Public: [][]float32{}}
	for k, p := range people {
		s.Stranger = append(s.Stranger, len(p.Descriptors) == 1)
		if len(public[k].Descriptors) != len(p.Descriptors) {
			return nil, fmt.Errorf("collab: %s has %d photos described but %d with public features", p.Name, len(p.Descriptors), len(public[k].Descriptors))
		}
		for i, d := range p.Descriptors {
			if len(d) > 0 && len(public[k].Descriptors[i]) > 0 {
				s.Descs = append(s.Descs, d)
				s.Public = append(s.Public, public[k].Descriptors[i])
				s.Identity = append(s.Identity, len(s.Stranger)-1)
			}
		}
	}
	return s, nil
}

// LoadDevSplitsPublic is LoadDevSplits with public features
// (LoadSplitPublic).
func LoadDevSplitsPublic(src, pub *eval.LFWSource) (train, test *Split, err error) {
	if train, err = LoadSplitPublic(src, pub, DevTrainFile); err != nil {
		return nil, nil, err
	}
	if test, err = LoadSplitPublic(src, pub, DevTestFile); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// DevTrainFile and DevTestFile are LFW's development people lists: the
// training users' people and the held-out users' (veil bench collab).
const (
	DevTrainFile = "peopleDevTrain.txt"
	DevTestFile  = "peopleDevTest.txt"
)

// LoadDevSplits describes the people of LFW's development lists through
// src (LoadSplit of DevTrainFile, then of DevTestFile): the splits Run
// takes as its training and held-out users' people.
func LoadDevSplits(src *eval.LFWSource) (train, test *Split, err error) {
	if train, err = LoadSplit(src, DevTrainFile); err != nil {
		return nil, nil, err
	}
	if test, err = LoadSplit(src, DevTestFile); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}
