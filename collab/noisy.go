package collab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/tagging"
)

// NoisyOptions configures NoisyTags, Irene's Fig. 7 experiment. Zero
// fields take the defaults in brackets, smaller than Run's so that the
// nine trainings finish in minutes.
type NoisyOptions struct {
	// Fractions of wrong tags [0.3, 0.4, 0.5], each in [0, 1).
	Fractions []float64
	// Alphas are Eq. 2's α [0.8, 0.9, 1.0], each in (0, 1]; 1 is plain
	// cross-entropy.
	Alphas []float64
	// HeldOut is the number of held-out users [4], made of the test
	// split's people when NoisyTags gets one.
	HeldOut int
	// Users is the number of simulated training users [8];
	// MaxUsersPerPerson and PhotosPerUser as in Options [2, 10].
	Users, MaxUsersPerPerson, PhotosPerUser int
	// Classes is the number of hashed-tag classes n [1024].
	Classes int
	// Hidden is ψ's hidden width (0: linear).
	Hidden int
	// Epochs, Batch, LearningRate drive each training [10, 64, 3e-3].
	Epochs, Batch int
	LearningRate  float64
	// Seed seeds the simulation, the held-out faces, the wrong tags and
	// the initial weights.
	Seed uint64
	// Engine runs the trainings (nil: a private default).
	Engine *engine.Engine
	// Progress, if set, gets a line per training.
	Progress func(string)
}

// Validate reports the first option out of range (defaults filled in on a
// copy).
func (o NoisyOptions) Validate() error { return o.defaults() }

func (o *NoisyOptions) defaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Users, 8)
	def(&o.HeldOut, 4)
	def(&o.MaxUsersPerPerson, 2)
	def(&o.PhotosPerUser, 10)
	def(&o.Classes, 1024)
	def(&o.Epochs, 10)
	def(&o.Batch, 64)
	if o.LearningRate == 0 {
		o.LearningRate = 3e-3
	}
	if o.Fractions == nil {
		o.Fractions = []float64{0.3, 0.4, 0.5}
	}
	if o.Alphas == nil {
		o.Alphas = []float64{0.8, 0.9, 1.0}
	}
	switch {
	case len(o.Fractions) == 0 || len(o.Alphas) == 0:
		return errors.New("collab: noisy tags need at least one fraction and one α")
	case o.Users < 1 || o.HeldOut < 1:
		return fmt.Errorf("collab: need at least 1 training user and 1 held-out user, got %d and %d", o.Users, o.HeldOut)
	case o.MaxUsersPerPerson < 1 || o.MaxUsersPerPerson > o.Users:
		return fmt.Errorf("collab: a person's users must be 1…%d, got %d", o.Users, o.MaxUsersPerPerson)
	case o.PhotosPerUser < 1:
		return fmt.Errorf("collab: at least 1 photo of a person per library, got %d", o.PhotosPerUser)
	case o.Classes < 2:
		return fmt.Errorf("collab: at least 2 hashed-tag classes, got %d", o.Classes)
	case o.Hidden < 0:
		return fmt.Errorf("collab: ψ's hidden width must not be negative, got %d", o.Hidden)
	case o.Epochs < 1 || o.Batch < 1 || !(o.LearningRate > 0):
		return fmt.Errorf("collab: epochs, batch and learning rate must be positive, got %d, %d, %g", o.Epochs, o.Batch, o.LearningRate)
	}
	for _, f := range o.Fractions {
		if !(f >= 0 && f < 1) {
			return fmt.Errorf("collab: a fraction of wrong tags must be in [0, 1), got %g", f)
		}
	}
	for _, a := range o.Alphas {
		if !(a > 0 && a <= 1) {
			return fmt.Errorf("collab: α must be in (0, 1], got %g", a)
		}
	}
	return nil
}

// NoisyCell is one (fraction, α) training's outcome.
type NoisyCell struct {
	Fraction float64 `json:"fraction"`
	Alpha    float64 `json:"alpha"`
	// WrongTags is the number of training faces whose tag was replaced.
	WrongTags int `json:"wrong_tags"`
	// Accuracy is φ's accuracy on the held-out faces of the training
	// identities: the share whose predicted class is one of the person's
	// clean hashed tags.
	Accuracy float64 `json:"accuracy"`
	// HeldOutUsers are the held-out users' suggestions in ψ's space with
	// 3 named photos per person, at the setting chosen on the training
	// users by Run's main goal (absent without a test split).
	HeldOutUsers *Score `json:"held_out_users_named_3,omitempty"`
	// Loss is the last epoch's mean loss.
	Loss  float64 `json:"loss"`
	WallS float64 `json:"wall_s"`
}

// NoisyReport is NoisyTags' outcome.
type NoisyReport struct {
	Cells []NoisyCell `json:"cells"`
	// CleanAccuracy is the same classifier's accuracy trained on clean
	// tags with α = 1: the reference without tag noise.
	CleanAccuracy float64 `json:"clean_accuracy"`
	// CleanHeldOutUsers and PlainHeldOutUsers are the held-out users'
	// suggestions (as NoisyCell's) after training on clean tags and with
	// plain descriptors; Goal is the criterion their setting was chosen by
	// on the training users.
	CleanHeldOutUsers *Score `json:"clean_held_out_users_named_3,omitempty"`
	PlainHeldOutUsers *Score `json:"plain_held_out_users_named_3,omitempty"`
	Goal              *Goal  `json:"goal,omitempty"`
	// Users, TrainingPeople (named people of the split), PersonLibraries
	// (the units), TrainFaces and TestFaces describe the data.
	Users           int     `json:"users"`
	TrainingPeople  int     `json:"training_people"`
	PersonLibraries int     `json:"person_libraries"`
	TrainFaces      int     `json:"train_faces"`
	TestFaces       int     `json:"test_faces"`
	Classes         int     `json:"classes"`
	ClassesShared   float64 `json:"classes_shared"`
	Epochs          int     `json:"epochs"`
	WallS           float64 `json:"wall_s"`
}

// CorruptTags returns a copy of tags with exactly round(fraction·len)
// of them, chosen uniformly by rng, replaced by another class of
// 0…classes−1 (uniform over the classes other than the true one), and the
// indices it replaced.
func CorruptTags(tags []int32, classes int, fraction float64, rng *rand.Rand) ([]int32, []int, error) {
	if classes < 2 {
		return nil, nil, fmt.Errorf("collab: a wrong tag needs at least 2 classes, got %d", classes)
	}
	if !(fraction >= 0 && fraction <= 1) {
		return nil, nil, fmt.Errorf("collab: a fraction of wrong tags must be in [0, 1], got %g", fraction)
	}
	out := append([]int32(nil), tags...)
	k := int(math.Round(fraction * float64(len(tags))))
	idx := rng.Perm(len(tags))[:k]
	for _, i := range idx {
		c := int(tags[i])
		if c < 0 || c >= classes {
			return nil, nil, fmt.Errorf("collab: tag %d outside 0…%d", c, classes-1)
		}
		out[i] = int32((c + 1 + rng.IntN(classes-1)) % classes)
	}
	return out, idx, nil
}

// holdOut splits s into the faces that train and, per named person,
// ⌈photos/5⌉ held-out faces; strangers all train.
func holdOut(s *Split, rng *rand.Rand) (train *Split, test []int) {
	by := make([][]int, len(s.Stranger))
	for i, p := range s.Identity {
		by[p] = append(by[p], i)
	}
	out := make([]bool, len(s.Descs))
	for p, faces := range by {
		if s.Stranger[p] || len(faces) < 2 {
			continue
		}
		k := (len(faces) + 4) / 5
		for _, j := range rng.Perm(len(faces))[:k] {
			out[faces[j]] = true
			test = append(test, faces[j])
		}
	}
	train = &Split{Stranger: s.Stranger}
	for i, d := range s.Descs {
		if !out[i] {
			train.Descs = append(train.Descs, d)
			train.Identity = append(train.Identity, s.Identity[i])
		}
	}
	return train, test
}

// NoisyTags runs Irene's Fig. 7 experiment on split (LFW's development
// training identities): ⌈1/5⌉ of each named person's photos are held out,
// users are simulated from the rest as in Run and pool their hashed tags;
// for each fraction f, that share of the training faces gets a wrong tag
// (CorruptTags, the same faces and wrong tags for every α), and for each
// α, ψ and φ are bootstrapped from the identity with Eq. 2 and φ's
// accuracy on the held-out faces is measured. A held-out face counts as
// right when φ predicts one of its person's clean hashed tags (a person in
// several libraries has one per library). If test (LFW's development test
// identities) is not nil, held-out users are made of its people as in Run
// and their suggestions in each trained ψ's space are measured too.
func NoisyTags(ctx context.Context, split, test *Split, o NoisyOptions) (*NoisyReport, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	say := func(f string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(f, a...))
		}
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0xf167))
	trainSplit, testFaces := holdOut(split, rng)
	users := simulate(trainSplit, o.Users, o.MaxUsersPerPerson, o.PhotosPerUser, false, rng)
	data, shared, classOf, err := pooled(users, o.Classes, rng)
	if err != nil {
		return nil, err
	}
	// Each split person's clean tags.
	tags := map[int]map[int]bool{}
	for li, l := range users {
		for q, c := range classOf[li] {
			p := l.origin[q]
			if tags[p] == nil {
				tags[p] = map[int]bool{}
			}
			tags[p][c] = true
		}
	}
	var testX [][]float32
	var testP []int
	for _, i := range testFaces {
		if p := split.Identity[i]; tags[p] != nil {
			testX = append(testX, split.Descs[i])
			testP = append(testP, p)
		}
	}
	if data.Len() == 0 || len(testX) == 0 {
		return nil, errors.New("collab: no named person with at least 2 photos to train and test on")
	}
	rep := &NoisyReport{Users: o.Users, PersonLibraries: data.Units, TrainFaces: data.Len(), TestFaces: len(testX),
		Classes: o.Classes, ClassesShared: shared, Epochs: o.Epochs}
	for _, s := range split.Stranger {
		if !s {
			rep.TrainingPeople++
		}
	}
	suggest, err := heldOutSuggestions(users, test, &o)
	if err != nil {
		return nil, err
	}
	if suggest != nil {
		rep.Goal, rep.PlainHeldOutUsers = &suggest.goal, suggest.plain
	}
	clean := data.Class
	train := func(classes []int32, alpha float64) (float64, float64, *Score, error) {
		d := *data
		d.Class = classes
		ψ, err := NewPsi(PsiOptions{Hidden: o.Hidden, Seed: o.Seed})
		if err != nil {
			return 0, 0, nil, err
		}
		br, φ, err := bootstrap(ctx, ψ, &d, BootstrapOptions{Classes: o.Classes, Alpha: alpha, Epochs: o.Epochs,
			Batch: o.Batch, LearningRate: o.LearningRate, Seed: o.Seed, Engine: o.Engine})
		if err != nil {
			return 0, 0, nil, err
		}
		ys, err := ψ.ApplyAll(testX)
		if err != nil {
			return 0, 0, nil, err
		}
		right := 0
		for i, y := range ys {
			if tags[testP[i]][φ.predict(y)] {
				right++
			}
		}
		sc, err := suggest.score(ψ)
		return ratio(right, len(ys)), br.Loss, sc, err
	}
	if rep.CleanAccuracy, _, rep.CleanHeldOutUsers, err = train(clean, 1); err != nil {
		return nil, err
	}
	say("clean tags, α = 1: accuracy %.4f", rep.CleanAccuracy)
	for fi, f := range o.Fractions {
		noisy, wrong, err := CorruptTags(clean, o.Classes, f, rand.New(rand.NewPCG(o.Seed, 0x7a9<<8|uint64(fi))))
		if err != nil {
			return nil, err
		}
		for _, a := range o.Alphas {
			t1 := time.Now()
			acc, l, sc, err := train(noisy, a)
			if err != nil {
				return nil, err
			}
			rep.Cells = append(rep.Cells, NoisyCell{Fraction: f, Alpha: a, WrongTags: len(wrong), Accuracy: acc, Loss: l,
				HeldOutUsers: sc, WallS: time.Since(t1).Seconds()})
			say("%.0f%% wrong tags, α = %.2f: accuracy %.4f", 100*f, a, acc)
		}
	}
	rep.WallS = time.Since(t0).Seconds()
	return rep, nil
}

// heldOutScorer measures held-out users' suggestions in ψ's space at the
// setting chosen on the training users (3 named photos, one trial).
type heldOutScorer struct {
	users, held []*Library
	plainMedian float64
	goal        Goal
	plain       *Score
	o           *Options
}

// heldOutSuggestions prepares the held-out users of test (nil without a
// test split) and scores plain descriptors.
func heldOutSuggestions(users []*Library, test *Split, o *NoisyOptions) (*heldOutScorer, error) {
	if test == nil {
		return nil, nil
	}
	h := &heldOutScorer{users: users, o: &Options{Trials: 1, Seed: o.Seed}}
	h.held = simulate(test, o.HeldOut, 1, math.MaxInt, true, rand.New(rand.NewPCG(o.Seed, 0x4e1d)))
	plainSets, err := querySets(users, nil, 3, 1, o.Seed)
	if err != nil {
		return nil, err
	}
	h.plainMedian = medianNearest(plainSets)
	def := tagging.DefaultSuggestOptions()
	h.goal = Goal{Precision: 0.995, Strangers: scoreAt(plainSets, def.Distance, def.Margin).StrangersRate + 1e-9}
	if h.plain, err = h.score(nil); err != nil {
		return nil, err
	}
	return h, nil
}

// score measures the held-out users in ψ's space (nil ψ: plain
// descriptors); a nil scorer gives nil.
func (h *heldOutScorer) score(ψ *Psi) (*Score, error) {
	if h == nil {
		return nil, nil
	}
	var sp space
	if ψ != nil {
		sp = ψ.Apply
	}
	ts, err := tune(h.users, sp, h.plainMedian, h.o, []Goal{h.goal})
	if err != nil {
		return nil, err
	}
	s, err := heldOut(h.held, ts[0], 3, h.o)
	if err != nil {
		return nil, err
	}
	return &s, nil
}
