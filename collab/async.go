package collab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// AsyncOptions configures Async, Irene's Fig. 10 experiment: a simulation
// in one process with simulated clocks. Zero fields take the defaults in
// brackets.
type AsyncOptions struct {
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
func (o AsyncOptions) Validate() error { return o.defaults() }

func (o *AsyncOptions) defaults() error {
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
		return fmt.Errorf("collab: need at least 2 clients, got %d", o.Users)
	case o.MaxUsersPerPerson < 1 || o.MaxUsersPerPerson > o.Users:
		return fmt.Errorf("collab: a person's users must be 1…%d, got %d", o.Users, o.MaxUsersPerPerson)
	case o.PhotosPerUser < 1 || o.Classes < 2 || o.Hidden < 1 || o.Batch < 1:
		return errors.New("collab: photos per user, hidden width and batch must be at least 1, classes at least 2")
	case !(o.LearningRate > 0) || math.IsInf(o.LearningRate, 0):
		return fmt.Errorf("collab: learning rate must be positive and finite, got %g", o.LearningRate)
	case o.LocalSteps < 1 || o.BufferSize < 1 || o.MaxStaleness < 0 || o.DropPeriod < 1:
		return errors.New("collab: local steps, buffer size and dropout's period must be at least 1, staleness not negative")
	case !(o.Slowdown >= 1) || math.IsInf(o.Slowdown, 0):
		return fmt.Errorf("collab: the slow client's slowdown must be finite and at least 1, got %g", o.Slowdown)
	case !(o.Duration > 0) || !(o.EvalEvery > 0) || o.Duration/o.EvalEvery > 1e5:
		return fmt.Errorf("collab: duration and evaluation interval must be positive, at most 1e5 evaluations, got %g and %g", o.Duration, o.EvalEvery)
	case o.Target < 0 || o.Target > 1:
		return fmt.Errorf("collab: target accuracy %g outside [0, 1]", o.Target)
	}
	for _, l := range o.Periods {
		if l < 1 {
			return fmt.Errorf("collab: EASGD period λ must be at least 1, got %d", l)
		}
	}
	for _, p := range o.Drops {
		if !(p >= 0 && p < 1) {
			return fmt.Errorf("collab: dropout rate p must be in [0, 1), got %g", p)
		}
	}
	return (strategy.EASGDOptions{Beta: o.Beta, Period: 1, LearningRate: o.LearningRate}).Validate()
}

// AsyncPoint is one measurement of a strategy's shared model.
type AsyncPoint struct {
	// Time is simulated time (units of one fast client's step).
	Time float64 `json:"time"`
	// Bytes are all clients' bytes sent and received so far (wire
	// encoding: header and payload of every model and update).
	Bytes int64 `json:"bytes"`
	// Accuracy is the shared model's on the held-out faces.
	Accuracy float64 `json:"accuracy"`
}

// AsyncRun is one strategy's run.
type AsyncRun struct {
	Name     string  `json:"name"`
	Strategy string  `json:"strategy"`
	Period   int     `json:"period,omitempty"`
	Drop     float64 `json:"drop"`
	// Curve is the accuracy against time and bytes.
	Curve []AsyncPoint `json:"curve"`
	// Final is the last point.
	Final AsyncPoint `json:"final"`
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

// AsyncReport is Async's outcome.
type AsyncReport struct {
	Runs []AsyncRun `json:"runs"`
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

// forward returns the hidden activations and the logits of x.
func (m mlp) forward(w wire.Weights, x []float32) (h, z []float64) {
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
	_, z := m.forward(w, x)
	arg := 0
	for c, v := range z {
		if v > z[arg] {
			arg = c
		}
	}
	return arg
}

// gradient is the mean softmax cross-entropy's gradient over the batch,
// and the mean loss.
func (m mlp) gradient(w wire.Weights, xs [][]float32, ys []int32) (wire.Weights, float64) {
	g := m.zero()
	var loss float64
	inv := 1 / float64(len(xs))
	dh := make([]float64, m.hidden)
	for n, x := range xs {
		h, z := m.forward(w, x)
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

// asyncClient is one simulated library's training data.
type asyncClient struct {
	x   [][]float32
	y   []int32
	rng *rand.Rand
}

func (c *asyncClient) batch(n int) ([][]float32, []int32) {
	xs := make([][]float32, n)
	ys := make([]int32, n)
	for i := range xs {
		k := c.rng.IntN(len(c.x))
		xs[i], ys[i] = c.x[k], c.y[k]
	}
	return xs, ys
}

// asyncTask is the simulation's data and model.
type asyncTask struct {
	m       mlp
	clients []*asyncClient
	testX   [][]float32
	testOK  []map[int]bool
	o       *AsyncOptions
	units   int
}

// accuracy is the share of held-out faces whose predicted class is one of
// their person's hashed tags.
func (t *asyncTask) accuracy(w wire.Weights) float64 {
	right := 0
	for i, x := range t.testX {
		if t.testOK[i][t.m.predict(w, x)] {
			right++
		}
	}
	return ratio(right, len(t.testX))
}

// wireBytes is the wire size of w: its header (protobuf) and payload.
func wireBytes(w wire.Weights) int64 {
	h, p := w.Encode()
	return int64(proto.Size(h) + len(p))
}

// stepTime is client k's simulated step duration.
func (t *asyncTask) stepTime(k int) float64 {
	if k == 0 {
		return t.o.Slowdown
	}
	return 1
}

// recorder samples a run's shared model at every EvalEvery of simulated
// time.
type recorder struct {
	t     *asyncTask
	run   *AsyncRun
	next  float64
	bytes int64
}

// upTo records the model at every sampling time ≤ now not yet recorded.
func (r *recorder) upTo(now float64, model func() wire.Weights) {
	for r.next <= now && r.next <= r.t.o.Duration {
		r.run.Curve = append(r.run.Curve, AsyncPoint{Time: r.next, Bytes: r.bytes, Accuracy: r.t.accuracy(model())})
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
// units, which the centre merges (Thinned.Merge) and applies.
func (t *asyncTask) runEASGD(start wire.Weights, period int, drop float64, rng *rand.Rand) (*AsyncRun, error) {
	o := t.o
	run := &AsyncRun{Name: fmt.Sprintf("easgd_l%d", period), Strategy: "easgd", Period: period, Drop: drop, ModelBytes: int(wireBytes(start))}
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
			rec.bytes += wireBytes(th.Model) + wireBytes(up.Model)
			kept += th.KeptShare()
			run.Exchanges++
			if k == 0 {
				run.SlowUpdates++
			}
		}
		xs, ys := t.clients[k].batch(o.Batch)
		g, _ := t.m.gradient(c.Params(), xs, ys)
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
func (t *asyncTask) localTrain(k int, w wire.Weights, steps int) wire.Weights {
	cur := w.Clone()
	for range steps {
		xs, ys := t.clients[k].batch(t.o.Batch)
		g, _ := t.m.gradient(cur, xs, ys)
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
func (t *asyncTask) runFedBuff(start wire.Weights) (*AsyncRun, error) {
	o := t.o
	run := &AsyncRun{Name: "fedbuff", Strategy: "fedbuff", KeptShare: 1, ModelBytes: int(wireBytes(start))}
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
func (t *asyncTask) runFedAvg(start wire.Weights) (*AsyncRun, error) {
	o := t.o
	run := &AsyncRun{Name: "fedavg", Strategy: "fedavg", KeptShare: 1, ModelBytes: int(wireBytes(start))}
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

// Async runs Irene's Fig. 10 experiment on split (LFW's development
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
func Async(ctx context.Context, split *Split, o AsyncOptions) (*AsyncReport, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	rng := rand.New(rand.NewPCG(o.Seed, 0xa5c))
	t, err := newAsyncTask(split, &o, rng)
	if err != nil {
		return nil, err
	}
	start := t.m.init(rng)
	rep := &AsyncReport{Clock: fmt.Sprintf("simulated: one unit per local step of a fast client, %g per step of the slow one (client 0); exchanges take no simulated time", o.Slowdown),
		Users: o.Users, Slowdown: o.Slowdown, Classes: o.Classes, Parameters: start.Len(), TestFaces: len(t.testX)}
	for _, c := range t.clients {
		rep.TrainFaces += len(c.x)
	}
	type job struct {
		name string
		run  func() (*AsyncRun, error)
	}
	var jobs []job
	for _, l := range o.Periods {
		jobs = append(jobs, job{fmt.Sprintf("EASGD λ = %d", l), func() (*AsyncRun, error) {
			return t.runEASGD(start, l, 0, rand.New(rand.NewPCG(o.Seed, uint64(l))))
		}})
	}
	for _, p := range o.Drops {
		jobs = append(jobs, job{fmt.Sprintf("EASGD λ = %d, p = %g", o.DropPeriod, p), func() (*AsyncRun, error) {
			return t.runEASGD(start, o.DropPeriod, p, rand.New(rand.NewPCG(o.Seed, math.Float64bits(p))))
		}})
	}
	jobs = append(jobs, job{"FedBuff", func() (*AsyncRun, error) { return t.runFedBuff(start) }},
		job{"FedAvg", func() (*AsyncRun, error) { return t.runFedAvg(start) }})
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t.reseed(o.Seed)
		t1 := time.Now()
		r, err := j.run()
		if err != nil {
			return nil, fmt.Errorf("collab: %s: %w", j.name, err)
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

// newAsyncTask holds out ⌈1/5⌉ of each named person's photos of split,
// simulates the users from the rest and gives each its persons' faces
// under their hashed tags.
func newAsyncTask(split *Split, o *AsyncOptions, rng *rand.Rand) (*asyncTask, error) {
	if split == nil || len(split.Descs) == 0 {
		return nil, errors.New("collab: no faces to simulate users from")
	}
	trainSplit, testFaces := holdOut(split, rng)
	users := simulate(trainSplit, o.Users, o.MaxUsersPerPerson, o.PhotosPerUser, false, rng)
	data, _, classOf, err := pooled(users, o.Classes, rng)
	if err != nil {
		return nil, err
	}
	t := &asyncTask{m: mlp{in: data.Dim, hidden: o.Hidden, classes: o.Classes}, o: o, units: data.Units}
	// Descriptors have unit length; scaled by √dim their coordinates have
	// about unit variance, the scale He initialisation assumes.
	scale := float32(math.Sqrt(float64(data.Dim)))
	scaled := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = v * scale
		}
		return y
	}
	tags := map[int]map[int]bool{}
	for li, l := range users {
		c := &asyncClient{}
		for i, q := range l.Person {
			if class, ok := classOf[li][q]; ok {
				c.x = append(c.x, scaled(l.Descs[i]))
				c.y = append(c.y, int32(class))
			}
		}
		if len(c.x) == 0 {
			return nil, fmt.Errorf("collab: simulated user %d has no named person: use fewer users", li)
		}
		t.clients = append(t.clients, c)
		for q, class := range classOf[li] {
			p := l.origin[q]
			if tags[p] == nil {
				tags[p] = map[int]bool{}
			}
			tags[p][class] = true
		}
	}
	for _, i := range testFaces {
		if p := split.Identity[i]; tags[p] != nil {
			t.testX = append(t.testX, scaled(split.Descs[i]))
			t.testOK = append(t.testOK, tags[p])
		}
	}
	if len(t.testX) == 0 {
		return nil, errors.New("collab: no held-out face of a trained person")
	}
	return t, nil
}

// reseed restarts every client's batch draws, so each strategy sees the
// same sequence of batches per client.
func (t *asyncTask) reseed(seed uint64) {
	for k, c := range t.clients {
		c.rng = rand.New(rand.NewPCG(seed, 0xba7c<<16|uint64(k)))
	}
}
