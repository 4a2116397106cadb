package metric

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/veil-privacy/veil/internal/vec"
)

// Unnamed is the label of a face nobody has named. Any negative label means
// the same: such a face has no target neighbours and is an impostor only for
// the people it was rejected as (see Rejection).
const Unnamed = -1

// Data is one library's training set: input vectors (faceprints), their
// labels (people; negative = Unnamed) and the user's rejections.
type Data struct {
	X          [][]float64
	Labels     []int
	Rejections []Rejection
}

// Rejection records that the user said face X[Face] is not person Label.
// It makes the face an impostor for every anchor labelled Label: LMNN must
// keep it farther from them than their target neighbours, by the margin.
type Rejection struct {
	Face, Label int
}

// problem holds one task's fixed data: inputs, target neighbours (chosen
// once, in the input space) and the current impostor active set.
type problem struct {
	n, in    int
	x        []float64 // n × in
	labels   []int
	targets  [][]int32
	rejected map[int][]int32 // label → faces rejected as that label
	pairs    int             // Σ |targets[i]|
	margin   float64
	mu       float64

	impostors int
	workers   int
	cands     [][]int32 // per anchor: impostor candidates (active set)

	// workspace
	z, y   []float64
	nz     []float64 // ‖z_i‖², for refresh
	vt, zt []float64 // Vᵀ, Zᵀ
	// Z and Zᵀ in single precision, for the impostor search
	z32, zt32 []float32
	g         []float64 // Zᵀ Y
	// pairs pointing at each face (CSR): anchors and their slots
	inOff          []int32
	inFrom, inSlot []int32
	tw, cw         [][]float64
	pull           []float64
	hinge          []float64
	active         []int
}

func newProblem(d Data, k int, margin, mu float64, impostors, workers int) (*problem, error) {
	n := len(d.X)
	if n == 0 {
		return nil, errors.New("metric: no training vectors")
	}
	if len(d.Labels) != n {
		return nil, fmt.Errorf("metric: %d vectors but %d labels", n, len(d.Labels))
	}
	in := len(d.X[0])
	if in == 0 || in > MaxDim {
		return nil, fmt.Errorf("metric: vector size %d outside 1…%d", in, MaxDim)
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("metric: %d vectors is too many", n)
	}
	p := &problem{n: n, in: in, x: make([]float64, n*in), labels: make([]int, n),
		margin: margin, mu: mu, impostors: impostors, workers: workers,
		rejected: map[int][]int32{}}
	for i, xi := range d.X {
		if len(xi) != in {
			return nil, fmt.Errorf("metric: vector %d has size %d, vector 0 has %d", i, len(xi), in)
		}
		for _, v := range xi {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("metric: vector %d has a non-finite entry", i)
			}
		}
		copy(p.x[i*in:], xi)
		p.labels[i] = d.Labels[i]
		if p.labels[i] < 0 {
			p.labels[i] = Unnamed
		}
	}
	seen := map[[2]int]bool{}
	for _, r := range d.Rejections {
		if r.Face < 0 || r.Face >= n {
			return nil, fmt.Errorf("metric: rejection of face %d, but there are %d faces", r.Face, n)
		}
		if r.Label < 0 {
			return nil, fmt.Errorf("metric: rejection of face %d names no person (label %d)", r.Face, r.Label)
		}
		if p.labels[r.Face] == r.Label {
			return nil, fmt.Errorf("metric: face %d is both named and rejected as person %d", r.Face, r.Label)
		}
		if seen[[2]int{r.Face, r.Label}] {
			continue
		}
		seen[[2]int{r.Face, r.Label}] = true
		p.rejected[r.Label] = append(p.rejected[r.Label], int32(r.Face))
	}
	for _, faces := range p.rejected {
		sort.Slice(faces, func(a, b int) bool { return faces[a] < faces[b] })
	}
	p.chooseTargets(k)
	if p.pairs == 0 {
		return nil, errors.New("metric: no person has two named faces, so there are no target neighbours to learn from")
	}
	p.z = nil
	p.y = make([]float64, n*in)
	p.pull = make([]float64, n)
	p.hinge = make([]float64, n)
	p.active = make([]int, n)
	p.tw = make([][]float64, n)
	for i := range n {
		p.tw[i] = make([]float64, len(p.targets[i]))
	}
	return p, nil
}

// chooseTargets picks, for every named face, its k nearest faces of the same
// person in the input space (Euclidean; ties by index), as LMNN does: the
// targets stay fixed while the metric is learned.
func (p *problem) chooseTargets(k int) {
	byLabel := map[int][]int32{}
	for i, l := range p.labels {
		if l >= 0 {
			byLabel[l] = append(byLabel[l], int32(i))
		}
	}
	p.targets = make([][]int32, p.n)
	p.pairs = 0
	vec.ParallelFor(p.n, p.workers, func(lo, hi int) {
		var h nearest
		for i := lo; i < hi; i++ {
			if p.labels[i] < 0 {
				continue
			}
			h.reset(k)
			xi := p.x[i*p.in : (i+1)*p.in]
			for _, j := range byLabel[p.labels[i]] {
				if int(j) != i {
					h.offer(vec.SqDist(xi, p.x[int(j)*p.in:(int(j)+1)*p.in]), j)
				}
			}
			p.targets[i] = h.sorted()
		}
	})
	for i := range p.n {
		p.pairs += len(p.targets[i])
	}
}

// transform fills p.z = X Vᵀ for V out × in.
func (p *problem) transform(v []float64, out int) {
	if len(p.z) != p.n*out {
		p.z = make([]float64, p.n*out)
	}
	p.vt = transpose(p.vt, v, out, p.in)
	vec.Gemm(p.z, p.x, p.vt, p.n, p.in, out, p.workers)
}

// refresh rebuilds the active set under V: for every anchor with targets,
// its p.impostors nearest differently-named faces in the transformed space,
// plus every face rejected as the anchor's person. The nearest ones are kept
// even when none violates a margin now: otherwise the pull could shrink the
// map between rebuilds with nothing pushing back.
func (p *problem) refresh(v []float64, out int) {
	if len(p.cands) != p.n {
		p.cands = make([][]int32, p.n)
		p.cw = make([][]float64, p.n)
	}
	p.allDots32(v, out, func(i int, row []float32, h *nearest) {
		if len(p.targets[i]) == 0 {
			p.cands[i], p.cw[i] = p.cands[i][:0], p.cw[i][:0]
			return
		}
		li := p.labels[i]
		h.reset(p.impostors)
		// d²(i, l) = ‖z_i‖² + ‖z_l‖² − 2 z_i·z_l only ranks the candidates;
		// eval recomputes their distances directly.
		for l, zz := range row {
			if p.labels[l] >= 0 && p.labels[l] != li {
				h.offer(p.nz[i]+p.nz[l]-2*float64(zz), int32(l))
			}
		}
		c := append(p.cands[i][:0], h.sorted()...)
		for _, f := range p.rejected[li] {
			if p.labels[f] < 0 || !contains(c, f) {
				c = append(c, f)
			}
		}
		p.cands[i] = c
		if cap(p.cw[i]) < len(c) {
			p.cw[i] = make([]float64, len(c))
		}
		p.cw[i] = p.cw[i][:len(c)]
	})
	p.buildIncoming()
}

// buildIncoming indexes, for every face, the pairs (anchor, slot) that point
// at it: slot < len(targets[anchor]) is a target, the rest candidates.
func (p *problem) buildIncoming() {
	if len(p.inOff) != p.n+1 {
		p.inOff = make([]int32, p.n+1)
	}
	clear(p.inOff)
	for i := range p.n {
		for _, j := range p.targets[i] {
			p.inOff[j+1]++
		}
		for _, l := range p.cands[i] {
			p.inOff[l+1]++
		}
	}
	for i := range p.n {
		p.inOff[i+1] += p.inOff[i]
	}
	nnz := int(p.inOff[p.n])
	if cap(p.inFrom) < nnz {
		p.inFrom, p.inSlot = make([]int32, nnz), make([]int32, nnz)
	}
	p.inFrom, p.inSlot = p.inFrom[:nnz], p.inSlot[:nnz]
	next := append([]int32(nil), p.inOff[:p.n]...)
	for i := range p.n {
		nt := len(p.targets[i])
		for a, j := range p.targets[i] {
			p.inFrom[next[j]], p.inSlot[next[j]] = int32(i), int32(a)
			next[j]++
		}
		for b, l := range p.cands[i] {
			p.inFrom[next[l]], p.inSlot[next[l]] = int32(i), int32(nt+b)
			next[l]++
		}
	}
}

// allDots32 is allDots in single precision, for ranking candidates.
func (p *problem) allDots32(v []float64, out int, f func(i int, row []float32, h *nearest)) {
	p.norms(v, out)
	if len(p.z32) != len(p.z) {
		p.z32 = make([]float32, len(p.z))
	}
	for i, x := range p.z {
		p.z32[i] = float32(x)
	}
	if len(p.zt32) != len(p.z) {
		p.zt32 = make([]float32, len(p.z))
	}
	for i := range p.n {
		for r := range out {
			p.zt32[r*p.n+i] = p.z32[i*out+r]
		}
	}
	blocks := (p.n + anchorBlock - 1) / anchorBlock
	vec.ParallelFor(blocks, p.workers, func(lo, hi int) {
		var h nearest
		dots := make([]float32, anchorBlock*p.n)
		for blk := lo; blk < hi; blk++ {
			i0, i1 := blk*anchorBlock, min((blk+1)*anchorBlock, p.n)
			// float32 is enough to rank candidates: its rounding (relative
			// 1e-7 of ‖z‖²) matters only between near ties.
			vec.Gemm32(dots, p.z32[i0*out:i1*out], p.zt32, i1-i0, out, p.n)
			for i := i0; i < i1; i++ {
				f(i, dots[(i-i0)*p.n:(i-i0+1)*p.n], &h)
			}
		}
	})
}

// anchorBlock is the number of anchors whose rows of dot products one
// matrix product computes (vec.Gemm's panel height, so one panel each).
const anchorBlock = 64

// norms transforms the inputs by V and fills p.nz with ‖z_i‖².
func (p *problem) norms(v []float64, out int) {
	p.transform(v, out)
	if len(p.nz) != p.n {
		p.nz = make([]float64, p.n)
	}
	for i := range p.n {
		zi := p.z[i*out : (i+1)*out]
		p.nz[i] = vec.Dot(zi, zi)
	}
}

// allDots transforms the inputs by V and calls f(i, row, h) for every
// anchor i with row[l] = z_i·z_l for all l (and a scratch heap), computing
// the rows 64 anchors at a time as one matrix product per block. Calls for
// different i may run concurrently.
func (p *problem) allDots(v []float64, out int, f func(i int, row []float64, h *nearest)) {
	p.norms(v, out)
	p.zt = transpose(p.zt, p.z, p.n, out)
	blocks := (p.n + anchorBlock - 1) / anchorBlock
	vec.ParallelFor(blocks, p.workers, func(lo, hi int) {
		var h nearest
		dots := make([]float64, anchorBlock*p.n)
		for blk := lo; blk < hi; blk++ {
			i0, i1 := blk*anchorBlock, min((blk+1)*anchorBlock, p.n)
			vec.Gemm(dots, p.z[i0*out:i1*out], p.zt, i1-i0, out, p.n, 1)
			for i := i0; i < i1; i++ {
				f(i, dots[(i-i0)*p.n:(i-i0+1)*p.n], &h)
			}
		}
	})
}

func contains(s []int32, x int32) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// evalResult is one task's unweighted loss parts under the active set.
type evalResult struct {
	pull, hinge float64 // Σ target d², Σ hinge
	active      int     // violated triplets
}

// eval computes the pull and hinge sums under V (out × in) over the active
// set, and, when grad is non-nil, adds scale·∂/∂V of
// (1−μ)·pull + μ·hinge to grad (out × in).
func (p *problem) eval(v []float64, out int, scale float64, grad []float64) evalResult {
	p.transform(v, out)
	mu := p.mu
	vec.ParallelFor(p.n, p.workers, func(lo, hi int) {
		dt := make([]float64, 0, 16)
		for i := lo; i < hi; i++ {
			t := p.targets[i]
			p.pull[i], p.hinge[i], p.active[i] = 0, 0, 0
			if len(t) == 0 {
				continue
			}
			zi := p.z[i*out : (i+1)*out]
			dt = dt[:0]
			tw := p.tw[i]
			for a, j := range t {
				d := vec.SqDist(zi, p.z[int(j)*out:(int(j)+1)*out])
				dt = append(dt, d)
				p.pull[i] += d
				tw[a] = 1 - mu
			}
			cw := p.cw[i]
			for b, l := range p.cands[i] {
				dl := vec.SqDist(zi, p.z[int(l)*out:(int(l)+1)*out])
				cw[b] = 0
				for a, d := range dt {
					if h := p.margin + d - dl; h > 0 {
						p.hinge[i] += h
						p.active[i]++
						tw[a] += mu
						cw[b] -= mu
					}
				}
			}
		}
	})
	var r evalResult
	for i := range p.n {
		r.pull += p.pull[i]
		r.hinge += p.hinge[i]
		r.active += p.active[i]
	}
	if grad == nil {
		return r
	}
	// Σ_pairs w (z_i − z_j)(x_i − x_j)ᵀ = Σ_i z_i y_iᵀ with
	// y_i = deg_i x_i − Σ_{j~i} w_ij x_j (a weighted graph Laplacian times X),
	// gathered per face over its own pairs and the pairs pointing at it.
	in := p.in
	vec.ParallelFor(p.n, p.workers, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			yi := p.y[i*in : (i+1)*in]
			clear(yi)
			deg := 0.0
			add := func(j int, w float64) {
				if w != 0 {
					deg += w
					vec.Axpy(-w, p.x[j*in:(j+1)*in], yi)
				}
			}
			for a, j := range p.targets[i] {
				add(int(j), p.tw[i][a])
			}
			for b, l := range p.cands[i] {
				add(int(l), p.cw[i][b])
			}
			for e := p.inOff[i]; e < p.inOff[i+1]; e++ {
				from, slot := int(p.inFrom[e]), int(p.inSlot[e])
				if nt := len(p.targets[from]); slot < nt {
					add(from, p.tw[from][slot])
				} else {
					add(from, p.cw[from][slot-nt])
				}
			}
			if deg != 0 {
				vec.Axpy(deg, p.x[i*in:(i+1)*in], yi)
			}
		}
	})
	p.zt = transpose(p.zt, p.z, p.n, out)
	if len(p.g) != out*in {
		p.g = make([]float64, out*in)
	}
	vec.Gemm(p.g, p.zt, p.y, out, p.n, in, p.workers)
	vec.Axpy(2*scale, p.g, grad)
	return r
}

// exact computes the pull and hinge sums under V with every impostor (no
// active set): O(n²·out).
func (p *problem) exact(v []float64, out int) evalResult {
	p.allDots(v, out, func(i int, row []float64, _ *nearest) {
		t := p.targets[i]
		p.pull[i], p.hinge[i], p.active[i] = 0, 0, 0
		if len(t) == 0 {
			return
		}
		zi := p.z[i*out : (i+1)*out]
		var dt [MaxK]float64 // K ≤ MaxK is checked by NewLMNN
		maxT := 0.0
		for a, j := range t {
			d := vec.SqDist(zi, p.z[int(j)*out:(int(j)+1)*out])
			dt[a] = d
			p.pull[i] += d
			maxT = max(maxT, d)
		}
		li := p.labels[i]
		try := func(l int) {
			// Screen with the Gram-form distance (generously, for its
			// rounding), then count with the direct one.
			if p.nz[i]+p.nz[l]-2*row[l] >= (maxT+p.margin)*(1+1e-9)+1e-9*(p.nz[i]+p.nz[l]) {
				return
			}
			dl := vec.SqDist(zi, p.z[l*out:(l+1)*out])
			for _, d := range dt[:len(t)] {
				if h := p.margin + d - dl; h > 0 {
					p.hinge[i] += h
					p.active[i]++
				}
			}
		}
		for l := range p.n {
			if p.labels[l] >= 0 && p.labels[l] != li {
				try(l)
			}
		}
		for _, f := range p.rejected[li] {
			if p.labels[f] < 0 {
				try(int(f))
			}
		}
	})
	var r evalResult
	for i := range p.n {
		r.pull += p.pull[i]
		r.hinge += p.hinge[i]
		r.active += p.active[i]
	}
	return r
}

// nearest keeps the k smallest (distance, index) pairs offered, as a
// max-heap; ties are broken towards the smaller index.
type nearest struct {
	k   int
	d   []float64
	idx []int32
}

func (h *nearest) reset(k int) { h.k, h.d, h.idx = k, h.d[:0], h.idx[:0] }

func (h *nearest) less(a, b int) bool { // a is "greater" (worse) than b
	return h.d[a] > h.d[b] || (h.d[a] == h.d[b] && h.idx[a] > h.idx[b])
}

func (h *nearest) offer(d float64, i int32) {
	if h.k <= 0 {
		return
	}
	if len(h.d) < h.k {
		h.d, h.idx = append(h.d, d), append(h.idx, i)
		for c := len(h.d) - 1; c > 0; {
			par := (c - 1) / 2
			if !h.less(c, par) {
				break
			}
			h.swap(c, par)
			c = par
		}
		return
	}
	if d > h.d[0] || (d == h.d[0] && i > h.idx[0]) {
		return
	}
	h.d[0], h.idx[0] = d, i
	for c := 0; ; {
		l, r, m := 2*c+1, 2*c+2, c
		if l < len(h.d) && h.less(l, m) {
			m = l
		}
		if r < len(h.d) && h.less(r, m) {
			m = r
		}
		if m == c {
			break
		}
		h.swap(c, m)
		c = m
	}
}

func (h *nearest) swap(a, b int) {
	h.d[a], h.d[b] = h.d[b], h.d[a]
	h.idx[a], h.idx[b] = h.idx[b], h.idx[a]
}

// sorted returns the kept indices, nearest first, in a new slice.
func (h *nearest) sorted() []int32 {
	o := make([]int, len(h.d))
	for i := range o {
		o[i] = i
	}
	sort.Slice(o, func(a, b int) bool { return h.less(o[b], o[a]) })
	r := make([]int32, len(o))
	for i, j := range o {
		r[i] = h.idx[j]
	}
	return r
}
