package strategy

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/veil-privacy/veil/fed/wire"
)

// headModel has the layout of veil train's head (nn/arch): a dense layer,
// its bias, a PReLU's per-unit slopes, the output layer and a loss
// parameter.
func headModel() wire.Weights {
	r := rand.New(rand.NewChaCha8([32]byte{9}))
	t := func(name string, shape ...int) wire.Tensor { return randTensor(r, name, shape...) }
	return wire.Weights{t("fc1/w", 5, 8), t("fc1/b", 8), t("act1/alpha", 8), t("fc2/w", 8, 4), t("fc2/b", 4), t("head/centre", 4)}
}

// randTensor is a tensor of the shape with standard normal values from r.
func randTensor(r *rand.Rand, name string, shape ...int) wire.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return wire.Tensor{Name: name, Shape: shape, Values: v}
}

// TestFCLayersThinsPerUnitParameters: the head's hidden layer is found
// with its bias, its PReLU slopes and the layer it feeds, and a thinned
// model is a network of the kept units: every tensor of the hidden layer
// has the kept width (before, the slopes were served whole, a layout no
// network of the kept units has).
func TestFCLayersThinsPerUnitParameters(t *testing.T) {
	model := headModel()
	layers := FCLayers(model)
	want := []FCLayer{{Weight: "fc1/w", Bias: "fc1/b", Next: "fc2/w", Units: []string{"act1/alpha"}}}
	if len(layers) != 1 || layers[0].Weight != want[0].Weight || layers[0].Bias != want[0].Bias || layers[0].Next != want[0].Next ||
		!slices.Equal(layers[0].Units, want[0].Units) {
		t.Fatalf("FCLayers = %+v, want %+v", layers, want)
	}
	th, err := Thin(model, ThinOptions{Drop: 0.5, Layers: layers}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	k := len(th.Kept[0])
	if k == 0 || k == 8 {
		t.Fatalf("the draw keeps %d of 8 units; the test needs a thinned layer", k)
	}
	shapes := map[string][]int{"fc1/w": {5, k}, "fc1/b": {k}, "act1/alpha": {k}, "fc2/w": {k, 4}, "fc2/b": {4}, "head/centre": {4}}
	for _, ts := range th.Model {
		if !slices.Equal(ts.Shape, shapes[ts.Name]) {
			t.Errorf("served %s has shape %v, want %v", ts.Name, ts.Shape, shapes[ts.Name])
		}
	}
	for j, u := range th.Kept[0] {
		if got := th.Model[2].Values[j]; got != model[2].Values[u] {
			t.Errorf("served slope %d is %g, want unit %d's %g", j, got, u, model[2].Values[u])
		}
	}
	// The merged update moves only the kept units' slopes.
	up := th.Model.Clone()
	merged, err := th.Merge(up)
	if err != nil {
		t.Fatal(err)
	}
	for u, v := range merged[2].Values {
		if kept := slices.Contains(th.Kept[0], u); kept != (v != 0) {
			t.Errorf("unit %d (kept %v): merged slope update %g", u, kept, v)
		}
	}
}

// TestThinUnitsRefusesBadKeptLists: kept units out of range, repeated,
// unordered, none, or lists for another number of layers are refused.
func TestThinUnitsRefusesBadKeptLists(t *testing.T) {
	model := headModel()
	layers := FCLayers(model)
	for _, c := range []struct {
		name string
		kept [][]int
	}{
		{"out of range", [][]int{{0, 8}}},
		{"negative", [][]int{{-1, 2}}},
		{"repeated", [][]int{{1, 1}}},
		{"unordered", [][]int{{3, 1}}},
		{"none kept", [][]int{{}}},
		{"two lists for one layer", [][]int{{1}, {2}}},
	} {
		if _, err := ThinUnits(model, layers, c.kept); err == nil {
			t.Errorf("%s: %v accepted", c.name, c.kept)
		}
	}
	th, err := ThinUnits(model, layers, [][]int{{2, 5}})
	if err != nil || !slices.Equal(th.Kept[0], []int{2, 5}) || th.Model[2].Shape[0] != 2 {
		t.Fatalf("kept {2, 5}: %v", err)
	}
}
