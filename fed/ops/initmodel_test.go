package ops_test

import (
	"slices"
	"testing"

	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/local/localtest"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/training"
)

// The initial model is the one package training makes for a new run of
// the federated head with the same seed (veil fed sim's), and a federated
// client's trainer accepts it.
func TestInitialHeadIsTrainingsInitialisation(t *testing.T) {
	data, o := localtest.Data(t, t.TempDir(), 3)
	o.Optim.Seed = 7
	s, err := training.NewSession(o.Model, o.Optim, nil, 0, data)
	if err != nil {
		t.Fatal(err)
	}
	want := s.Weights()
	ck, err := ops.InitialHead(ops.InitialHeadOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ops.WeightsFromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.Names) {
		t.Fatalf("%d tensors, training has %d", len(got), len(want.Names))
	}
	for i, tn := range got {
		if tn.Name != want.Names[i] || !slices.Equal(tn.Shape, want.Shapes[i]) || !slices.Equal(tn.Values, want.Values[i]) {
			t.Fatalf("tensor %d %q %v differs from training's %q %v", i, tn.Name, tn.Shape, want.Names[i], want.Shapes[i])
		}
	}
	if got.Len() != 557824 || !ck.Header.Public || ck.Header.Model.Kind != "head" || ck.Header.Loss.Kind != "distill" {
		t.Fatalf("%d values, public %v, model %+v, loss %+v", got.Len(), ck.Header.Public, ck.Header.Model, ck.Header.Loss)
	}
	ev, err := local.NewEvaluator(o.Model, o.Optim, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Initial().SameLayout(got); err != nil {
		t.Fatalf("the client's network does not fit: %v", err)
	}
	other, _ := ops.InitialHead(ops.InitialHeadOptions{Seed: 8})
	if slices.Equal(other.Values[0], ck.Values[0]) {
		t.Error("seeds 7 and 8 gave the same model")
	}
	if _, err := ops.InitialHead(ops.InitialHeadOptions{Features: "pixels"}); err == nil {
		t.Error("unknown features accepted")
	}
}
