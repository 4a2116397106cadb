package nets

import (
	"fmt"

	"github.com/gomlx/gomlx/core/graph"

	"github.com/veil-privacy/veil/face/tfjs"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// AgeGenderSize is the input height and width of the age/gender network.
const AgeGenderSize = 112

// AgeGenderFeatures is the length of the network's pooled feature vector,
// the input of its age and gender heads.
const AgeGenderFeatures = 512

// AgeGenderRegionFeatures is the length of RegionFeatures' vectors: the
// 512 channels averaged over four regions.
const AgeGenderRegionFeatures = 4 * AgeGenderFeatures

// AgeGender runs face-api's age and gender network (age_gender_model): a
// TinyXception feature extractor with two main blocks, a 7×7 average pool
// and two dense heads.
//
// A pass runs as plain Go kernels: the convolutions' matrix products
// (kern_gemm.go), the depthwise convolutions, im2col, biases, ReLU,
// residual sums and pools (agegender_kern.go).
type AgeGender struct {
	r    *netRunner
	feat *netRunner // the same pass up to the pooled features
	reg  *netRunner // the same pass up to the region features
	w    *agW       // also drives the whole-graph reference path (build)
}

// AgeGenderResult is the network's output for one face.
type AgeGenderResult struct {
	Age        float32 // age in years (raw regression output)
	MaleProb   float32 // softmax probability of "male" (face-api's index 0)
	FemaleProb float32 // softmax probability of "female"
}

// Gender returns face-api's label and its probability: "male" when
// MaleProb > 0.5, else "female".
func (r AgeGenderResult) Gender() (string, float32) {
	if r.MaleProb > 0.5 {
		return "male", r.MaleProb
	}
	return "female", 1 - r.MaleProb
}

// xcConv is a plain convolution with bias.
type xcConv struct{ w, b *tfjs.Tensor }

// xcReduction is a reduction block: two separable convolutions, a 3×3
// stride-2 max pool, plus a 1×1 stride-2 expansion of the block input.
type xcReduction struct {
	sep0, sep1 sepConv
	expansion  xcConv
}

// agW holds the age/gender tensors.
type agW struct {
	convIn       xcConv
	rb0, rb1     xcReduction
	main         [2][3]sepConv
	exitRB       xcReduction
	exitSep      sepConv
	ageW, ageB   *tfjs.Tensor
	gendW, gendB *tfjs.Tensor
}

func loadReduction(wi *weightsIn, p string, cin, cout int) xcReduction {
	return xcReduction{
		sep0:      loadSep(wi, p+"/separable_conv0", cin, cout),
		sep1:      loadSep(wi, p+"/separable_conv1", cout, cout),
		expansion: xcConv{wi.get(p+"/expansion_conv/filters", 1, 1, cin, cout), wi.get(p+"/expansion_conv/bias", cout)},
	}
}

func loadAgeGenderWeights(w *tfjs.Weights) (*agW, error) {
	wi := &weightsIn{w: w}
	a := &agW{
		convIn:  xcConv{wi.get("entry_flow/conv_in/filters", 3, 3, 3, 32), wi.get("entry_flow/conv_in/bias", 32)},
		rb0:     loadReduction(wi, "entry_flow/reduction_block_0", 32, 64),
		rb1:     loadReduction(wi, "entry_flow/reduction_block_1", 64, 128),
		exitRB:  loadReduction(wi, "exit_flow/reduction_block", 128, 256),
		exitSep: loadSep(wi, "exit_flow/separable_conv", 256, 512),
		ageW:    wi.get("fc/age/weights", 512, 1),
		ageB:    wi.get("fc/age/bias", 1),
		gendW:   wi.get("fc/gender/weights", 512, 2),
		gendB:   wi.get("fc/gender/bias", 2),
	}
	for b := range 2 {
		for s := range 3 {
			a.main[b][s] = loadSep(wi, fmt.Sprintf("middle_flow/main_block_%d/separable_conv%d", b, s), 128, 128)
		}
	}
	if wi.err != nil {
		return nil, fmt.Errorf("nets: age_gender_model: %w", wi.err)
	}
	return a, nil
}

// NewAgeGenderOn loads age_gender_model from modelDir, verifying the files'
// sha256 sums. Its kernels run on up to eng.Parallelism() goroutines; nil
// means the default (engine.Parallelism).
func NewAgeGenderOn(modelDir string, eng *engine.Engine) (*AgeGender, error) {
	w, err := LoadWeights(modelDir, "age_gender_model")
	if err != nil {
		return nil, err
	}
	a, err := loadAgeGenderWeights(w)
	if err != nil {
		return nil, err
	}
	par := newKernPar(eng)
	k, err := newAgeGenderKern(a, par)
	if err != nil {
		return nil, err
	}
	return &AgeGender{
		r:    newKernRunner(par, "age_gender_model", AgeGenderSize, 3, k.forward),
		feat: newKernRunner(par, "age_gender_model features", AgeGenderSize, AgeGenderFeatures, k.forwardFeatures),
		reg:  newKernRunner(par, "age_gender_model region features", AgeGenderSize, AgeGenderRegionFeatures, k.forwardRegions),
		w:    a,
	}, nil
}

// AgeGenderInput applies face-api's preprocessing to a face crop (in
// face-api, the aligned landmark bounding box): zero-pad to a square,
// centred, and TensorFlow bilinear resize to 112×112; values stay 0..255.
// It returns nil for a nil or empty crop, which Compute rejects.
func AgeGenderInput(crop *imaging.RGB) *imaging.Float {
	return faceCropInput(crop, AgeGenderSize)
}

// Compute runs the network on 112×112×3 inputs (0..255) and returns one
// result per input. Safe for concurrent use; batches internally.
func (a *AgeGender) Compute(inputs []*imaging.Float) ([]AgeGenderResult, error) {
	raw, err := a.r.run(inputs)
	if err != nil {
		return nil, err
	}
	out := make([]AgeGenderResult, len(raw))
	for i, v := range raw {
		out[i] = AgeGenderResult{Age: v[0], MaleProb: v[1], FemaleProb: v[2]}
	}
	return out, nil
}

func (c xcConv) apply(x *graph.Node, stride int) *graph.Node {
	g := x.Graph()
	return conv2d(x, constant(g, c.w), constant(g, c.b), stride, Same)
}

// reduction is TinyXception's reductionBlock.
func (rb xcReduction) apply(x *graph.Node, activateInput bool) *graph.Node {
	out := x
	if activateInput {
		out = netRelu(x)
	}
	out = rb.sep0.apply(out, 1)
	out = rb.sep1.apply(netRelu(out), 1)
	out = maxPool(out, 3, 2, Same)
	return graph.Add(out, rb.expansion.apply(x, 2))
}

// build is the age/gender graph: [N,112,112,3] (0..255) → [N,3] holding
// age, P(male), P(female).
func (a *agW) build(x *graph.Node) *graph.Node {
	g := x.Graph()
	x = faNormalize(x)
	x = netRelu(a.convIn.apply(x, 2))
	x = a.rb0.apply(x, false)
	x = a.rb1.apply(x, true)
	for _, mb := range a.main {
		out := x
		for _, s := range mb {
			out = s.apply(netRelu(out), 1)
		}
		x = graph.Add(out, x)
	}
	x = a.exitRB.apply(x, true)
	x = netRelu(a.exitSep.apply(x, 1))
	x = avgPoolValid(x, 7, 2)
	n := x.Shape().Dimensions[0]
	x = graph.Reshape(x, n, 512)
	age := graph.Add(graph.Dot(x, constant(g, a.ageW)).Product(), graph.Reshape(constant(g, a.ageB), 1, 1))
	logits := graph.Add(graph.Dot(x, constant(g, a.gendW)).Product(), graph.Reshape(constant(g, a.gendB), 1, 2))
	return graph.Concatenate([]*graph.Node{age, graph.Softmax(logits, 1)}, 1)
}

// Features runs the network's TinyXception extractor on 112×112×3 inputs
// (0..255) and returns each input's pooled feature vector
// (AgeGenderFeatures values, ReLU outputs so none negative): the
// representation the age and gender heads read. The extractor was trained
// by face-api's authors for age and gender, never on identities, so the
// vectors are public, generic face features. Safe for concurrent use.
func (a *AgeGender) Features(inputs []*imaging.Float) ([][]float32, error) {
	return a.feat.run(inputs)
}

// RegionFeatures is Features with the last 7×7 feature map averaged over
// four overlapping 4×4 quadrants (the middle row and column shared)
// instead of the whole map, concatenated top-left, top-right, bottom-left,
// bottom-right: AgeGenderRegionFeatures values per input. Keeping where on
// the face a feature fired helps tell people apart, which the global mean
// the age and gender heads read throws away. Safe for concurrent use.
func (a *AgeGender) RegionFeatures(inputs []*imaging.Float) ([][]float32, error) {
	return a.reg.run(inputs)
}
