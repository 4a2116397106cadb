package train_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// synthFaces are face-like vectors: each person has a centre in a
// 16-dimensional identity subspace, and each image adds small identity
// noise plus large nuisance in 16 other dimensions (pose, light), all
// mixed by a fixed random rotation, so that raw cosine similarity tells
// people apart poorly and a learned projection well.
type synthFaces struct {
	x   []float32
	l   []int32 // the image's index: labels of the distillation loss
	ids []int
	n   int
	// teacher is each image's identity part before mixing (what a good
	// pretrained descriptor would give): the distillation target.
	teacher [][]float32
}

func makeFaces(r *rand.Rand, mix [][]float64, sizes []int) synthFaces {
	const id, nuis = 16, 16
	f := synthFaces{n: len(sizes)}
	for p, m := range sizes {
		c := make([]float64, id)
		for j := range c {
			c[j] = r.NormFloat64()
		}
		for range m {
			z := make([]float64, 0, id+nuis)
			t := make([]float32, id)
			for j := 0; j < id; j++ {
				z = append(z, c[j]+0.5*r.NormFloat64())
				t[j] = float32(z[j])
			}
			f.teacher = append(f.teacher, t)
			for j := 0; j < nuis; j++ {
				z = append(z, 2*r.NormFloat64())
			}
			for _, row := range mix {
				var v float64
				for j, w := range row {
					v += w * z[j]
				}
				f.x = append(f.x, float32(v))
			}
			f.l = append(f.l, int32(len(f.l)))
			f.ids = append(f.ids, p)
		}
	}
	return f
}

// verification scores same/different pairs of the test people by the
// cosine of their vectors and returns the accuracy on half of the pairs
// at the threshold best on the other half.
func verification(b *testing.B, vec func(i int) []float32, f synthFaces, r *rand.Rand) float64 {
	b.Helper()
	byPerson := map[int][]int{}
	for i, p := range f.ids {
		byPerson[p] = append(byPerson[p], i)
	}
	cos := func(a, c []float32) float64 {
		var d, na, nc float64
		for j := range a {
			d += float64(a[j]) * float64(c[j])
			na += float64(a[j]) * float64(a[j])
			nc += float64(c[j]) * float64(c[j])
		}
		return d / math.Sqrt(na*nc)
	}
	var sim []float64
	var same []bool
	for p := 0; p < f.n; p++ {
		im := byPerson[p]
		sim = append(sim, cos(vec(im[0]), vec(im[1])), cos(vec(im[2]), vec(im[3])))
		same = append(same, true, true)
		for range 2 {
			q := (p + 1 + r.IntN(f.n-1)) % f.n
			sim = append(sim, cos(vec(im[r.IntN(4)]), vec(byPerson[q][r.IntN(4)])))
			same = append(same, false)
		}
	}
	// Interleaved halves: tune on even pairs, test on odd ones.
	var ts, es []float64
	var tsame, esame []bool
	for i := range sim {
		if i%2 == 0 {
			ts, tsame = append(ts, sim[i]), append(tsame, same[i])
		} else {
			es, esame = append(es, sim[i]), append(esame, same[i])
		}
	}
	acc, _, err := train.VerifyAccuracy(ts, tsame, es, esame)
	if err != nil {
		b.Fatal(err)
	}
	return acc
}

// BenchmarkIdentityVsExampleDP is the small-scale check of what
// identity-level privacy costs: an embedding head trained on synthetic
// faces of 500 people (2 to 12 images each, 3,500 images) to reproduce a
// teacher's descriptor of each image (distillation, the loss the README's
// DP head uses: no per-class weights), without DP and with DP-SGD per
// example and per identity, both at ε = 8, δ = 1e-5 over the same 10
// epochs and the same expected batch of 128 images (σ calibrated by
// NoiseForTarget for each; at most 8 images per person and step), scored
// by verification accuracy on 1,600 pairs of 400 other people (half tune
// the threshold, half are scored). Run with -benchtime 1x; the accuracies
// are reported as metrics.
func BenchmarkIdentityVsExampleDP(b *testing.B) {
	const people, testPeople, epochs, batch, capPer, eps = 500, 400, 10, 128, 8, 8.0
	r := rand.New(rand.NewPCG(21, 22))
	mix := make([][]float64, 32)
	for i := range mix {
		mix[i] = make([]float64, 32)
		for j := range mix[i] {
			mix[i][j] = r.NormFloat64() / math.Sqrt(32)
		}
	}
	sizes := make([]int, people)
	capped := 0
	for p := range sizes {
		sizes[p] = 2 + p%11
		capped += min(sizes[p], capPer)
	}
	trainSet := makeFaces(r, mix, sizes)
	testSizes := make([]int, testPeople)
	for p := range testSizes {
		testSizes[p] = 4
	}
	testSet := makeFaces(r, mix, testSizes)
	images := len(trainSet.l)
	mc := arch.Config{Kind: "head", In: 32, Hidden: 64, Embedding: 16}
	lc := loss.Config{Kind: "distill", Classes: images, Targets: trainSet.teacher}.Defaults()
	run := func(unit train.Unit, clip float64) (acc, sigma float64) {
		m, err := arch.New(mc)
		if err != nil {
			b.Fatal(err)
		}
		h, err := loss.New(m.Params(), lc, 16)
		if err != nil {
			b.Fatal(err)
		}
		m.Params().Init(5)
		o := train.Options{Optimizer: "adam", LearningRate: 0.01, MicroBatch: 32}
		data := &memData{x: trainSet.x, l: trainSet.l, per: 32}
		var d train.Data = data
		if unit != "" {
			dpo := train.DPOptions{Unit: unit, Clip: clip, Delta: 1e-5, SamplingRate: float64(batch) / float64(images), DatasetSize: images}
			if unit == train.UnitIdentity {
				dpo.SamplingRate, dpo.DatasetSize, dpo.MaxPerIdentity = float64(batch)/float64(capped), people, capPer
				d = people2(data, trainSet)
			}
			steps := epochs * int(math.Ceil(1/dpo.SamplingRate))
			if dpo.NoiseMultiplier, err = train.NoiseForTarget(dpo, train.NoisedDimension(m.Params(), nil), steps, eps); err != nil {
				b.Fatal(err)
			}
			o.DP = &dpo
			sigma = dpo.NoiseMultiplier
		}
		tr, err := train.New(m, h, o)
		if err != nil {
			b.Fatal(err)
		}
		for ep := 0; ep < epochs; ep++ {
			if _, err := tr.Epoch(d, train.EpochOptions{Epoch: ep, Batch: batch, Seed: 1}); err != nil {
				b.Fatal(err)
			}
		}
		if unit != "" {
			if p := tr.Privacy(); p.Epsilon > eps || p.Unit != unit {
				b.Fatalf("%s: privacy %+v", unit, p)
			}
		}
		emb, err := tr.Embed(testSet.x, len(testSet.l))
		if err != nil {
			b.Fatal(err)
		}
		return verification(b, func(i int) []float32 { return emb[i] }, testSet, rand.New(rand.NewPCG(7, 7))), sigma
	}
	for i := 0; i < b.N; i++ {
		raw := verification(b, func(i int) []float32 { return testSet.x[i*32 : (i+1)*32] }, testSet, rand.New(rand.NewPCG(7, 7)))
		plain, _ := run("", 0)
		ex, sEx := run(train.UnitExample, 1)
		id, sID := run(train.UnitIdentity, 1)
		// A person's gradient sums up to 8 images' gradients: a larger
		// clip keeps more of it.
		id4, _ := run(train.UnitIdentity, 4)
		b.ReportMetric(raw, "acc_raw")
		b.ReportMetric(plain, "acc_nodp")
		b.ReportMetric(ex, "acc_dp_example")
		b.ReportMetric(id, "acc_dp_identity")
		b.ReportMetric(id4, "acc_dp_identity_clip4")
		b.ReportMetric(sEx, "sigma_example")
		b.ReportMetric(sID, "sigma_identity")
	}
}

// people2 gives memData the synthetic faces' identities.
func people2(d *memData, f synthFaces) people { return people{memData: d, ids: f.ids, n: f.n} }
