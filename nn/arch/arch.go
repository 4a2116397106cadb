// Package arch defines Veil's trainable network architectures: LightFace
// (Li, Wang & Li, Table 2) with a width multiplier, smaller inputs and a
// choice of batch or group normalisation, and an embedding head of dense
// layers on top of precomputed 128-d face descriptors.
package arch

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/core/graph"

	"github.com/veil-privacy/veil/nn"
)

// Config selects and parameterises an architecture; it is saved in
// checkpoints so a checkpoint is only loaded into the same model.
type Config struct {
	// Kind is "lightface" or "head".
	Kind string `json:"kind"`
	// Input is the side of the square RGB input (LightFace: 224, 112, 64).
	Input int `json:"input,omitempty"`
	// Width multiplies every channel count (LightFace; 1 is the paper's).
	Width float64 `json:"width,omitempty"`
	// Norm is "batch" (the paper), "group" (for DP-SGD) or "none".
	Norm string `json:"norm,omitempty"`
	// Eta is the weight-evaluation reduction η (8 in the paper).
	Eta int `json:"eta,omitempty"`
	// Features names the head's input: "" for the face pipeline's 128-d
	// descriptors, HeadAgeGender for the age/gender network's region
	// features.
	Features string `json:"features,omitempty"`
	// In is the head's input size and Hidden its hidden width.
	In     int `json:"in,omitempty"`
	Hidden int `json:"hidden,omitempty"`
	// Embedding is the output dimension (128 in both).
	Embedding int `json:"embedding"`
}

// Equal reports whether two configurations describe the same network.
func (c Config) Equal(o Config) bool {
	a, _ := json.Marshal(c)
	b, _ := json.Marshal(o)
	return string(a) == string(b)
}

// Model is a built architecture: parameters plus the forward function.
type Model struct {
	cfg    Config
	params *nn.Params
	embed  func(s *nn.Scope, x *graph.Node) *graph.Node
	bn     bool
}

// Config returns the configuration the model was built from.
func (m *Model) Config() Config { return m.cfg }

// Params returns the model's parameters.
func (m *Model) Params() *nn.Params { return m.params }

// Embed maps x to L2-normalised embeddings [B, Embedding].
func (m *Model) Embed(s *nn.Scope, x *graph.Node) *graph.Node { return m.embed(s, x) }

// UsesBatchNorm reports whether the model uses batch normalisation.
func (m *Model) UsesBatchNorm() bool { return m.bn }

// InputDims are the dimensions of one example.
func (m *Model) InputDims() []int {
	if m.cfg.Kind == "head" {
		return []int{m.cfg.In}
	}
	return []int{m.cfg.Input, m.cfg.Input, 3}
}

// New validates c and declares the model's parameters.
func New(c Config) (*Model, error) {
	switch c.Kind {
	case "lightface":
		return newLightFace(c)
	case "head":
		return newHead(c)
	}
	return nil, fmt.Errorf("arch: unknown model %q (want lightface or head)", c.Kind)
}

// block is one row group of Table 2: depthwise stride, pointwise output
// channels and whether a weight-evaluation module follows.
type block struct {
	stride, out int
	we          bool
}

// LightFaceBlocks is the number of convolution blocks of LightFace: Conv1
// and the depthwise-separable Conv2…Conv14 of Table 2.
const LightFaceBlocks = 14

// LightFaceBlockName names LightFace's block b (1 … LightFaceBlocks); its
// parameters' names start with the name and a slash.
func LightFaceBlockName(b int) string { return fmt.Sprintf("conv%d", b) }

// lightFaceBlocks are Conv2…Conv14 of Table 2 (Conv8–Conv12 are five
// identical 512-channel blocks, weight evaluation after Conv12 only).
var lightFaceBlocks = []block{
	{1, 64, true}, {2, 128, true}, {1, 128, true}, {2, 256, true}, {1, 256, true}, {2, 512, true},
	{1, 512, false}, {1, 512, false}, {1, 512, false}, {1, 512, false}, {1, 512, true},
	{2, 1024, true}, {1, 1024, false},
}

// channels scales c by the width multiplier, rounded to a multiple of 8.
func channels(c int, w float64) int {
	return max(8, int(math.Round(float64(c)*w/8))*8)
}

// groupsFor is the group count of group norm for c channels: the largest
// of 8, 4, 2 that leaves at least 2 channels per group.
func groupsFor(c int) int {
	for _, g := range []int{8, 4, 2} {
		if c%g == 0 && c/g >= 2 {
			return g
		}
	}
	return 1
}

type normLayer interface {
	Apply(s *nn.Scope, x *graph.Node) *graph.Node
}

func newNorm(p *nn.Params, kind, name string, c int) (normLayer, error) {
	switch kind {
	case "batch":
		return nn.NewBatchNorm(p, name, c)
	case "group":
		return nn.NewGroupNorm(p, name, c, groupsFor(c))
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("arch: unknown normalisation %q (want batch, group or none)", kind)
}

func newLightFace(c Config) (*Model, error) {
	if c.Features != "" {
		return nil, fmt.Errorf("arch: LightFace takes images; features %q are a head's input", c.Features)
	}
	if c.Width == 0 {
		c.Width = 1
	}
	if c.Eta == 0 {
		c.Eta = 8
	}
	if c.Embedding == 0 {
		c.Embedding = 128
	}
	if c.Norm == "" {
		c.Norm = "batch"
	}
	if c.Input < 32 || c.Input > 1024 {
		return nil, fmt.Errorf("arch: LightFace input side must be in [32, 1024] (224, 112, 64), got %d", c.Input)
	}
	if !(c.Width > 0 && c.Width <= 4) {
		return nil, fmt.Errorf("arch: width multiplier must be in (0, 4], got %g", c.Width)
	}
	p := nn.NewParams()
	var stages []func(s *nn.Scope, x *graph.Node) *graph.Node
	addNormRelu := func(name string, ch int) error {
		n, err := newNorm(p, c.Norm, name, ch)
		if err != nil {
			return err
		}
		stages = append(stages, func(s *nn.Scope, x *graph.Node) *graph.Node {
			if n != nil {
				x = n.Apply(s, x)
			}
			return nn.ReLU(x)
		})
		return nil
	}
	addWE := func(name string, ch int) error {
		eta := c.Eta
		if ch/eta < 1 {
			eta = ch
		}
		we, err := nn.NewSqueezeExcite(p, name, ch, eta)
		if err != nil {
			return err
		}
		stages = append(stages, we.Apply)
		return nil
	}
	cin := channels(32, c.Width)
	conv1, err := nn.NewConv(p, LightFaceBlockName(1), 3, 2, 3, cin, false)
	if err != nil {
		return nil, err
	}
	stages = append(stages, conv1.Apply)
	if err := addNormRelu("conv1/norm", cin); err != nil {
		return nil, err
	}
	if err := addWE("conv1/we", cin); err != nil {
		return nil, err
	}
	for i, b := range lightFaceBlocks {
		name := LightFaceBlockName(i + 2)
		dw, err := nn.NewDepthwise(p, name+"/dw", 3, b.stride, cin)
		if err != nil {
			return nil, err
		}
		stages = append(stages, dw.Apply)
		if err := addNormRelu(name+"/dw/norm", cin); err != nil {
			return nil, err
		}
		out := channels(b.out, c.Width)
		pw, err := nn.NewConv(p, name+"/pw", 1, 1, cin, out, false)
		if err != nil {
			return nil, err
		}
		stages = append(stages, pw.Apply)
		if err := addNormRelu(name+"/pw/norm", out); err != nil {
			return nil, err
		}
		if b.we {
			if err := addWE(name+"/we", out); err != nil {
				return nil, err
			}
		}
		cin = out
	}
	fc, err := nn.NewDense(p, "fc", cin, c.Embedding, true)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: c, params: p, bn: c.Norm == "batch"}
	m.embed = func(s *nn.Scope, x *graph.Node) *graph.Node {
		for _, f := range stages {
			x = f(s, x)
		}
		return nn.L2Normalize(fc.Apply(s, nn.GlobalAvgPool(x)))
	}
	return m, nil
}

// HeadAgeGender is Config.Features for a head on face-api's age/gender
// network's 2048 region features (nets.AgeGender.RegionFeatures: public,
// generic face features never trained on identities), which starts far
// from a face embedding.
const HeadAgeGender = "agegender"

func newHead(c Config) (*Model, error) {
	switch c.Features {
	case "":
		if c.In == 0 {
			c.In = 128
		}
	case HeadAgeGender:
		if c.In == 0 {
			c.In = 2048
		}
	default:
		return nil, fmt.Errorf("arch: unknown head features %q (want %q or empty for descriptors)", c.Features, HeadAgeGender)
	}
	if c.Hidden == 0 {
		c.Hidden = 256
	}
	if c.Embedding == 0 {
		c.Embedding = 128
	}
	if c.In < 1 || c.Hidden < 1 || c.Embedding < 1 {
		return nil, fmt.Errorf("arch: head sizes must be positive, got in=%d hidden=%d embedding=%d", c.In, c.Hidden, c.Embedding)
	}
	c.Norm = ""
	p := nn.NewParams()
	fc1, err := nn.NewDense(p, "fc1", c.In, c.Hidden, true)
	if err != nil {
		return nil, err
	}
	act, err := nn.NewPReLU(p, "act1", c.Hidden)
	if err != nil {
		return nil, err
	}
	fc2, err := nn.NewDense(p, "fc2", c.Hidden, c.Embedding, true)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: c, params: p}
	m.embed = func(s *nn.Scope, x *graph.Node) *graph.Node {
		// Residual on the input when sizes agree (the descriptor), so
		// training starts near it.
		y := fc2.Apply(s, act.Apply(s, fc1.Apply(s, x)))
		if c.In == c.Embedding {
			y = graph.Add(y, x)
		}
		return nn.L2Normalize(y)
	}
	return m, nil
}
