package checkpoint

import (
	"bytes"
	"slices"
	"testing"

	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/train"
)

func sample(t testing.TB) (*Checkpoint, arch.Config) {
	cfg := arch.Config{Kind: "head", In: 4, Hidden: 3, Embedding: 2}
	m, err := arch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Params().Init(1)
	st := train.State{Step: 7, Privacy: train.Privacy{Steps: 7, Epsilon: 1.5, Delta: 1e-5}}
	for i := 0; i < m.Params().Len(); i++ {
		st.M = append(st.M, make([]float32, m.Params().Spec(i).Size()))
		st.V = append(st.V, make([]float32, m.Params().Spec(i).Size()))
		st.EMA = append(st.EMA, make([]float32, m.Params().Spec(i).Size()))
		st.M[i][0] = float32(i)
		st.EMA[i][0] = float32(-i)
	}
	return FromTrainer(Header{Model: m.Config(), Optimizer: "adam", Epoch: 2}, m.Params(), st), m.Config()
}

func TestRoundTrip(t *testing.T) {
	c, cfg := sample(t)
	var buf bytes.Buffer
	if err := c.Write(&buf); err != nil {
		t.Fatal(err)
	}
	d, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if d.Header.Epoch != 2 || d.State.Step != 7 || d.State.Privacy.Epsilon != 1.5 || d.State.M[2][0] != 2 || len(d.State.V) != len(c.State.V) {
		t.Errorf("round trip lost data: %+v", d.Header)
	}
	m, _ := arch.New(cfg)
	if err := d.Apply(m.Config(), m.Params()); err != nil {
		t.Fatal(err)
	}
	for i := range c.Values {
		if !slices.Equal(m.Params().Values(i), c.Values[i]) {
			t.Fatalf("parameter %d differs after Apply", i)
		}
	}
	// Another model is refused.
	other, _ := arch.New(arch.Config{Kind: "head", In: 4, Hidden: 5, Embedding: 2})
	if err := d.Apply(other.Config(), other.Params()); err == nil {
		t.Error("checkpoint applied to a different model")
	}
	// Truncation and trailing data are refused.
	if _, err := Read(bytes.NewReader(buf.Bytes()[:buf.Len()-1])); err == nil {
		t.Error("truncated checkpoint accepted")
	}
	if _, err := Read(bytes.NewReader(append(buf.Bytes(), 0))); err == nil {
		t.Error("checkpoint with trailing data accepted")
	}
}

// FuzzRead feeds arbitrary bytes to the decoder, both with the length
// known (bytes.Reader) and as a stream: it must never panic, must agree
// between the two, and whatever it accepts must survive a round trip.
func FuzzRead(f *testing.F) {
	c, _ := sample(f)
	var buf bytes.Buffer
	_ = c.Write(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte(magic + "\x02\x00\x00\x00{}"))
	f.Add(forged(f, maxValues/2))
	f.Add(forged(f, 3))
	f.Add([]byte(magic + "\xff\xff\xff\x7f{}"))
	// A federated model's record, itself from a federated initial model.
	fc, _ := sample(f)
	inner := &Federation{DPRounds: 2, Clients: 3, Unit: train.UnitIdentity, Delta: 1e-5, EpsilonOneClient: 2, Assumption: "a",
		KClients: []ClientsEpsilon{{K: 1, Epsilon: 2, Exact: true}, {K: 3, Epsilon: 3.1}}}
	fc.Header.Federation = &Federation{DPRounds: 1, PlainRounds: 1, Clients: 1, EpsilonOneClient: 1, Assumption: "b",
		KClients: []ClientsEpsilon{{K: 1, Epsilon: 1, Exact: true, WithInit: 3}},
		Init:     &Origin{Data: "federated", Privacy: train.Privacy{Epsilon: 2, Delta: 1e-5}, Federation: inner, Note: "c"}}
	buf.Reset()
	_ = fc.Write(&buf)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Read(bytes.NewReader(b))
		s, serr := Read(onlyReader{bytes.NewReader(b)})
		if (err == nil) != (serr == nil) {
			t.Fatalf("known length: %v; stream: %v", err, serr)
		}
		if err != nil {
			return
		}
		if len(d.Values) != len(d.Header.Params) || len(d.State.M) != len(d.Values) || len(s.Values) != len(d.Values) {
			t.Fatalf("%d tensors for %d parameters", len(d.Values), len(d.Header.Params))
		}
		var again bytes.Buffer
		if err := d.Write(&again); err != nil {
			t.Fatalf("an accepted checkpoint does not encode again: %v", err)
		}
		e, err := Read(bytes.NewReader(again.Bytes()))
		if err != nil {
			t.Fatalf("re-encoded checkpoint refused: %v", err)
		}
		if len(e.Values) != len(d.Values) || e.Header.Step != d.Header.Step || (e.Header.Federation == nil) != (d.Header.Federation == nil) {
			t.Fatalf("round trip changed the checkpoint")
		}
		_ = d.Apply(arch.Config{Kind: "head"}, nn.NewParams())
	})
}
