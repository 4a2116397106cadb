package metric

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/vec"
)

func TestRandomRotationOrthogonalAndDeterministic(t *testing.T) {
	for _, d := range []int{1, 2, 3, 17, 128} {
		r, err := RandomRotation([32]byte{1, 2, 3}, d)
		if err != nil {
			t.Fatal(err)
		}
		w := r.Mahalanobis()
		for i := range d {
			for j := range d {
				want := 0.0
				if i == j {
					want = 1
				}
				if math.Abs(w[i*d+j]-want) > 1e-12 {
					t.Fatalf("d = %d: (VᵀV)[%d][%d] = %v", d, i, j, w[i*d+j])
				}
			}
		}
		again, _ := RandomRotation([32]byte{1, 2, 3}, d)
		other, _ := RandomRotation([32]byte{1, 2, 4}, d)
		same, differ := true, false
		for i, v := range r.v {
			same = same && again.v[i] == v
			differ = differ || other.v[i] != v
		}
		if !same {
			t.Errorf("d = %d: the same seed gave different rotations", d)
		}
		if !differ && d > 1 { // O(1) = {±1}: two seeds may agree
			t.Errorf("d = %d: different seeds gave the same rotation", d)
		}
		// Distances are preserved exactly (to rounding).
		rng := rand.New(rand.NewPCG(uint64(d), 1))
		for range 20 {
			a, b := make([]float64, d), make([]float64, d)
			for i := range a {
				a[i], b[i] = rng.NormFloat64(), rng.NormFloat64()
			}
			e := Identity(d).Distance(a, b)
			if got := r.Distance(a, b); math.Abs(got-e) > 1e-12*e {
				t.Fatalf("d = %d: rotated distance %v, Euclidean %v", d, got, e)
			}
		}
	}
	if _, err := RandomRotation([32]byte{}, 0); err == nil {
		t.Error("RandomRotation accepted size 0")
	}
}

// The rotation must be Haar-distributed: for Haar on O(d) the trace has
// mean 0 and variance 1, the determinant is ±1 with probability ½ each and
// every entry has mean 0 and variance 1/d. QR without the sign fix (or a
// biased stream) fails these (e.g. Householder QR's raw Q has E[tr] ≠ 0).
func TestRandomRotationHaar(t *testing.T) {
	const d, n = 3, 4000
	var tr, tr2, e00, e00sq float64
	pos := 0
	for s := range n {
		var seed [32]byte
		seed[0], seed[1] = byte(s), byte(s>>8)
		r, err := RandomRotation(seed, d)
		if err != nil {
			t.Fatal(err)
		}
		x := r.v[0] + r.v[4] + r.v[8]
		tr += x
		tr2 += x * x
		e00 += r.v[0]
		e00sq += r.v[0] * r.v[0]
		det := r.v[0]*(r.v[4]*r.v[8]-r.v[5]*r.v[7]) - r.v[1]*(r.v[3]*r.v[8]-r.v[5]*r.v[6]) + r.v[2]*(r.v[3]*r.v[7]-r.v[4]*r.v[6])
		if det > 0 {
			pos++
		}
	}
	mean, vr := tr/n, tr2/n-(tr/n)*(tr/n)
	// Standard errors: trace sd 1 → 0.016; 4.5 sigma bounds.
	if math.Abs(mean) > 0.07 || math.Abs(vr-1) > 0.12 {
		t.Errorf("trace mean %.4f, variance %.4f; Haar has 0 and 1", mean, vr)
	}
	if math.Abs(e00/n) > 0.045 || math.Abs(e00sq/n-1.0/d) > 0.03 {
		t.Errorf("V[0][0] mean %.4f, second moment %.4f; Haar has 0 and %.4f", e00/n, e00sq/n, 1.0/d)
	}
	if p := float64(pos) / n; math.Abs(p-0.5) > 0.04 {
		t.Errorf("det = +1 in %.3f of draws, Haar has 0.5", p)
	}
}

// LMNN depends on V only through W = VᵀV, and its gradient is V·(…), so
// starting from a rotation R gives V_R = R·V_I and the same W as starting
// from the identity: the secret changes coordinates, not the metric.
func TestLMNNFromRotationLearnsSameMetric(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	d := synthFaces(rng, 8, 6, 12, 1)
	rot, err := RandomRotation([32]byte{9}, 12)
	if err != nil {
		t.Fatal(err)
	}
	mi, _ := fit(t, Options{}, d, nil)
	mr, _ := fit(t, Options{}, d, rot)
	wi, wr := mi.Mahalanobis(), mr.Mahalanobis()
	scale := 0.0
	for _, x := range wi {
		scale = max(scale, math.Abs(x))
	}
	for i := range wi {
		if math.Abs(wi[i]-wr[i]) > 1e-6*scale {
			t.Fatalf("W from rotation differs from W from identity at %d: %v vs %v", i, wr[i], wi[i])
		}
	}
	rvi := matMul(rot.v, mi.v, 12, 12, 12)
	for i := range rvi {
		if math.Abs(rvi[i]-mr.v[i]) > 1e-6*scale {
			t.Fatalf("V_R ≠ R·V_I at %d: %v vs %v", i, mr.v[i], rvi[i])
		}
	}
}

// Adversary: a library's stored faceprints are V x under its secret
// rotation. Someone holding two libraries' stores of the same faces tries to
// link them by nearest neighbour in coordinates. Under the same key every
// face links; under different keys linking must be at chance. (It does not
// hide distances: see RandomRotation.)
func TestRotationUnlinkability(t *testing.T) {
	const n, d = 300, 32
	rng := rand.New(rand.NewPCG(31, 32))
	x := make([][]float64, n)
	for i := range x {
		x[i] = make([]float64, d)
		for j := range x[i] {
			x[i][j] = rng.NormFloat64()
		}
	}
	link := func(a, b *Metric) float64 {
		za, zb := make([][]float64, n), make([][]float64, n)
		for i := range x {
			za[i], zb[i] = a.Transform(nil, x[i]), b.Transform(nil, x[i])
		}
		hits := 0
		for i := range za {
			best, bestD := -1, math.Inf(1)
			for j := range zb {
				if dd := vec.SqDist(za[i], zb[j]); dd < bestD {
					best, bestD = j, dd
				}
			}
			if best == i {
				hits++
			}
		}
		return float64(hits) / n
	}
	ka, _ := RandomRotation([32]byte{'a'}, d)
	kb, _ := RandomRotation([32]byte{'b'}, d)
	if r := link(ka, ka); r != 1 {
		t.Fatalf("same key links only %.3f of faces; the attack itself is broken", r)
	}
	// Chance is 1/300; 10/300 is far above it (binomial tail < 1e-6).
	if r := link(ka, kb); r > 10.0/n {
		t.Errorf("different keys: the attacker links %.3f of faces (chance %.4f)", r, 1.0/n)
	}
}

var _ = context.Background

// The rotation a seed gives is pinned (to rounding: FMA builds differ in the
// last bits), so a library re-derives the same starting map after an upgrade.
func TestRandomRotationGolden(t *testing.T) {
	r, err := RandomRotation([32]byte{1, 2, 3}, 4)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "rotation-v1.txt")
	if *update {
		var sb strings.Builder
		for _, v := range r.v {
			fmt.Fprintf(&sb, "%.17g\n", v)
		}
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(b))
	if len(want) != len(r.v) {
		t.Fatalf("golden file has %d entries, rotation %d", len(want), len(r.v))
	}
	for i, s := range want {
		w, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(r.v[i]-w) > 1e-12 {
			t.Fatalf("entry %d: %v, golden %v", i, r.v[i], w)
		}
	}
}
