// Package asyncsim is Irene's Fig. 10 experiment: asynchronous training
// with package fed/strategy's algorithms — asynchronous EASGD with several
// communication periods λ, EASGD with dropout-thinned models, FedBuff
// and synchronous FedAvg — simulated in one process on a simulated clock,
// with one client several times slower than the others. The clients are
// users simulated from LFW by package collab (collab.NewTagTask), each
// training a small classifier over its persons' hashed tags; the report is
// the shared model's accuracy on held-out faces against simulated time and
// against the bytes the exchanges take on the wire (package fed/wire's
// encoding). Nothing here is a federation: no network, no coordinator; it
// measures the algorithms.
package asyncsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/collab"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// Options configures Simulate, Irene's Fig. 10 experiment: a simulation
// in one process with simulated clocks. Zero fields take the defaults in
// brackets.
type Options struct {
	// Users is the number of simulated training users (clients) [8];
	// MaxUsersPerPerson and PhotosPerUser as in Options [2, 10].
	Users, MaxUsersPerPerson, PhotosPerUser int
	// Classes is the number of hashed-tag classes n [512].
	Classes int
	// Hidden is the width of the model's fully connected hidden layer,
	// the one dropout thins [64].
	Hidden int
	// Batch is each local SGD step's examples [8]; LearningRate its η
	// [0.05].
	Batch        int
	LearningRate float64
	// Periods are EASGD's communication periods λ [16, 32, 64] (dropout
	// p = 0); Drops the dropout rates p [0.3, 0.4, 0.5], each run with
	// EASGD at DropPeriod [64] (Irene's setting).
	Periods    []int
	Drops      []float64
	DropPeriod int
	// Beta is EASGD's moving rate β [0.2].
	Beta float64
	// LocalSteps are FedAvg's and FedBuff's local steps per update [32];
	// BufferSize FedBuff's updates per model version [3] and MaxStaleness
	// its staleness limit in versions [16: the slow client's updates are
	// about 12 versions old with the other defaults].
	LocalSteps, BufferSize, MaxStaleness int
	// Slowdown is how many times longer the slow client's (client 0's)
	// steps take [5].
	Slowdown float64
	// Duration is the simulated time each strategy runs, in units of one
	// fast client's local step [3000]; EvalEvery the simulated time
	// between two measurements of the shared model [100].
	Duration, EvalEvery float64
	// Target is the accuracy whose first reaching is reported per
	// strategy (0: half the best final accuracy of all strategies).
	Target float64
	// Seed seeds the simulation, the held-out faces, initial weights,
	// batches and thinning.
	Seed uint64
	// Progress, if set, gets a line per strategy.
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
	deff := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Users, 8)
	def(&o.MaxUsersPerPerson, 2)
	def(&o.PhotosPerUser, 10)
	def(&o.Classes, 512)
	def(&o.Hidden, 64)
	def(&o.Batch, 8)
	def(&o.DropPeriod, 64)
	def(&o.LocalSteps, 32)
	def(&o.BufferSize, 3)
	def(&o.MaxStaleness, 16)
	deff(&o.LearningRate, 0.05)
	deff(&o.Beta, 0.2)
	deff(&o.Slowdown, 5)
	deff(&o.Duration, 3000)
	deff(&o.EvalEvery, 100)
	if o.Periods == nil {
		o.Periods = []int{16, 32, 64}
	}
	if o.Drops == nil {
		o.Drops = []float64{0.3, 0.4, 0.5}
	}
	switch {
	case o.Users < 2:
		return fmt.Errorf("asyncsim: need at least 2 clients, got %d", o.Users)
	case o.MaxUsersPerPerson < 1 || o.MaxUsersPerPerson > o.Users:
		return fmt.Errorf("asyncsim: a person's users must be 1…%d, got %d", o.Users, o.MaxUsersPerPerson)
	case o.PhotosPerUser < 1 || o.Classes < 2 || o.Hidden < 1 || o.Batch < 1:
		return errors.New("asyncsim: photos per user, hidden width and batch must be at least 1, classes at least 2")
	case !(o.LearningRate > 0) || math.IsInf(o.LearningRate, 0):
		return fmt.Errorf("asyncsim: learning rate must be positive and finite, got %g", o.LearningRate)
	case o.LocalSteps < 1 || o.BufferSize < 1 || o.MaxStaleness < 0 || o.DropPeriod < 1:
		return errors.New("asyncsim: local steps, buffer size and dropout's period must be at least 1, staleness not negative")
	case !(o.Slowdown >= 1) || math.IsInf(o.Slowdown, 0):
		return fmt.Errorf("asyncsim: the slow client's slowdown must be finite and at least 1, got %g", o.Slowdown)
	case !(o.Duration > 0) || !(o.EvalEvery > 0) || o.Duration/o.EvalEvery > 1e5:
		return fmt.Errorf("asyncsim: duration and evaluation interval must be positive, at most 1e5 evaluations, got %g and %g", o.Duration, o.EvalEvery)
	case o.Target < 0 || o.Target > 1:
		return fmt.Errorf("asyncsim: target accuracy %g outside [0, 1]", o.Target)
	}
	for _, l := range o.Periods {
		if l < 1 {
			return fmt.Errorf("asyncsim: EASGD period λ must be at least 1, got %d", l)
		}
	}
	for _, p := range o.Drops {
		if !(p >= 0 && p < 1) {
			return fmt.Errorf("asyncsim: dropout rate p must be in [0, 1), got %g", p)
		}
	}
	return (strategy.EASGDOptions{Beta: o.Beta, Period: 1, LearningRate: o.LearningRate}).Validate()
}

// Point is one measurement of a strategy's shared model.
type Point struct {
	// Time is simulated time (units of one fast client's step).
	Time float64 `json:"time"`
	// Bytes are all clients' bytes sent and received so far (wire
	// encoding: header and payload of every model and update).
	Bytes int64 `json:"bytes"`
	// Accuracy is the shared model's on the held-out faces.
	Accuracy float64 `json:"accuracy"`
}

// Run is one strategy's run.
type Run struct {
	Name     string  `json:"name"`
	Strategy string  `json:"strategy"`
	Period   int     `json:"period,omitempty"`
	Drop     float64 `json:"drop"`
	// Curve is the accuracy against time and bytes.
	Curve []Point `json:"curve"`
	// Final is the last point.
	Final Point `json:"final"`
	// TimeToTarget and BytesToTarget are the first point at or above the
	// report's target (null: never reached).
	TimeToTarget  *float64 `json:"time_to_target"`
	BytesToTarget *int64   `json:"bytes_to_target"`
	// Exchanges counts the updates the server accepted, Refused those
	// refused as too stale (FedBuff), SlowUpdates the slow client's
	// accepted ones.
	Exchanges   int `json:"exchanges"`
	Refused     int `json:"refused_stale"`
	SlowUpdates int `json:"slow_client_updates"`
	// KeptShare is the mean share of the model's values exchanged (1
	// without thinning).
	KeptShare float64 `json:"kept_share"`
	// ModelBytes is the full model's wire size.
	ModelBytes int     `json:"model_bytes"`
	WallS      float64 `json:"wall_s"`
}

// Report is Simulate's outcome.
type Report struct {
	Runs []Run `json:"runs"`
	// Target is the accuracy of TimeToTarget.
	Target float64 `json:"target"`
	// Clock says what the simulated time is.
	Clock           string  `json:"clock"`
	Users           int     `json:"users"`
	Slowdown        float64 `json:"slowdown"`
	TrainFaces      int     `json:"train_faces"`
	TestFaces       int     `json:"test_faces"`
	PersonLibraries int     `json:"person_libraries"`
	Classes         int     `json:"classes"`
	Parameters      int     `json:"parameters"`
	WallS           float64 `json:"wall_s"`
}

// mlp is the simulated task's model: x → ReLU(x·W₁ + b₁)·W₂ + b₂, softmax
// over the hashed-tag classes. Its hidden layer is the fully connected
// layer dropout thins.
type mlp struct{ in, hidden, classes int }

const (
	mlpW1, mlpB1, mlpW2, mlpB2 = "fc1/w", "fc1/b", "fc2/w", "fc2/b"
)

// thinLayers is the hidden layer as strategy.Thin sees it.
var thinLayers = []strategy.FCLayer{{Weight: mlpW1, Bias: mlpB1, Next: mlpW2}}

// init returns He-initialised weights (biases zero).
func (m mlp) init(rng *rand.Rand) wire.Weights {
	w := m.zero()
	for _, t := range []int{0, 2} {
		std := math.Sqrt(2 / float64(w[t].Shape[0]))
		for i := range w[t].Values {
			w[t].Values[i] = float32(rng.NormFloat64() * std)
		}
	}
	return w
}

func (m mlp) zero() wire.Weights {
	return wire.Weights{
		{Name: mlpW1, Shape: []int{m.in, m.hidden}, Values: make([]float32, m.in*m.hidden)},
		{Name: mlpB1, Shape: []int{m.hidden}, Values: make([]float32, m.hidden)},
		{Name: mlpW2, Shape: []int{m.hidden, m.classes}, Values: make([]float32, m.hidden*m.classes)},
		{Name: mlpB2, Shape: []int{m.classes}, Values: make([]float32, m.classes)},
	}
}

// forward returns the hidden activations and the logits of x. keep, if
// not nil, is the thinned model's hidden units (Irene Section III.C): a
// dropped unit is absent, its activation 0, so it neither contributes to
// the logits nor receives a gradient.
func (m mlp) forward(w wire.Weights, x []float32, keep []bool) (h, z []float64) {
	h = make([]float64, m.hidden)
	for j := range h {
		h[j] = float64(w[1].Values[j])
	}
	for i, v := range x {
		row := w[0].Values[i*m.hidden : (i+1)*m.hidden]
		for j, a := range row {
			h[j] += float64(v) * float64(a)
		}
	}
	for j, k := range keep {
		if !k {
			h[j] = 0
		}
	}
	z = make([]float64, m.classes)
	for c := range z {
		z[c] = float64(w[3].Values[c])
	}
	for j := range h {
		if h[j] < 0 {
			h[j] = 0
			continue
		}
		row := w[2].Values[j*m.classes : (j+1)*m.classes]
		for c, a := range row {
			z[c] += h[j] * float64(a)
		}
	}
	return h, z
}

// predict is argmax of the logits.
func (m mlp) predict(w wire.Weights, x []float32) int {
	_, z := m.forward(w, x, nil)
	arg := 0
	for c, v := range z {
		if v > z[arg] {
			arg = c
		}
	}
	return arg
}

// gradient is the mean softmax cross-entropy's gradient over the batch,
// and the mean loss, of the model thinned to keep (nil: the whole model;
// a dropped unit's parameters get a zero gradient).
func (m mlp) gradient(w wire.Weights, xs [][]float32, ys []int32, keep []bool) (wire.Weights, float64) {
	g := m.zero()
	var loss float64
	inv := 1 / float64(len(xs))
	dh := make([]float64, m.hidden)
	for n, x := range xs {
		h, z := m.forward(w, x, keep)
		mx := z[0]
		for _, v := range z {
			mx = max(mx, v)
		}
		var sum float64
		for c := range z {
			z[c] = math.Exp(z[c] - mx)
			sum += z[c]
		}
		y := int(ys[n])
		loss -= math.Log(z[y]/sum) * inv
		clear(dh)
		for c := range z {
			d := z[c] / sum
			if c == y {
				d--
			}
			d *= inv
			g[3].Values[c] += float32(d)
			for j, hv := range h {
				if hv == 0 {
					continue
				}
				g[2].Values[j*m.classes+c] += float32(hv * d)
				dh[j] += d * float64(w[2].Values[j*m.classes+c])
			}
		}
		for j, hv := range h {
			if hv == 0 {
				continue
			}
			g[1].Values[j] += float32(dh[j])
			for i, v := range x {
				g[0].Values[i*m.hidden+j] += float32(float64(v) * dh[j])
			}
		}
	}
	return g, loss
}

// client is one simulated library's training data.
type client struct {
	x   [][]float32
	y   []int32
	rng *rand.Rand
}

func (c *client) batch(n int) ([][]float32, []int32) {
	xs := make([][]float32, n)
	ys := make([]int32, n)
	for i := range xs {
		k := c.rng.IntN(len(c.x))
		xs[i], ys[i] = c.x[k], c.y[k]
	}
	return xs, ys
}

// task is the simulation's data and model.
type task struct {
	m       mlp
	clients []*client
	testX   [][]float32
	testOK  []map[int]bool
	o       *Options
	units   int
}

// accuracy is the share of held-out faces whose predicted class is one of
// their person's hashed tags.
func (t *task) accuracy(w wire.Weights) float64 {
	right := 0
	for i, x := range t.testX {
		if t.testOK[i][t.m.predict(w, x)] {
			right++
		}
	}
	if len(t.testX) == 0 {
		return 0
	}
	return float64(right) / float64(len(t.testX))
}

// wireBytes is the wire size of w: its header (protobuf) and payload.
func wireBytes(w wire.Weights) int64 {
	h, p := w.Encode()
	return int64(proto.Size(h) + len(p))
}

// stepTime is client k's simulated step duration.
func (t *task) stepTime(k int) float64 {
	if k == 0 {
		return t.o.Slowdown
	}
	return 1
}

// recorder samples a run's shared model at every EvalEvery of simulated
// time.
type recorder struct {
	t     *task
	run   *Run
	next  float64
	bytes int64
}

// upTo records the model at every sampling time ≤ now not yet recorded.
func (r *recorder) upTo(now float64, model func() wire.Weights) {
	for r.next <= now && r.next <= r.t.o.Duration {
		r.run.Curve = append(r.run.Curve, Point{Time: r.next, Bytes: r.bytes, Accuracy: r.t.accuracy(model())})
		r.next += r.t.o.EvalEvery
	}
}

// nextClient is the client whose next event comes first (ties: the lower
// index).
func nextClient(at []float64) int {
	k := 0
	for i, v := range at {
		if v < at[k] {
			k = i
		}
	}
	return k
}

// runEASGD simulates asynchronous EASGD (strategy.EASGDCentre and
// EASGDClient) with period λ, the centre thinned with dropout p at every
// exchange (strategy.Thin): the client receives the kept units, computes
// its elastic difference on them (its own values stand for the dropped
// ones, so their difference is zero) and sends the difference of the kept
// units, which the centre merges (Thinned.Merge) and applies. Until its
// next exchange the client trains only that thinned model (Irene
// Algorithm 1 with Section III.C's thinned models): the dropped units are
// absent from its forward pass and their parameters do not move.
func (t *task) runEASGD(start wire.Weights, period int, drop float64, rng *rand.Rand) (*Run, error) {
	o := t.o
	run := &Run{Name: fmt.Sprintf("easgd_l%d", period), Strategy: "easgd", Period: period, Drop: drop, ModelBytes: int(wireBytes(start))}
	if drop > 0 {
		run.Name = fmt.Sprintf("easgd_l%d_p%g", period, drop)
	}
	centre, err := strategy.NewEASGDCentre(start)
	if err != nil {
		return nil, err
	}
	cl := make([]*strategy.EASGDClient, len(t.clients))
	for k := range cl {
		if cl[k], err = strategy.NewEASGDClient(strategy.EASGDOptions{Beta: o.Beta, Period: period, LearningRate: o.LearningRate}, start); err != nil {
			return nil, err
		}
	}
	rec := &recorder{t: t, run: run}
	at := make([]float64, len(cl))
	var kept float64
	thin := strategy.ThinOptions{Drop: drop, Layers: thinLayers}
	masks := make([][]bool, len(cl)) // each client's thinned model (nil: whole)
	for {
		k := nextClient(at)
		now := at[k]
		rec.upTo(now, centre.Centre)
		if now >= o.Duration {
			break
		}
		c := cl[k]
		if c.Due() {
			seed := rng.Uint64()
			th, err := strategy.Thin(centre.Centre(), thin, rand.New(rand.NewPCG(seed, 0x7417)))
			if err != nil {
				return nil, err
			}
			// The client's view of the centre: the kept units' values,
			// its own for the dropped ones.
			own := c.Params()
			view, err := overlay(th, own)
			if err != nil {
				return nil, err
			}
			diff, err := c.Elastic(view)
			if err != nil {
				return nil, err
			}
			up, err := strategy.Thin(diff, thin, rand.New(rand.NewPCG(seed, 0x7417)))
			if err != nil {
				return nil, err
			}
			full, err := th.Merge(up.Model)
			if err != nil {
				return nil, err
			}
			if err := centre.Apply(full); err != nil {
				return nil, err
			}
			if drop > 0 {
				masks[k] = keptUnits(th.Kept[0], t.m.hidden)
			}
			rec.bytes += wireBytes(th.Model) + wireBytes(up.Model)
			kept += th.KeptShare()
			run.Exchanges++
			if k == 0 {
				run.SlowUpdates++
			}
		}
		xs, ys := t.clients[k].batch(o.Batch)
		g, _ := t.m.gradient(c.Params(), xs, ys, masks[k])
		if err := c.Step(g); err != nil {
			return nil, err
		}
		at[k] += t.stepTime(k)
	}
	run.KeptShare = 1
	if run.Exchanges > 0 {
		run.KeptShare = kept / float64(run.Exchanges)
	}
	return run, nil
}

// keptUnits marks the kept units among n.
func keptUnits(kept []int, n int) []bool {
	out := make([]bool, n)
	for _, u := range kept {
		out[u] = true
	}
	return out
}

// overlay is own with the thinned model's kept values put in their places:
// Merge of the thinned model gives the kept values and zeros, Merge of
// ones marks which values were kept.
func overlay(th *strategy.Thinned, own wire.Weights) (wire.Weights, error) {
	vals, err := th.Merge(th.Model)
	if err != nil {
		return nil, err
	}
	ones := th.Model.Clone()
	for i := range ones {
		for j := range ones[i].Values {
			ones[i].Values[j] = 1
		}
	}
	mask, err := th.Merge(ones)
	if err != nil {
		return nil, err
	}
	out := own.Clone()
	for i := range out {
		for j := range out[i].Values {
			if mask[i].Values[j] != 0 {
				out[i].Values[j] = vals[i].Values[j]
			}
		}
	}
	return out, nil
}

// localTrain runs steps local SGD steps of client k from w and returns the
// difference (trained − w).
func (t *task) localTrain(k int, w wire.Weights, steps int) wire.Weights {
	cur := w.Clone()
	for range steps {
		xs, ys := t.clients[k].batch(t.o.Batch)
		g, _ := t.m.gradient(cur, xs, ys, nil)
		for i := range cur {
			for j := range cur[i].Values {
				cur[i].Values[j] -= float32(t.o.LearningRate * float64(g[i].Values[j]))
			}
		}
	}
	for i := range cur {
		for j := range cur[i].Values {
			cur[i].Values[j] -= w[i].Values[j]
		}
	}
	return cur
}

// runFedBuff simulates buffered asynchronous aggregation
// (strategy.FedBuff): each client trains LocalSteps steps from the model
// version it holds, sends the difference, and fetches the newest model.
func (t *task) runFedBuff(start wire.Weights) (*Run, error) {
	o := t.o
	run := &Run{Name: "fedbuff", Strategy: "fedbuff", KeptShare: 1, ModelBytes: int(wireBytes(start))}
	fb, err := strategy.NewFedBuff(strategy.FedBuffOptions{BufferSize: o.BufferSize, MaxStaleness: o.MaxStaleness}, start)
	if err != nil {
		return nil, err
	}
	rec := &recorder{t: t, run: run}
	at := make([]float64, len(t.clients))
	base := make([]uint64, len(t.clients))
	held := make([]wire.Weights, len(t.clients))
	for k := range held {
		held[k] = fb.Model()
		rec.bytes += int64(run.ModelBytes)
		at[k] = float64(o.LocalSteps) * t.stepTime(k)
	}
	for {
		k := nextClient(at)
		now := at[k]
		rec.upTo(now, fb.Model)
		if now >= o.Duration {
			break
		}
		d := t.localTrain(k, held[k], o.LocalSteps)
		rec.bytes += wireBytes(d)
		_, err := fb.Add(d, base[k])
		switch {
		case errors.Is(err, strategy.ErrStale):
			run.Refused++
		case err != nil:
			return nil, err
		default:
			run.Exchanges++
			if k == 0 {
				run.SlowUpdates++
			}
		}
		held[k], base[k] = fb.Model(), fb.Version()
		rec.bytes += int64(run.ModelBytes)
		at[k] += float64(o.LocalSteps) * t.stepTime(k)
	}
	return run, nil
}

// runFedAvg simulates synchronous FedAvg rounds (strategy.New("fedavg"),
// examples weighting): every client trains LocalSteps steps from the
// model; the round ends when the slowest has sent its difference.
func (t *task) runFedAvg(start wire.Weights) (*Run, error) {
	o := t.o
	run := &Run{Name: "fedavg", Strategy: "fedavg", KeptShare: 1, ModelBytes: int(wireBytes(start))}
	s, err := strategy.New(strategy.Options{Name: "fedavg", Weighting: "examples"})
	if err != nil {
		return nil, err
	}
	rec := &recorder{t: t, run: run}
	model := start.Clone()
	cur := func() wire.Weights { return model }
	round := 0.0
	for k := range t.clients {
		round = max(round, float64(o.LocalSteps)*t.stepTime(k))
	}
	now := 0.0
	for {
		rec.upTo(now, cur)
		if now >= o.Duration {
			break
		}
		sum := strategy.NewSum(model)
		for k, c := range t.clients {
			d := t.localTrain(k, model, o.LocalSteps)
			w, err := s.Weight(uint64(len(c.x)))
			if err != nil {
				return nil, err
			}
			if err := sum.Add(d, w); err != nil {
				return nil, err
			}
			rec.bytes += int64(run.ModelBytes) + wireBytes(d)
			run.Exchanges++
			if k == 0 {
				run.SlowUpdates++
			}
		}
		mean, err := sum.Mean()
		if err != nil {
			return nil, err
		}
		if model, _, err = s.Apply(model, mean, len(t.clients), nil); err != nil {
			return nil, err
		}
		now += round
		// The model after the round exists at its end.
		rec.upTo(now-1e-9, func() wire.Weights { return model })
	}
	return run, nil
}

// Simulate runs Irene's Fig. 10 experiment on split (LFW's development
// training identities): ⌈1/5⌉ of each named person's photos are held out;
// users are simulated from the rest as in NoisyTags, each with its
// persons' hashed tags; each user is a client training a small classifier
// over the hashed-tag classes (one hidden fully connected layer) by SGD.
// Client 0's steps take Slowdown times longer. Each strategy runs for the
// same simulated time from the same initial model: asynchronous EASGD
// with every period in Periods, EASGD at DropPeriod with every dropout
// rate in Drops, FedBuff and synchronous FedAvg; the shared model (EASGD's
// centre, the server's model) is measured every EvalEvery on the held-out
// faces. The clock is simulated: a step takes one unit (Slowdown for the
// slow client), exchanges take none; wall time on this machine is
// reported separately.
func Simulate(ctx context.Context, split *collab.Split, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	rng := rand.New(rand.NewPCG(o.Seed, 0xa5c))
	t, err := newTask(split, &o, rng)
	if err != nil {
		return nil, err
	}
	start := t.m.init(rng)
	rep := &Report{Clock: fmt.Sprintf("simulated: one unit per local step of a fast client, %g per step of the slow one (client 0); exchanges take no simulated time", o.Slowdown),
		Users: o.Users, Slowdown: o.Slowdown, Classes: o.Classes, Parameters: start.Len(), TestFaces: len(t.testX)}
	for _, c := range t.clients {
		rep.TrainFaces += len(c.x)
	}
	type job struct {
		name string
		run  func() (*Run, error)
	}
	var jobs []job
	for _, l := range o.Periods {
		jobs = append(jobs, job{fmt.Sprintf("EASGD λ = %d", l), func() (*Run, error) {
			return t.runEASGD(start, l, 0, rand.New(rand.NewPCG(o.Seed, uint64(l))))
		}})
	}
	for _, p := range o.Drops {
		jobs = append(jobs, job{fmt.Sprintf("EASGD λ = %d, p = %g", o.DropPeriod, p), func() (*Run, error) {
			return t.runEASGD(start, o.DropPeriod, p, rand.New(rand.NewPCG(o.Seed, math.Float64bits(p))))
		}})
	}
	jobs = append(jobs, job{"FedBuff", func() (*Run, error) { return t.runFedBuff(start) }},
		job{"FedAvg", func() (*Run, error) { return t.runFedAvg(start) }})
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t.reseed(o.Seed)
		t1 := time.Now()
		r, err := j.run()
		if err != nil {
			return nil, fmt.Errorf("asyncsim: %s: %w", j.name, err)
		}
		r.WallS = time.Since(t1).Seconds()
		if n := len(r.Curve); n > 0 {
			r.Final = r.Curve[n-1]
		}
		rep.Runs = append(rep.Runs, *r)
		if o.Progress != nil {
			o.Progress(fmt.Sprintf("%s: accuracy %.4f after %g units, %d bytes", j.name, r.Final.Accuracy, r.Final.Time, r.Final.Bytes))
		}
	}
	rep.Target = o.Target
	if rep.Target == 0 {
		for _, r := range rep.Runs {
			rep.Target = max(rep.Target, 0.5*r.Final.Accuracy)
		}
	}
	for i := range rep.Runs {
		r := &rep.Runs[i]
		for _, p := range r.Curve {
			if p.Accuracy >= rep.Target {
				tt, b := p.Time, p.Bytes
				r.TimeToTarget, r.BytesToTarget = &tt, &b
				break
			}
		}
	}
	rep.PersonLibraries = t.units
	rep.WallS = time.Since(t0).Seconds()
	return rep, nil
}

// newTask builds the clients from collab.NewTagTask's users, their
// descriptors scaled by √dim: descriptors have unit length, scaled their
// coordinates have about unit variance, the scale He initialisation
// assumes.
func newTask(split *collab.Split, o *Options, rng *rand.Rand) (*task, error) {
	tt, err := collab.NewTagTask(split, o.Users, o.MaxUsersPerPerson, o.PhotosPerUser, o.Classes, rng)
	if err != nil {
		return nil, err
	}
	t := &task{m: mlp{in: tt.Dim, hidden: o.Hidden, classes: o.Classes}, o: o, units: tt.PersonLibraries, testOK: tt.TestTags}
	scale := float32(math.Sqrt(float64(tt.Dim)))
	scaled := func(xs [][]float32) [][]float32 {
		out := make([][]float32, len(xs))
		for k, x := range xs {
			out[k] = make([]float32, len(x))
			for i, v := range x {
				out[k][i] = v * scale
			}
		}
		return out
	}
	for _, u := range tt.Users {
		t.clients = append(t.clients, &client{x: scaled(u.X), y: u.Class})
	}
	t.testX = scaled(tt.TestX)
	return t, nil
}

// reseed restarts every client's batch draws, so each strategy sees the
// same sequence of batches per client.
func (t *task) reseed(seed uint64) {
	for k, c := range t.clients {
		c.rng = rand.New(rand.NewPCG(seed, 0xba7c<<16|uint64(k)))
	}
}
