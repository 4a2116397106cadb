package nn

import (
	"fmt"

	"github.com/gomlx/gomlx/core/graph"
)

// Scope is the graph-time view of a Params: the node holding each
// parameter's value, whether weights are expanded per example, whether the
// forward pass is training (batch statistics) or inference, and the state
// updates the forward pass produced.
//
// With per-example weights every trainable parameter node has a leading
// batch axis ([B, shape...]): the gradient of the sum of per-example losses
// with respect to those expanded copies is the matrix of per-example
// gradients ("expanded weights"), which DP-SGD clips.
type Scope struct {
	g        *graph.Graph
	params   *Params
	nodes    []*graph.Node
	expanded []bool
	training bool
	updates  map[int]*graph.Node
	// ghost marks parameters left unexpanded for ghost norms (GhostScope);
	// taps are their dense layers' records.
	ghost []bool
	taps  []DenseTap
}

// NewScope binds parameter value nodes (one per parameter of p, in order)
// to a graph. expanded[i] says node i carries a leading per-example axis;
// nil means none is expanded.
func NewScope(p *Params, nodes []*graph.Node, expanded []bool, training bool) (*Scope, error) {
	if len(nodes) != p.Len() {
		return nil, fmt.Errorf("nn: scope got %d parameter nodes for %d parameters", len(nodes), p.Len())
	}
	if expanded == nil {
		expanded = make([]bool, len(nodes))
	}
	if len(expanded) != len(nodes) {
		return nil, fmt.Errorf("nn: scope got %d expansion flags for %d parameters", len(expanded), len(nodes))
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("nn: scope needs at least one parameter")
	}
	for i, n := range nodes {
		want := p.specs[i].Shape
		got := n.Shape().Dimensions
		if expanded[i] {
			if p.specs[i].State {
				return nil, fmt.Errorf("nn: state %q cannot be expanded per example", p.specs[i].Name)
			}
			got = got[1:]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return nil, fmt.Errorf("nn: parameter %q node has shape %v, want %v (expanded=%v)", p.specs[i].Name, n.Shape().Dimensions, want, expanded[i])
		}
	}
	return &Scope{g: nodes[0].Graph(), params: p, nodes: nodes, expanded: expanded, training: training, updates: map[int]*graph.Node{}}, nil
}

// Graph returns the graph being built.
func (s *Scope) Graph() *graph.Graph { return s.g }

// Training reports whether normalisation uses batch statistics.
func (s *Scope) Training() bool { return s.training }

// W returns the named parameter's node and whether it is expanded per
// example. An undeclared name is a programming error in a layer and panics
// inside graph construction, which GoMLX turns into an error.
func (s *Scope) W(name string) (*graph.Node, bool) {
	i, ok := s.params.index[name]
	if !ok {
		panic(fmt.Sprintf("nn: parameter %q not declared", name))
	}
	return s.nodes[i], s.expanded[i]
}

// SetState records the new value of a state parameter (returned by the
// step graph so the trainer can store it).
func (s *Scope) SetState(name string, v *graph.Node) {
	i, ok := s.params.index[name]
	if !ok || !s.params.specs[i].State {
		panic(fmt.Sprintf("nn: %q is not a declared state parameter", name))
	}
	s.updates[i] = v
}

// StateUpdates returns the recorded state updates by parameter index.
func (s *Scope) StateUpdates() map[int]*graph.Node { return s.updates }

// channelWeight returns parameter name (shape [C]) shaped to broadcast over
// x whose last axis is the channel axis: [1,...,1,C], or [B,1,...,1,C] when
// expanded per example.
func (s *Scope) channelWeight(name string, x *graph.Node) *graph.Node {
	w, exp := s.W(name)
	rank := x.Rank()
	dims := make([]int, rank)
	for i := range dims {
		dims[i] = 1
	}
	dims[rank-1] = w.Shape().Dimensions[w.Rank()-1]
	if exp {
		dims[0] = w.Shape().Dimensions[0]
	}
	return graph.Reshape(w, dims...)
}

// ExpandedScope binds the parameter nodes to a Scope, replacing each
// parameter i for which expand(i) holds (and which is not state) by its
// broadcast copy [batch, shape...]. It returns the Scope and, per
// parameter, the expanded node (nil where not expanded): the gradient of a
// sum of per-example losses with respect to expanded[i] is the per-example
// gradient of parameter i.
func ExpandedScope(p *Params, nodes []*graph.Node, batch int, expand func(i int) bool, training bool) (*Scope, []*graph.Node, error) {
	if len(nodes) != p.Len() {
		return nil, nil, fmt.Errorf("nn: got %d parameter nodes for %d parameters", len(nodes), p.Len())
	}
	if batch <= 0 {
		return nil, nil, fmt.Errorf("nn: per-example expansion needs a positive batch, got %d", batch)
	}
	vals := make([]*graph.Node, len(nodes))
	flags := make([]bool, len(nodes))
	exp := make([]*graph.Node, len(nodes))
	for i, n := range nodes {
		vals[i] = n
		if !p.specs[i].State && expand(i) {
			exp[i] = graph.BroadcastPrefix(n, batch)
			vals[i] = exp[i]
			flags[i] = true
		}
	}
	s, err := NewScope(p, vals, flags, training)
	if err != nil {
		return nil, nil, err
	}
	return s, exp, nil
}
