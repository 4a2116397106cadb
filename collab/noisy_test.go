package collab

import (
	"context"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func TestCorruptTagsReplacesExactlyTheFraction(t *testing.T) {
	for _, c := range []struct {
		n, classes int
		fraction   float64
	}{
		{1000, 2, 0.3},
		{1000, 7, 0.4},
		{999, 1024, 0.5},
		{10, 3, 0.25}, // round(2.5) = 3
		{50, 5, 0},
		{50, 5, 1},
	} {
		rng := rand.New(rand.NewPCG(uint64(c.n), uint64(c.classes)))
		tags := make([]int32, c.n)
		for i := range tags {
			tags[i] = int32(rng.IntN(c.classes))
		}
		orig := append([]int32(nil), tags...)
		out, idx, err := CorruptTags(tags, c.classes, c.fraction, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		want := int(math.Round(c.fraction * float64(c.n)))
		if len(idx) != want {
			t.Fatalf("%+v: %d indices replaced, want %d", c, len(idx), want)
		}
		replaced := map[int]bool{}
		for _, i := range idx {
			replaced[i] = true
		}
		if len(replaced) != want {
			t.Fatalf("%+v: an index replaced twice", c)
		}
		changed := 0
		for i := range out {
			if tags[i] != orig[i] {
				t.Fatal("CorruptTags changed its input")
			}
			if out[i] < 0 || int(out[i]) >= c.classes {
				t.Fatalf("%+v: tag %d outside the classes", c, out[i])
			}
			switch {
			case replaced[i] && out[i] == tags[i]:
				t.Fatalf("%+v: face %d kept its true class %d as its wrong tag", c, i, tags[i])
			case !replaced[i] && out[i] != tags[i]:
				t.Fatalf("%+v: face %d changed without being chosen", c, i)
			}
			if out[i] != tags[i] {
				changed++
			}
		}
		if changed != want {
			t.Fatalf("%+v: %d tags changed, want %d", c, changed, want)
		}
		again, _, _ := CorruptTags(tags, c.classes, c.fraction, rand.New(rand.NewPCG(1, 2)))
		for i := range out {
			if again[i] != out[i] {
				t.Fatalf("%+v: the same seed gave other wrong tags", c)
			}
		}
	}
	// The wrong tags spread over the other classes.
	tags := make([]int32, 3000)
	out, _, err := CorruptTags(tags, 4, 1, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	var n [4]int
	for _, c := range out {
		n[c]++
	}
	for c := 1; c < 4; c++ {
		if n[c] < 850 || n[c] > 1150 { // 1000 expected, σ ≈ 26
			t.Fatalf("wrong tags per class %v, want about 1000 for each of 1…3", n)
		}
	}
	for _, bad := range []struct {
		tags     []int32
		classes  int
		fraction float64
	}{
		{[]int32{0, 1}, 1, 0.5},
		{[]int32{0, 1}, 2, 1.5},
		{[]int32{0, 1}, 2, -0.1},
		{[]int32{0, 1}, 2, math.NaN()},
		{[]int32{0, 5}, 2, 1},
	} {
		if _, _, err := CorruptTags(bad.tags, bad.classes, bad.fraction, rand.New(rand.NewPCG(1, 1))); err == nil {
			t.Errorf("CorruptTags(%v, %d, %g) accepted", bad.tags, bad.classes, bad.fraction)
		}
	}
}

func TestHoldOutKeepsTestFacesOutOfTraining(t *testing.T) {
	s := synthSplit(3, 20, 7, 5)
	train, test := holdOut(s, rand.New(rand.NewPCG(1, 2)))
	in := map[*float32]bool{}
	for _, d := range train.Descs {
		in[&d[0]] = true
	}
	per := map[int]int{}
	for _, i := range test {
		if in[&s.Descs[i][0]] {
			t.Fatalf("held-out face %d also trains", i)
		}
		if s.Stranger[s.Identity[i]] {
			t.Fatalf("a stranger's face %d held out", i)
		}
		per[s.Identity[i]]++
	}
	for p := range 20 {
		if per[p] != 2 { // ⌈7/5⌉
			t.Fatalf("person %d: %d faces held out, want 2", p, per[p])
		}
	}
	if len(train.Descs)+len(test) != len(s.Descs) {
		t.Fatalf("%d training and %d held-out faces of %d", len(train.Descs), len(test), len(s.Descs))
	}
}

func TestNoisyTagsRefusesBadOptionsBeforeReadingData(t *testing.T) {
	for _, o := range []NoisyOptions{
		{Fractions: []float64{}},
		{Alphas: []float64{}},
		{Fractions: []float64{1}},
		{Fractions: []float64{-0.1}},
		{Alphas: []float64{0}},
		{Alphas: []float64{1.2}},
		{Alphas: []float64{math.NaN()}},
		{Users: -1},
		{HeldOut: -1},
		{Users: 2, MaxUsersPerPerson: 3},
		{Classes: 1},
		{Epochs: -1},
		{LearningRate: -1},
		{Hidden: -2},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("options %+v validated", o)
		}
		// A nil split would panic if it were read before the options'
		// check.
		if _, err := NoisyTags(context.Background(), nil, nil, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if err := (NoisyOptions{}).Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
}

// TestNoisyTagsReportsEveryCell runs a tiny experiment end to end on
// synthetic people: every (fraction, α) cell once, in order, with exactly
// the fraction of the training faces wrong, accuracies in [0, 1], and the
// clean classifier well above chance on well-separated people.
func TestNoisyTagsReportsEveryCell(t *testing.T) {
	s := synthSplit(5, 30, 8, 10)
	test := synthSplit(6, 12, 8, 10)
	o := NoisyOptions{Fractions: []float64{0.3, 0.5}, Alphas: []float64{0.8, 0.9, 1}, Users: 3, HeldOut: 2, Classes: 64,
		Epochs: 6, Batch: 16, LearningRate: 1e-2, Seed: 9}
	rep, err := NoisyTags(context.Background(), s, test, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Cells) != 6 {
		t.Fatalf("%d cells, want 6", len(rep.Cells))
	}
	i := 0
	for _, f := range o.Fractions {
		for _, a := range o.Alphas {
			c := rep.Cells[i]
			i++
			if c.Fraction != f || c.Alpha != a {
				t.Fatalf("cell %d is (%g, %g), want (%g, %g)", i, c.Fraction, c.Alpha, f, a)
			}
			if want := int(math.Round(f * float64(rep.TrainFaces))); c.WrongTags != want {
				t.Fatalf("(%g, %g): %d wrong tags of %d faces, want %d", f, a, c.WrongTags, rep.TrainFaces, want)
			}
			if !(c.Accuracy >= 0 && c.Accuracy <= 1) || math.IsNaN(c.Loss) {
				t.Fatalf("(%g, %g): accuracy %g, loss %g", f, a, c.Accuracy, c.Loss)
			}
			if h := c.HeldOutUsers; h == nil || h.Known == 0 || h.Strangers == 0 || !(h.Coverage >= 0 && h.Coverage <= 1) {
				t.Fatalf("(%g, %g): held-out users' suggestions %+v", f, a, h)
			}
		}
	}
	if rep.TestFaces != 30*2 || rep.TrainingPeople != 30 || rep.PersonLibraries < 30 {
		t.Fatalf("data: %+v", rep)
	}
	if rep.PlainHeldOutUsers == nil || rep.CleanHeldOutUsers == nil || rep.Goal == nil {
		t.Fatalf("held-out users not scored: %+v", rep)
	}
	if rep.Goal.Precision != 0.995 || rep.PlainHeldOutUsers.Known == 0 {
		t.Fatalf("goal %+v, plain %+v", rep.Goal, rep.PlainHeldOutUsers)
	}
	// 30 people among 64 classes: chance is a few percent.
	if rep.CleanAccuracy < 0.5 {
		t.Fatalf("clean-tag accuracy %g on well-separated people", rep.CleanAccuracy)
	}
	path := filepath.Join(t.TempDir(), "fig7.png")
	if err := PlotNoisy(rep, path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	if err := PlotNoisy(&NoisyReport{}, path); err == nil {
		t.Fatal("a report without cells plotted")
	}
}
