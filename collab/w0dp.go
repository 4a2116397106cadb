package collab

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/metric"
)

// W0DP configures the private exchange of MT-LMNN's shared W₀
// (SharedMetricDP). The unit is one person of one library, as for
// bootstrapping.
type W0DP struct {
	// Epsilon is the target ε per person of a library for all the
	// exchange's steps, at Delta.
	Epsilon, Delta float64
	// Clip bounds each library's gradient of V₀ in Frobenius norm [1].
	Clip float64
	// Steps is the number of exchanges (gradient steps of V₀) [20].
	Steps int
	// LearningRate is the steps' rate [0.01].
	LearningRate float64
	// Margin is the LMNN margin in squared distance [0.1]; Mu weighs the
	// impostors' hinge against the pull [0.5]; Gamma0 and Gamma weigh
	// ‖W₀ − I‖²_F and each ‖W_k‖²_F [0.1].
	Margin, Mu, Gamma0, Gamma float64
	// Source draws the noise (nil: a fresh CSPRNG-seeded one).
	Source *dp.Source
}

// W0Report says what a private W₀ exchange did.
type W0Report struct {
	Libraries int     `json:"libraries"`
	Steps     int     `json:"steps"`
	Clip      float64 `json:"clip"`
	// NoiseMultiplier is the noise's standard deviation over the
	// sensitivity 2·Clip; Epsilon the exchange's ε at Delta alone.
	NoiseMultiplier float64 `json:"noise_multiplier"`
	Epsilon         float64 `json:"epsilon"`
	Delta           float64 `json:"delta"`
	// ClippedShare is the share of the libraries' gradients the clip
	// shortened (measured in the simulation; a real exchange would not
	// reveal it).
	ClippedShare float64 `json:"clipped_share"`
}

func (d *W0DP) defaults() error {
	deff := func(v *float64, x float64) {
		if *v == 0 {
			*v = x
		}
	}
	deff(&d.Clip, 1)
	deff(&d.LearningRate, 0.01)
	deff(&d.Margin, 0.1)
	deff(&d.Mu, 0.5)
	deff(&d.Gamma0, 0.1)
	deff(&d.Gamma, 0.1)
	if d.Steps == 0 {
		d.Steps = 20
	}
	switch {
	case !(d.Epsilon > 0) || !(d.Delta > 0 && d.Delta < 1):
		return fmt.Errorf("collab: W₀'s DP needs ε > 0 and δ in (0, 1), got %g and %g", d.Epsilon, d.Delta)
	case !(d.Clip > 0) || !(d.LearningRate > 0) || !(d.Margin >= 0) || !(d.Mu >= 0 && d.Mu <= 1) || d.Steps < 1:
		return errors.New("collab: W₀'s clip, learning rate and steps must be positive, margin ≥ 0, μ in [0, 1]")
	case !(d.Gamma0 >= 0) || !(d.Gamma >= 0):
		return errors.New("collab: W₀'s regularisation weights must not be negative")
	}
	if d.Source == nil {
		s, err := dp.NewSource()
		if err != nil {
			return fmt.Errorf("collab: %w", err)
		}
		d.Source = s
	}
	return nil
}

// w0Task is one library's part of the exchange: its named faces in the
// base space, their people, and its private factor V_k (never sent).
type w0Task struct {
	x      [][]float64
	person []int
	vk     []float64
}

// SharedMetricDP is SharedMetric as a private exchange: every library
// keeps its own V_k and, at each of Steps exchanges, sends the gradient
// of its LMNN loss (Irene Eq. 7's task term, normalised by its target
// pairs) with respect to V₀, clipped to Clip in Frobenius norm; the
// coordinator adds Gaussian noise to the sum, of standard deviation
// σ·2·Clip per coordinate (one person of a library changes only that
// library's clipped gradient, by at most 2·Clip), and takes a step of V₀
// with the mean and ‖W₀ − I‖²_F's gradient (which needs no data). σ is
// the smallest that makes the Steps releases (Epsilon, Delta)-DP by the
// RDP accountant. charge is called with the whole exchange's event before
// any library computes anything; its error stops the exchange. The
// returned map is V₀ (W₀ = V₀ᵀV₀), computed in sp's space (nil: the
// descriptors).
func SharedMetricDP(ctx context.Context, libs []*Library, sp space, o *Options, d W0DP, charge func(dp.Event) error) (*metric.Metric, *W0Report, error) {
	if err := d.defaults(); err != nil {
		return nil, nil, err
	}
	tasks, dim, err := w0Tasks(libs, sp, o)
	if err != nil {
		return nil, nil, err
	}
	sensitivity := 2 * d.Clip
	sigma, err := dp.NoiseMultiplier(1, d.Steps, d.Epsilon, d.Delta)
	if err != nil {
		return nil, nil, fmt.Errorf("collab: W₀'s noise: %w", err)
	}
	// The release snaps to a grid, which lowers the multiplier by at most
	// 2^−20 relative; ask for a little more noise and account for what
	// the grid gives.
	std := sigma * sensitivity * (1 + 1e-4)
	g, err := dp.GaussianGrid(std, dim*dim)
	if err != nil {
		return nil, nil, fmt.Errorf("collab: %w", err)
	}
	actual, err := g.GaussianMultiplier(sensitivity)
	if err != nil {
		return nil, nil, fmt.Errorf("collab: %w", err)
	}
	ev, err := dp.GaussianEvent(actual, d.Steps)
	if err != nil {
		return nil, nil, fmt.Errorf("collab: %w", err)
	}
	ev.Label = "collab W₀ exchange"
	if charge != nil {
		if err := charge(ev); err != nil {
			return nil, nil, fmt.Errorf("collab: the ledgers refused W₀'s exchange: %w", err)
		}
	}
	eps, _, err := dp.ScheduleEpsilon(1, actual, d.Steps, d.Delta)
	if err != nil {
		return nil, nil, fmt.Errorf("collab: %w", err)
	}
	rep := &W0Report{Libraries: len(tasks), Steps: d.Steps, Clip: d.Clip, NoiseMultiplier: actual, Epsilon: eps, Delta: d.Delta}
	v0 := metric.Identity(dim).Matrix()
	clipped := 0
	for range d.Steps {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		sum, c := clippedSum(tasks, v0, dim, d)
		clipped += c
		d.Source.AddGaussian64(sum, std)
		reg := w0RegGrad(v0, dim)
		for i := range v0 {
			v0[i] -= d.LearningRate * (sum[i]/float64(len(tasks)) + 4*d.Gamma0*reg[i])
		}
	}
	rep.ClippedShare = ratio(clipped, d.Steps*len(tasks))
	m, err := metric.NewMetric(dim, dim, v0)
	if err != nil {
		return nil, nil, fmt.Errorf("collab: W₀ diverged: %w", err)
	}
	return m, rep, nil
}

// w0Tasks are the libraries' named faces (3 per person, as SharedMetric)
// in sp's space, and the space's dimension.
func w0Tasks(libs []*Library, sp space, o *Options) ([]*w0Task, int, error) {
	var tasks []*w0Task
	dim := 0
	for li, l := range libs {
		isNamed := chooseNamed(l, 3, trialRNG(o.Seed^0x3713, 0, li, 3))
		t := &w0Task{}
		for i, x := range l.Descs {
			if !isNamed[i] {
				continue
			}
			y := x
			if sp != nil {
				var err error
				if y, err = sp(x); err != nil {
					return nil, 0, err
				}
			}
			t.x = append(t.x, to64(y))
			t.person = append(t.person, l.Person[i])
			dim = len(y)
		}
		if len(t.x) > 0 {
			t.vk = make([]float64, dim*dim)
			for i := range dim {
				t.vk[i*dim+i] = 0.1
			}
			tasks = append(tasks, t)
		}
	}
	if len(tasks) == 0 {
		return nil, 0, errors.New("collab: no library has named faces for W₀")
	}
	return tasks, dim, nil
}

// clippedSum is one exchange without its noise: every library's V₀
// gradient clipped to d.Clip, summed (what the coordinator adds noise
// to), after each library's own step of V_k. It also returns how many
// gradients the clip shortened.
func clippedSum(tasks []*w0Task, v0 []float64, dim int, d W0DP) ([]float64, int) {
	sum := make([]float64, dim*dim)
	clipped := 0
	for _, t := range tasks {
		g0, gk := t.gradient(v0, dim, d)
		if n := frob(g0); n > d.Clip {
			scaleVec(g0, d.Clip/n)
			clipped++
		}
		addScaled(sum, 1, g0)
		// The library's own step of V_k, with its regulariser.
		addScaled(gk, 4*d.Gamma, cubeGrad(t.vk, dim))
		addScaled(t.vk, -d.LearningRate, gk)
	}
	return sum, clipped
}

// gradient is the task's LMNN loss gradient with respect to V₀ and V_k:
// distances in the stacked map [V₀; V_k], target neighbours every other
// named face of the same person, impostors every face of another person
// within the margin; the loss is divided by the number of target pairs.
// With A the pairs' weights, both gradients are 2·V·Xᵀ·L(A)·X, L(A) the
// Laplacian of A + Aᵀ.
func (t *w0Task) gradient(v0 []float64, dim int, d W0DP) (g0, gk []float64) {
	n := len(t.x)
	z := make([][]float64, n)
	for i, x := range t.x {
		z[i] = append(matVec(v0, x, dim), matVec(t.vk, x, dim)...)
	}
	dd := make([]float64, n*n)
	for i := range n {
		for j := i + 1; j < n; j++ {
			var s float64
			for k := range z[i] {
				e := z[i][k] - z[j][k]
				s += e * e
			}
			dd[i*n+j], dd[j*n+i] = s, s
		}
	}
	dist := func(i, j int) float64 { return dd[i*n+j] }
	a := make([]float64, n*n)
	pairs := 0
	for i := range n {
		for j := range n {
			if i == j || t.person[i] != t.person[j] {
				continue
			}
			pairs++
			dij := dist(i, j)
			a[i*n+j] += 1 - d.Mu
			for l := range n {
				if t.person[l] == t.person[i] {
					continue
				}
				if d.Margin+dij-dist(i, l) > 0 {
					a[i*n+j] += d.Mu
					a[i*n+l] -= d.Mu
				}
			}
		}
	}
	g0, gk = make([]float64, dim*dim), make([]float64, dim*dim)
	if pairs == 0 {
		return g0, gk
	}
	// M = Xᵀ L X / pairs with L = diag(rowsum(S)) − S, S = A + Aᵀ.
	lx := make([][]float64, n)
	for i := range n {
		lx[i] = make([]float64, dim)
		var deg float64
		for j := range n {
			sij := a[i*n+j] + a[j*n+i]
			if j == i || sij == 0 {
				continue
			}
			deg += sij
			addScaled(lx[i], -sij, t.x[j])
		}
		addScaled(lx[i], deg, t.x[i])
	}
	mm := make([]float64, dim*dim)
	for i := range n {
		for r, xv := range t.x[i] {
			if xv == 0 {
				continue
			}
			addScaled(mm[r*dim:(r+1)*dim], xv, lx[i])
		}
	}
	scale := 2 / float64(pairs)
	matMulInto(g0, v0, mm, dim, scale)
	matMulInto(gk, t.vk, mm, dim, scale)
	return g0, gk
}

func matVec(m, x []float64, dim int) []float64 {
	y := make([]float64, dim)
	for r := range dim {
		var s float64
		for c, v := range m[r*dim : (r+1)*dim] {
			s += v * x[c]
		}
		y[r] = s
	}
	return y
}

// matMulInto sets dst = scale·a·b (dim × dim).
func matMulInto(dst, a, b []float64, dim int, scale float64) {
	clear(dst)
	for r := range dim {
		out := dst[r*dim : (r+1)*dim]
		for k, av := range a[r*dim : (r+1)*dim] {
			if av == 0 {
				continue
			}
			f := scale * av
			for c, bv := range b[k*dim : (k+1)*dim] {
				out[c] += f * bv
			}
		}
	}
}

// w0RegGrad is V(VᵀV − I), the gradient of ‖VᵀV − I‖²_F over 4.
func w0RegGrad(v []float64, dim int) []float64 {
	vtv := make([]float64, dim*dim)
	for r := range dim {
		for k := range dim {
			a := v[k*dim+r]
			if a == 0 {
				continue
			}
			for c := range dim {
				vtv[r*dim+c] += a * v[k*dim+c]
			}
		}
	}
	for i := range dim {
		vtv[i*dim+i]--
	}
	out := make([]float64, dim*dim)
	matMulInto(out, v, vtv, dim, 1)
	return out
}

// cubeGrad is V·VᵀV, the gradient of ‖VᵀV‖²_F over 4.
func cubeGrad(v []float64, dim int) []float64 {
	g := w0RegGrad(v, dim)
	for i := range g {
		g[i] += v[i]
	}
	return g
}

func frob(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

func scaleVec(v []float64, f float64) {
	for i := range v {
		v[i] *= f
	}
}

func addScaled(dst []float64, f float64, src []float64) {
	for i, v := range src {
		dst[i] += f * v
	}
}
