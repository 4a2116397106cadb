package strategy

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/fed/wire"
)

// EASGDOptions configures asynchronous elastic averaging SGD (Zhang,
// Choromanska & LeCun 2015; Irene Algorithm 1).
type EASGDOptions struct {
	// Beta is the moving rate β ∈ (0, 1]: each exchange moves the centre
	// x̃ by β(x − x̃) towards the client's x and the client by as much
	// towards the centre.
	Beta float64
	// Period is the communication period λ ≥ 1: a client exchanges with
	// the centre when λ divides its local clock.
	Period int
	// LearningRate is the client's local step η > 0.
	LearningRate float64
}

// Validate reports the first setting out of range.
func (o EASGDOptions) Validate() error {
	if !(o.Beta > 0 && o.Beta <= 1) {
		return fmt.Errorf("strategy: EASGD moving rate β must be in (0, 1], got %g", o.Beta)
	}
	if o.Period < 1 {
		return fmt.Errorf("strategy: EASGD period λ must be at least 1, got %d", o.Period)
	}
	if !(o.LearningRate > 0) || math.IsInf(o.LearningRate, 0) {
		return fmt.Errorf("strategy: EASGD learning rate η must be positive and finite, got %g", o.LearningRate)
	}
	return nil
}

// EASGDCentre is the parameter server's side of asynchronous EASGD: the
// centre parameters x̃. Clients exchange with it in any order and at any
// time; each exchange applies x̃ ← x̃ + β(x − x̃), where the client
// computed the elastic difference β(x − x̃) against the centre it fetched.
// It is not safe for concurrent use: the coordinator serialises exchanges
// (one transaction each) and persists Centre and Exchanges like a round.
type EASGDCentre struct {
	centre    []float64
	layout    wire.Weights
	exchanges uint64
}

// NewEASGDCentre starts the centre at x̃ = start.
func NewEASGDCentre(start wire.Weights) (*EASGDCentre, error) {
	if err := start.Validate(); err != nil {
		return nil, fmt.Errorf("strategy: EASGD centre: %w", err)
	}
	if err := start.CheckFinite(); err != nil {
		return nil, fmt.Errorf("strategy: EASGD centre: %w", err)
	}
	c := &EASGDCentre{layout: start.Clone(), centre: make([]float64, 0, start.Len())}
	for _, t := range start {
		for _, v := range t.Values {
			c.centre = append(c.centre, float64(v))
		}
	}
	return c, nil
}

// Centre returns a copy of x̃.
func (c *EASGDCentre) Centre() wire.Weights { return Unflatten(c.layout, c.centre) }

// Exchanges is the number of elastic differences applied so far.
func (c *EASGDCentre) Exchanges() uint64 { return c.exchanges }

// Apply folds one client's elastic difference β(x − x̃) into the centre:
// x̃ ← x̃ + diff. A difference of another layout or not finite is refused
// and changes nothing.
func (c *EASGDCentre) Apply(diff wire.Weights) error {
	if err := c.layout.SameLayout(diff); err != nil {
		return fmt.Errorf("strategy: EASGD elastic difference: %w", err)
	}
	if err := diff.CheckFinite(); err != nil {
		return fmt.Errorf("strategy: EASGD elastic difference: %w", err)
	}
	k := 0
	for _, t := range diff {
		for _, v := range t.Values {
			c.centre[k] += float64(v)
			k++
		}
	}
	c.exchanges++
	return nil
}

// EASGDClient is user k's side of Algorithm 1: local parameters x^k and
// the local clock i^k.
type EASGDClient struct {
	o     EASGDOptions
	x     []float64
	shape wire.Weights
	clock uint64
	// synced is clock+1 after an exchange at clock (0: none yet).
	synced uint64
}

// NewEASGDClient starts a client at x^k = centre (downloaded), i^k = 0.
func NewEASGDClient(o EASGDOptions, centre wire.Weights) (*EASGDClient, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c, err := NewEASGDCentre(centre)
	if err != nil {
		return nil, err
	}
	return &EASGDClient{o: o, x: c.centre, shape: c.layout}, nil
}

// Clock is i^k, the number of local steps taken.
func (c *EASGDClient) Clock() uint64 { return c.clock }

// Due reports whether λ divides the clock: the client must exchange with
// the centre before its next step.
func (c *EASGDClient) Due() bool { return c.clock%uint64(c.o.Period) == 0 }

// Params returns a copy of x^k.
func (c *EASGDClient) Params() wire.Weights { return Unflatten(c.shape, c.x) }

// Elastic computes the elastic difference β(x^k − x̃) against the centre
// just fetched, moves the client by it (x^k ← x^k − β(x^k − x̃)) and
// returns it, for the server's EASGDCentre.Apply.
func (c *EASGDClient) Elastic(centre wire.Weights) (wire.Weights, error) {
	if err := c.shape.SameLayout(centre); err != nil {
		return nil, fmt.Errorf("strategy: EASGD centre: %w", err)
	}
	if err := centre.CheckFinite(); err != nil {
		return nil, fmt.Errorf("strategy: EASGD centre: %w", err)
	}
	diff := make([]float64, len(c.x))
	k := 0
	for _, t := range centre {
		for _, v := range t.Values {
			diff[k] = c.o.Beta * (c.x[k] - float64(v))
			k++
		}
	}
	for i := range c.x {
		c.x[i] -= diff[i]
	}
	c.synced = c.clock + 1
	return Unflatten(c.shape, diff), nil
}

// Step takes one local SGD step x^k ← x^k − η·g and advances the clock. It
// refuses to step while an exchange is due and not done (Due, then
// Elastic), so a client cannot drift past its period unseen.
func (c *EASGDClient) Step(grad wire.Weights) error {
	if c.Due() && c.synced != c.clock+1 {
		return fmt.Errorf("strategy: EASGD client at clock %d must exchange with the centre first (period %d)", c.clock, c.o.Period)
	}
	if err := c.shape.SameLayout(grad); err != nil {
		return fmt.Errorf("strategy: EASGD gradient: %w", err)
	}
	if err := grad.CheckFinite(); err != nil {
		return fmt.Errorf("strategy: EASGD gradient: %w", err)
	}
	k := 0
	for _, t := range grad {
		for _, v := range t.Values {
			c.x[k] -= c.o.LearningRate * float64(v)
			k++
		}
	}
	c.clock++
	return nil
}

// Unflatten lays values out as layout's tensors (float32), in order.
func Unflatten(layout wire.Weights, values []float64) wire.Weights {
	out := make(wire.Weights, len(layout))
	k := 0
	for i, t := range layout {
		vals := make([]float32, len(t.Values))
		for j := range vals {
			vals[j] = float32(values[k])
			k++
		}
		out[i] = wire.Tensor{Name: t.Name, Shape: append([]int(nil), t.Shape...), Values: vals}
	}
	return out
}
