package checkpoint

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
)

func TestHeaderKeepsDataAndPublic(t *testing.T) {
	c, _ := sample(t)
	c.Header.Data, c.Header.Public = "mtfl", true
	var buf bytes.Buffer
	if err := c.Write(&buf); err != nil {
		t.Fatal(err)
	}
	d, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if d.Header.Data != "mtfl" || !d.Header.Public {
		t.Errorf("header after round trip: data %q public %v", d.Header.Data, d.Header.Public)
	}
}

// withHead returns a fresh model of cfg with a loss head's parameter
// declared under loss.ParamPrefix.
func withHead(t *testing.T, cfg arch.Config, head string, size int) *nn.Params {
	t.Helper()
	m, err := arch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if head != "" {
		if err := m.Params().Declare(nn.ParamSpec{Name: loss.ParamPrefix + head, Shape: []int{size}, Init: nn.InitZeros}); err != nil {
			t.Fatal(err)
		}
	}
	return m.Params()
}

func TestApplyInit(t *testing.T) {
	c, cfg := sample(t)
	cases := []struct {
		name       string
		cfg        arch.Config
		head       string
		prefix     string
		wantCopied int
		wantErr    string
	}{
		{"same model", cfg, "", loss.ParamPrefix, len(c.Values), ""},
		{"new loss head kept fresh", cfg, "centre", loss.ParamPrefix, len(c.Values), ""},
		{"new parameter outside the head", cfg, "centre", "", 0, `no parameter "head/centre"`},
		{"other model", arch.Config{Kind: "head", In: 4, Hidden: 5, Embedding: 2}, "", loss.ParamPrefix, 0, "it holds model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := withHead(t, tc.cfg, tc.head, 2)
			n, err := c.ApplyInit(tc.cfg, p, tc.prefix)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || n != tc.wantCopied {
				t.Fatalf("ApplyInit = %d, %v; want %d copied", n, err, tc.wantCopied)
			}
			// The sample stores a moving average, and the average is
			// what that run evaluated with: it starts the new run.
			for i := range c.Values {
				if !slices.Equal(p.Values(i), c.State.EMA[i]) || slices.Equal(c.Values[i], c.State.EMA[i]) {
					t.Errorf("parameter %d: not the moving average", i)
				}
			}
		})
	}
	// A checkpoint whose head parameter has another shape is refused.
	p := withHead(t, cfg, "centre", 2)
	d := FromTrainer(Header{Model: cfg}, p, c.State)
	d.State.M = append(d.State.M, make([]float32, 2))
	q := withHead(t, cfg, "centre", 3)
	if _, err := d.ApplyInit(cfg, q, loss.ParamPrefix); err == nil || !strings.Contains(err.Error(), "the model has [3]") {
		t.Errorf("shape mismatch: err = %v", err)
	}
}
