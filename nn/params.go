// Package nn holds the building blocks of Veil's trainable face networks on
// GoMLX: a registry of named parameters (Params), the graph-time view of
// them (Scope, which can expand every trainable weight to one copy per
// example for DP-SGD), and layers written as graph functions: im2col
// convolution, depthwise convolution, squeeze-and-excitation ("weight
// evaluation"), batch and group normalisation, ReLU/PReLU, pooling, dense
// and cosine classifiers, and L2 normalisation.
//
// Layers are declared once (their constructors register parameters in a
// Params) and applied many times inside GoMLX graphs (Apply takes a Scope).
// All layers are written for any float dtype, so gradient checks can run in
// float64.
package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Init says how a parameter's initial values are drawn.
type Init int

const (
	// InitZeros fills with zeros.
	InitZeros Init = iota
	// InitOnes fills with ones (scales, variances).
	InitOnes
	// InitHe draws from N(0, 2/fanIn) (ReLU networks).
	InitHe
	// InitXavier draws from N(0, 1/fanIn).
	InitXavier
	// InitConst fills with ParamSpec.Value.
	InitConst
)

// ParamSpec describes one named parameter.
type ParamSpec struct {
	// Name is unique within a Params, e.g. "conv1/w".
	Name string `json:"name"`
	// Shape is the parameter's dimensions.
	Shape []int `json:"shape"`
	// Init and FanIn say how to initialise; Value is used by InitConst.
	Init  Init    `json:"-"`
	FanIn int     `json:"-"`
	Value float64 `json:"-"`
	// State marks non-trainable state updated by the forward pass (batch
	// norm running statistics); it gets no gradient.
	State bool `json:"state,omitempty"`
	// Group names the learning-rate group ("" is the default group).
	Group string `json:"group,omitempty"`
	// Ghost marks a dense layer's weight or bias, whose per-example
	// gradients DP-SGD derives from the layer's input and output gradient
	// (GhostScope) instead of expanding the parameter per example.
	Ghost bool `json:"-"`
}

// Size is the number of elements of the parameter.
func (s ParamSpec) Size() int {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// Params is an ordered registry of named parameters and their values
// (float32, row-major). It is not safe for concurrent mutation.
type Params struct {
	specs  []ParamSpec
	index  map[string]int
	values [][]float32
}

// NewParams returns an empty registry.
func NewParams() *Params { return &Params{index: map[string]int{}} }

// Declare registers a parameter. Its values start at zero until Init.
func (p *Params) Declare(spec ParamSpec) error {
	if spec.Name == "" {
		return errors.New("nn: parameter with empty name")
	}
	if _, dup := p.index[spec.Name]; dup {
		return fmt.Errorf("nn: parameter %q declared twice", spec.Name)
	}
	for _, d := range spec.Shape {
		if d <= 0 {
			return fmt.Errorf("nn: parameter %q has non-positive dimension in shape %v", spec.Name, spec.Shape)
		}
	}
	spec.Shape = slices.Clone(spec.Shape)
	p.index[spec.Name] = len(p.specs)
	p.specs = append(p.specs, spec)
	p.values = append(p.values, make([]float32, spec.Size()))
	return nil
}

// Len is the number of parameters.
func (p *Params) Len() int { return len(p.specs) }

// Spec returns the i-th parameter's description.
func (p *Params) Spec(i int) ParamSpec { return p.specs[i] }

// Specs returns a copy of all descriptions, in declaration order.
func (p *Params) Specs() []ParamSpec { return slices.Clone(p.specs) }

// Index returns the position of the named parameter.
func (p *Params) Index(name string) (int, bool) {
	i, ok := p.index[name]
	return i, ok
}

// Values returns the i-th parameter's values (shared, not copied).
func (p *Params) Values(i int) []float32 { return p.values[i] }

// SetGroup assigns every parameter whose name starts with prefix to the
// learning-rate group; it returns how many matched.
func (p *Params) SetGroup(prefix, group string) int {
	n := 0
	for i := range p.specs {
		if len(p.specs[i].Name) >= len(prefix) && p.specs[i].Name[:len(prefix)] == prefix {
			p.specs[i].Group = group
			n++
		}
	}
	return n
}

// NumTrainable is the total number of trainable scalars.
func (p *Params) NumTrainable() int {
	n := 0
	for _, s := range p.specs {
		if !s.State {
			n += s.Size()
		}
	}
	return n
}

// Init draws every parameter's initial value from a generator seeded with
// seed (model initialisation is not privacy noise, so runs reproduce).
func (p *Params) Init(seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for i, s := range p.specs {
		v := p.values[i]
		switch s.Init {
		case InitZeros:
			clear(v)
		case InitOnes:
			for j := range v {
				v[j] = 1
			}
		case InitConst:
			for j := range v {
				v[j] = float32(s.Value)
			}
		case InitHe, InitXavier:
			fan := max(s.FanIn, 1)
			std := math.Sqrt(1 / float64(fan))
			if s.Init == InitHe {
				std = math.Sqrt(2 / float64(fan))
			}
			for j := range v {
				v[j] = float32(r.NormFloat64() * std)
			}
		}
	}
}

// Clone returns a deep copy.
func (p *Params) Clone() *Params {
	q := NewParams()
	for i, s := range p.specs {
		_ = q.Declare(s)
		copy(q.values[i], p.values[i])
	}
	return q
}
