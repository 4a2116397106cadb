package collab

import "testing"

// TestWireBytesHandComputed checks the wire sizes against sizes worked out
// by hand from the encoding: the header's fields (version 2 bytes, each
// tensor spec with its key and length, total_bytes, SHA-256 34 bytes) and
// 4 bytes per value. cmd/veil/cli's TestCollabWireBytesMatchFedWire checks
// the same against fed/wire's encoder.
func TestWireBytesHandComputed(t *testing.T) {
	for _, c := range []struct {
		name string
		psi  PsiOptions
		// header: 2 (version) + per tensor 2 + name (2 + len) + shape
		// (2 + varints) + total_bytes (1 + varint) + 34 (SHA-256).
		want int64
	}{
		// psi/fc1/w [2,2]: 2+11+4 = 17; psi/fc1/b [2]: 2+11+3 = 16;
		// total_bytes 24: 2; 2+17+16+2+34 = 71; payload 6·4 = 24.
		{"linear 2→2", PsiOptions{Dim: 2}, 71 + 24},
		// [128,128]: 2+11+6 = 19; [128]: 2+11+4 = 17; total_bytes 66048:
		// 4; 2+19+17+4+34 = 76; payload 16512·4 = 66048.
		{"linear 128→128", PsiOptions{}, 76 + 66048},
		// [24,8]: 17; [8]: 16; total_bytes 800: 3; 72; payload 200·4.
		{"public 24→8", PsiOptions{Dim: 24, Out: 8}, 72 + 800},
		// [2048,256]: 19; [256]: 17; [256,128]: 19; [128]: 17;
		// total_bytes 2229760: 5; 2+19+17+19+17+5+34 = 113; payload
		// 557440·4.
		{"public 2048→256→128", PsiOptions{Dim: 2048, Hidden: 256, Out: 128}, 113 + 2229760},
	} {
		ψ, err := NewPsi(c.psi)
		if err != nil {
			t.Fatal(err)
		}
		if got := PsiWireBytes(ψ); got != c.want {
			t.Errorf("%s: ψ's wire size %d, want %d", c.name, got, c.want)
		}
		if got, err := BootstrapBytes(ψ, 3); err != nil || got != 6*c.want {
			t.Errorf("%s: 3 rounds %d (%v), want %d", c.name, got, err, 6*c.want)
		}
	}
	// w0/v0 [128,128]: 2+7+6 = 15; total_bytes 65536: 4; 2+15+4+34 = 55.
	for _, c := range []struct {
		dim, steps int
		want       int64
	}{
		{128, 1, 2 * (55 + 65536)},
		{128, 20, 40 * (55 + 65536)},
		// [8,8]: 2+7+4 = 13; total_bytes 256: 3; 2+13+3+34 = 52.
		{8, 3, 6 * (52 + 256)},
		{8, 0, 0},
	} {
		if got, err := W0Bytes(c.dim, c.steps); err != nil || got != c.want {
			t.Errorf("W₀ %d×%d, %d steps: %d (%v), want %d", c.dim, c.dim, c.steps, got, err, c.want)
		}
	}
	if _, err := W0Bytes(0, 1); err == nil {
		t.Error("W₀ of size 0 accepted")
	}
	if _, err := W0Bytes(8, -1); err == nil {
		t.Error("negative steps accepted")
	}
	ψ, _ := NewPsi(PsiOptions{Dim: 2})
	if _, err := BootstrapBytes(ψ, -1); err == nil {
		t.Error("negative epochs accepted")
	}
}

// TestDefaultExperimentBytesPerUser computes veil bench collab's default
// experiment's bytes per user from its settings (ψ linear on the 128-d
// descriptor and 20 epochs; W₀'s exchange 20 steps; ψ on public features
// 2,048 → 256 → 128, 20 epochs): the figures docs/results.md quotes.
func TestDefaultExperimentBytesPerUser(t *testing.T) {
	o := W0DP{Epsilon: 8, Delta: 1e-5}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	psi, _ := NewPsi(PsiOptions{})
	pub, _ := NewPsi(PsiOptions{Dim: 2048, Hidden: 256, Out: 128})
	boot, _ := BootstrapBytes(psi, 20)
	w0, _ := W0Bytes(128, o.Steps)
	bootPub, _ := BootstrapBytes(pub, 20)
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"shared_bootstrap", boot, 2_644_960},
		{"shared_w0", boot + w0, 5_268_600},
		{"shared_bootstrap_public", bootPub, 89_194_920},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d bytes per user, want %d", c.name, c.got, c.want)
		}
	}
}
