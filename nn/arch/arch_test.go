package arch

import (
	"strings"
	"testing"
)

func TestNewConfigs(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		wantIn  int
		wantErr string
	}{
		{"descriptor head", Config{Kind: "head"}, 128, ""},
		{"age/gender head", Config{Kind: "head", Features: HeadAgeGender}, 2048, ""},
		{"unknown head features", Config{Kind: "head", Features: "pixels"}, 0, "unknown head features"},
		{"negative head size", Config{Kind: "head", Hidden: -1}, 0, "must be positive"},
		{"features on LightFace", Config{Kind: "lightface", Input: 64, Features: HeadAgeGender}, 0, "a head's input"},
		{"LightFace too small", Config{Kind: "lightface", Input: 16}, 0, "input side"},
		{"unknown kind", Config{Kind: "resnet"}, 0, "unknown model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := New(c.cfg)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("New(%+v) error %v, want one containing %q", c.cfg, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Config().In; got != c.wantIn {
				t.Errorf("input size %d, want %d", got, c.wantIn)
			}
			if d := m.InputDims(); len(d) != 1 || d[0] != c.wantIn {
				t.Errorf("InputDims %v, want [%d]", d, c.wantIn)
			}
			i, ok := m.Params().Index("fc1/w")
			if !ok {
				t.Fatalf("no fc1/w among %v", m.Params().Specs())
			}
			if s := m.Params().Spec(i).Shape; s[0] != c.wantIn {
				t.Errorf("fc1/w shape %v, want [%d …]", s, c.wantIn)
			}
		})
	}
}
