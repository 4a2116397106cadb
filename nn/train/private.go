package train

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn"
)

// Identified is implemented by Data whose examples show people. DP-SGD
// with UnitIdentity needs it: it samples people, not examples.
type Identified interface {
	Data
	// Identity returns the person example i shows, in [0, Identities()).
	Identity(i int) int
	// Identities is the number of people, N of the sampling rate q.
	Identities() int
}

// plural names the unit in the plural.
func plural(u Unit) string {
	if u == UnitIdentity {
		return "identities"
	}
	return string(u) + "s"
}

// validate checks the DP options; microBatch bounds MaxPerIdentity.
func (d DPOptions) validate(microBatch int) error {
	switch d.Unit {
	case UnitExample:
		if d.MaxPerIdentity != 0 {
			return errors.New("train: a cap per identity applies to identity-level DP-SGD only")
		}
	case UnitIdentity:
		if d.MaxPerIdentity < 0 || d.MaxPerIdentity > microBatch {
			return fmt.Errorf("train: the cap per identity must be in [1, micro-batch %d] (0: the micro-batch), got %d", microBatch, d.MaxPerIdentity)
		}
	case "":
		return errors.New("train: DP-SGD needs its privacy unit: example or identity")
	default:
		return fmt.Errorf("train: unknown privacy unit %q (want example or identity)", d.Unit)
	}
	if !(d.SamplingRate > 0 && d.SamplingRate <= 1) {
		return fmt.Errorf("train: sampling rate q must be in (0, 1], got %g", d.SamplingRate)
	}
	if !(d.NoiseMultiplier > 0) || math.IsInf(d.NoiseMultiplier, 0) {
		return fmt.Errorf("train: noise multiplier must be positive and finite, got %g", d.NoiseMultiplier)
	}
	if !(d.Clip > 0) || math.IsInf(d.Clip, 0) {
		return fmt.Errorf("train: clipping norm must be positive and finite, got %g", d.Clip)
	}
	if !(d.Delta > 0 && d.Delta < 1) {
		return fmt.Errorf("train: δ must be in (0, 1), got %g", d.Delta)
	}
	if d.DatasetSize <= 0 {
		return fmt.Errorf("train: DP needs the data set's size (number of %s), got %d", plural(d.Unit), d.DatasetSize)
	}
	if d.MaxEpsilon < 0 || math.IsNaN(d.MaxEpsilon) {
		return fmt.Errorf("train: the ε budget must be positive (0: none), got %g", d.MaxEpsilon)
	}
	return nil
}

// aggregator is what a DP-SGD step needs of package dp's mechanism
// (*dp.DPSGD): release of the clipped sums with noise (in place; their
// total length is fixed) and the privacy event of a number of steps, which
// accounts for the rounding the release does.
type aggregator interface {
	NoiseSums(sums ...[]float32) error
	Event(steps int) (dp.Event, error)
}

// private is the DP-SGD machinery of a trainer: the mechanism (package
// dp's DP-SGD), the CSPRNG that samples and noises, and the accountant's
// RDP curve of one step.
type private struct {
	opts   DPOptions
	agg    aggregator
	src    *dp.Source
	orders []float64
	rdp1   []float64 // RDP of one step at orders
	cap    int       // examples per identity and step (UnitIdentity)
}

// newPrivate builds the mechanism for dim noised coordinates per step.
func newPrivate(o DPOptions, dim int) (*private, error) {
	src := o.Source
	if src == nil {
		var err error
		if src, err = dp.NewSource(); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
	}
	agg, err := dp.NewDPSGD(dp.SGDConfig{ClipNorm: o.Clip, NoiseMultiplier: o.NoiseMultiplier, SamplingRate: o.SamplingRate,
		ExpectedBatchSize: o.SamplingRate * float64(o.DatasetSize), Dimension: dim,
		// Exact noise costs more than the step's graph for the embedding
		// head: spread it over the cores. The noise is keyed by
		// coordinate block, so a seeded run does not depend on how many.
		Workers: min(runtime.GOMAXPROCS(0), 64)}, src)
	if err != nil {
		return nil, fmt.Errorf("train: DP-SGD: %w", err)
	}
	// The accountant composes Event(k) as k times one step's RDP curve
	// (dp.Event.RDPAt scales by Count), so one step's curve, computed
	// once, gives ε after any number of steps without recomputing it.
	ev, err := agg.Event(1)
	if err != nil {
		return nil, fmt.Errorf("train: DP-SGD accounting: %w", err)
	}
	a, err := dp.NewAccountant(nil)
	if err != nil {
		return nil, err
	}
	if err := a.Add(ev); err != nil {
		return nil, fmt.Errorf("train: DP-SGD accounting: %w", err)
	}
	p := &private{opts: o, agg: agg, src: src, orders: a.Orders(), rdp1: a.RDP(), cap: o.MaxPerIdentity}
	return p, nil
}

// epsilon is ε at δ after steps DP-SGD steps.
func (p *private) epsilon(steps int) (float64, error) {
	if steps == 0 {
		return 0, nil
	}
	r := make([]float64, len(p.rdp1))
	for i, v := range p.rdp1 {
		r[i] = v * float64(steps)
	}
	eps, _, err := dp.RDPToDP(p.orders, r, p.opts.Delta)
	if err != nil {
		return 0, fmt.Errorf("train: DP-SGD accounting: %w", err)
	}
	return eps, nil
}

// Event returns the privacy event of the DP-SGD steps taken so far (and
// restored), for a dp.Accountant or dp.Ledger that composes this training
// with other mechanisms. It is an error without DP or before any DP step.
func (t *Trainer) Event() (dp.Event, error) {
	if t.dp != nil && t.privacy.Steps == 0 {
		return dp.Event{}, errors.New("train: no DP-SGD step taken yet")
	}
	return t.EventOf(t.privacy.Steps)
}

// EventOf returns the privacy event of steps DP-SGD steps of this
// trainer's mechanism, taken or not: what a ledger should be charged
// before they run.
func (t *Trainer) EventOf(steps int) (dp.Event, error) {
	if t.dp == nil {
		return dp.Event{}, errors.New("train: training without DP has no privacy event")
	}
	ev, err := t.dp.agg.Event(steps)
	if err != nil {
		return dp.Event{}, fmt.Errorf("train: %w", err)
	}
	return ev, nil
}

// NoisedDimension is the number of coordinates DP-SGD noises per step for
// parameters p with learning-rate multipliers groupLR (Options.GroupLR):
// every parameter that is neither state nor frozen. It is what
// Trainer.NumTrainable reports once the trainer exists.
func NoisedDimension(p *nn.Params, groupLR map[string]float64) int {
	n := 0
	for i, m := range multipliers(p, groupLR) {
		if m > 0 {
			n += p.Spec(i).Size()
		}
	}
	return n
}

// NoiseForTarget returns the smallest noise multiplier σ (to a relative
// precision of 1e-4, on the safe side) for which steps DP-SGD steps of the
// trainer's mechanism — package dp's DP-SGD with o's clip and sampling
// rate on dim noised coordinates (NoisedDimension), the noise released on
// a grid — spend at most targetEps at o.Delta by dp's accountant
// (dp.SGDNoiseMultiplier): what a trainer with these options and that σ
// reports after those steps. o.NoiseMultiplier is ignored.
func NoiseForTarget(o DPOptions, dim, steps int, targetEps float64) (float64, error) {
	if steps < 1 {
		return 0, fmt.Errorf("train: calibrating σ needs at least one step, got %d", steps)
	}
	if !(targetEps > 0) || math.IsInf(targetEps, 0) {
		return 0, fmt.Errorf("train: the target ε must be positive and finite, got %g", targetEps)
	}
	if dim < 1 {
		return 0, fmt.Errorf("train: calibrating σ needs the number of noised coordinates, got %d", dim)
	}
	o.NoiseMultiplier = 1
	if err := o.validate(max(o.MaxPerIdentity, 1)); err != nil {
		return 0, err
	}
	sigma, err := dp.SGDNoiseMultiplier(dp.SGDConfig{ClipNorm: o.Clip, SamplingRate: o.SamplingRate,
		ExpectedBatchSize: o.SamplingRate * float64(o.DatasetSize), Dimension: dim}, steps, targetEps, o.Delta)
	if err != nil {
		return 0, fmt.Errorf("train: calibrating σ for ε = %g: %w", targetEps, err)
	}
	return sigma, nil
}

// checkData compares the data with the size the accountant was given.
func (p *private) checkData(d Data) (Identified, error) {
	n := d.Len()
	if n == 0 {
		return nil, errors.New("train: empty training set")
	}
	if p.opts.Unit == UnitExample {
		if n != p.opts.DatasetSize {
			return nil, fmt.Errorf("train: DP-SGD was set up for %d examples, the data have %d: the expected batch q·N and the sampling rate would not describe the mechanism that runs", p.opts.DatasetSize, n)
		}
		return nil, nil
	}
	id, err := p.identified(d)
	if err != nil {
		return nil, err
	}
	if m := id.Identities(); m != p.opts.DatasetSize {
		return nil, fmt.Errorf("train: DP-SGD was set up for %d identities, the data have %d: the expected batch q·N and the sampling rate would not describe the mechanism that runs", p.opts.DatasetSize, m)
	}
	return id, nil
}

// identified returns d as Identified under UnitIdentity (nil under
// UnitExample), refusing empty data.
func (p *private) identified(d Data) (Identified, error) {
	if d.Len() == 0 {
		return nil, errors.New("train: empty training set")
	}
	if p.opts.Unit == UnitExample {
		return nil, nil
	}
	id, ok := d.(Identified)
	if !ok {
		return nil, errors.New("train: identity-level DP-SGD needs data that say which person each example shows")
	}
	return id, nil
}

// sampleExamples draws the Poisson sample of examples: each of n
// independently with probability q.
func (p *private) sampleExamples(n int) []int {
	var idx []int
	for i := 0; i < n; i++ {
		if p.src.Float64() < p.opts.SamplingRate {
			idx = append(idx, i)
		}
	}
	return idx
}

// sampleIdentities draws the Poisson sample of people (each independently
// with probability q) and returns, per sampled person, the examples it
// contributes: all of them, or cap drawn uniformly without replacement.
func (p *private) sampleIdentities(d Identified, limit int) ([][]int, error) {
	members := make([][]int, d.Identities())
	for i := 0; i < d.Len(); i++ {
		g := d.Identity(i)
		if g < 0 || g >= len(members) {
			return nil, fmt.Errorf("train: example %d belongs to identity %d, outside [0, %d)", i, g, len(members))
		}
		members[g] = append(members[g], i)
	}
	var out [][]int
	for _, m := range members {
		if p.src.Float64() >= p.opts.SamplingRate || len(m) == 0 {
			continue
		}
		if len(m) > limit {
			m = slices.Clone(m)
			for k := 0; k < limit; k++ {
				j := k + p.src.IntN(len(m)-k)
				m[k], m[j] = m[j], m[k]
			}
			m = m[:limit]
			slices.Sort(m)
		}
		out = append(out, m)
	}
	return out, nil
}

// DPStep draws a Poisson sample from d with the trainer's CSPRNG — each
// example (UnitExample) or each person (UnitIdentity, d must implement
// Identified) independently with probability q — and takes one DP-SGD step
// on it: per-unit gradients clipped to C, summed, noised by package dp's
// DP-SGD mechanism (σ·C), divided by q·N, then the optimiser update. aug,
// if non-nil, augments the sampled examples (Data.Batch). It is the only
// way to take a DP-SGD step; Epoch calls it.
//
// With UnitIdentity every sampled person's examples (at most
// MaxPerIdentity) go to one micro-batch, packed first-fit decreasing.
func (t *Trainer) DPStep(d Data, aug *rand.Rand) (StepResult, error) {
	p := t.dp
	if p == nil {
		return StepResult{}, errors.New("train: DPStep needs DP options; without DP use Step or Epoch")
	}
	id, err := p.checkData(d)
	if err != nil {
		return StepResult{}, err
	}
	if p.opts.MaxEpsilon > 0 {
		eps, err := p.epsilon(t.privacy.Steps + 1)
		if err != nil {
			return StepResult{}, err
		}
		if eps > p.opts.MaxEpsilon {
			return StepResult{}, fmt.Errorf("%w: the next step would spend ε=%.3f > %.3f (per %s)", ErrBudget, eps, p.opts.MaxEpsilon, p.opts.Unit)
		}
	}
	sums, res, states, err := t.clippedSum(d, id, aug)
	if err != nil {
		return StepResult{}, err
	}
	if err := p.agg.NoiseSums(sums...); err != nil {
		return StepResult{}, fmt.Errorf("train: DP-SGD noise: %w", err)
	}
	t.apply(sums, 1/(p.opts.SamplingRate*float64(p.opts.DatasetSize)))
	t.finish(states)
	t.privacy.Steps++
	eps, err := p.epsilon(t.privacy.Steps)
	if err != nil {
		return res, err
	}
	t.privacy.Epsilon = eps
	return res, nil
}

// ClippedSum is the first half of a DP-SGD step, for distributed DP-SGD
// (package fed/ddp): it draws a Poisson sample of d's units with the
// trainer's CSPRNG at the trainer's rate q and returns the sum of their
// gradients, each unit's clipped to C, with no noise and no optimiser
// step, as one vector of NumTrainable values (the trainable parameters in
// declaration order). The sum is not private: only a mechanism that adds noise to it
// (each client's share, summed under secure aggregation) may release it.
// d may be any client's data: its size is not checked against
// DPOptions.DatasetSize, which only sets DPStep's divisor. The trainer's
// parameters are those the gradients are taken at; states are discarded
// (the trainer refuses batch normalisation under DP).
func (t *Trainer) ClippedSum(d Data, aug *rand.Rand) ([]float32, StepResult, error) {
	p := t.dp
	if p == nil {
		return nil, StepResult{}, errors.New("train: ClippedSum needs DP options (unit, clip, sampling rate)")
	}
	id, err := p.identified(d)
	if err != nil {
		return nil, StepResult{}, err
	}
	sums, res, _, err := t.clippedSum(d, id, aug)
	if err != nil {
		return nil, StepResult{}, err
	}
	flat := make([]float32, 0, t.NumTrainable())
	for _, s := range sums {
		flat = append(flat, s...)
	}
	return flat, res, nil
}

// ApplyReleased is the second half of a distributed DP-SGD step: the
// optimiser update with the released noisy gradient sum released·scale, in
// ClippedSum's layout (scale
// is 1 over the expected batch), exactly the update DPStep makes after
// its noise. The release must already be accounted (by the clients'
// ledgers); the trainer's privacy record counts the step and stores
// mechanism, which names what was released and its trust assumption, and
// epsilon, the caller's ε after this step at DPOptions.Delta.
func (t *Trainer) ApplyReleased(released []float32, scale float64, mechanism string, epsilon float64) error {
	if t.dp == nil {
		return errors.New("train: ApplyReleased needs DP options")
	}
	if len(released) != t.NumTrainable() {
		return fmt.Errorf("train: a released sum of %d values, the trainer has %d trainable", len(released), t.NumTrainable())
	}
	sums := make([][]float32, len(t.grads))
	off := 0
	for k, i := range t.grads {
		n := t.params.Spec(i).Size()
		sums[k] = released[off : off+n]
		off += n
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return fmt.Errorf("train: the scale of a released sum must be positive and finite, got %g", scale)
	}
	if mechanism == "" || !(epsilon > 0) || math.IsInf(epsilon, 0) {
		return errors.New("train: a released sum needs the mechanism that released it and its ε")
	}
	t.apply(sums, scale)
	t.finish(nil)
	t.privacy.Steps++
	t.privacy.Epsilon = epsilon
	t.privacy.Mechanism = mechanism
	return nil
}

// clippedSum samples d's units and returns the clipped sum of their
// gradients (no noise), the step's statistics and the states.
func (t *Trainer) clippedSum(d Data, id Identified, aug *rand.Rand) ([][]float32, StepResult, [][]float32, error) {
	p := t.dp
	// Sample, then lay the sample out in micro-batches: layout[k] are the
	// positions in idx of micro-batch k's examples, slots their groups.
	var idx []int
	var layout [][]int
	var slots [][]int32
	mb := t.opts.MicroBatch
	if id == nil {
		idx = p.sampleExamples(d.Len())
		for s := 0; s < len(idx); s += mb {
			var l []int
			for j := s; j < min(s+mb, len(idx)); j++ {
				l = append(l, j)
			}
			layout = append(layout, l)
			slots = append(slots, nil)
		}
	} else {
		limit := p.cap
		if limit == 0 {
			limit = mb
		}
		people, err := p.sampleIdentities(id, limit)
		if err != nil {
			return nil, StepResult{}, nil, err
		}
		// First-fit decreasing: larger people first, each into the first
		// micro-batch with room.
		slices.SortStableFunc(people, func(a, b []int) int { return len(b) - len(a) })
		var room []int      // free places per micro-batch
		var persons []int32 // people per micro-batch: the next one's slot
		for _, m := range people {
			k := slices.IndexFunc(room, func(r int) bool { return r >= len(m) })
			if k < 0 {
				k = len(room)
				room = append(room, mb)
				persons = append(persons, 0)
				layout = append(layout, nil)
				slots = append(slots, nil)
			}
			for _, i := range m {
				layout[k] = append(layout[k], len(idx))
				slots[k] = append(slots[k], persons[k])
				idx = append(idx, i)
			}
			room[k] -= len(m)
			persons[k]++
		}
	}
	n := len(idx)
	var ms []*micro
	if n > 0 {
		x, labels, err := d.Batch(idx, aug)
		if err != nil {
			return nil, StepResult{}, nil, err
		}
		if len(x) != n*t.per || len(labels) != n {
			return nil, StepResult{}, nil, fmt.Errorf("train: the data returned %d values and %d labels for %d examples of %d values", len(x), len(labels), n, t.per)
		}
		for k, l := range layout {
			m := t.newMicro()
			for j, pos := range l {
				var g int32
				if slots[k] != nil {
					g = slots[k][j]
				}
				m.add(t.per, x, labels, pos, g)
			}
			ms = append(ms, m)
		}
	}
	// An empty sample runs no graph: its clipped sum is zero, and the
	// noise is added all the same.
	sums, totalLoss, totalW, states, err := t.run(ms)
	if err != nil {
		return nil, StepResult{}, nil, err
	}
	res := StepResult{Examples: n}
	if totalW > 0 {
		res.Loss = totalLoss / totalW
	}
	return sums, res, states, nil
}
