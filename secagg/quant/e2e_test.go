package quant_test

import (
	"crypto/ed25519"
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/secagg/masking"
	"github.com/veil-privacy/veil/secagg/quant"
)

// TestQuantisedMaskedRound runs the whole pipeline: n = 8 clients encode
// (clip, rotate, round, noise), mask (k = 7, t = 5), two drop out after
// sending their masked inputs, one after sharing keys; the coordinator
// unmasks and decodes. The decoded sum must be the sum of the survivors'
// clipped inputs up to the noise (checked against its expected size).
func TestQuantisedMaskedRound(t *testing.T) {
	const n, thr, d = 8, 5, 3000
	cfg := quant.Config{Dim: d, ClipNorm: 1, Gamma: 1e-3, Beta: math.Exp(-0.5), Bits: 32, Noise: 10, Clients: n, WrapProb: 1e-9}
	var round [32]byte
	round[0] = 42
	q, err := quant.New(cfg, quant.RotationSeed(round))
	if err != nil {
		t.Fatal(err)
	}
	var s [32]byte
	r := rand.NewChaCha8(s)
	p := masking.Params{RoundID: round, Degree: 7, Threshold: thr, Length: q.Padded()}
	io.ReadFull(r, p.GraphSeed[:])
	keys := masking.StaticKeys{}
	signers := map[uint32]ed25519.PrivateKey{}
	for i := range n {
		id := uint32(i + 1)
		p.Roster = append(p.Roster, id)
		_, sk, _ := ed25519.GenerateKey(r)
		signers[id], keys[id] = sk, sk.Public()
	}
	srv, err := masking.NewServer(p, keys)
	if err != nil {
		t.Fatal(err)
	}
	clients := map[uint32]*masking.Client{}
	for _, id := range p.Roster {
		c, ad, err := masking.NewClient(masking.ClientConfig{ID: id, Signer: signers[id], Keys: keys, MinThreshold: thr}, p, r)
		if err != nil {
			t.Fatal(err)
		}
		clients[id] = c
		if err := srv.ReceiveAdvert(ad); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range p.Roster {
		ads, _ := srv.AdvertsFor(id)
		sh, err := clients[id].ShareKeys(ads, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ReceiveShares(id, sh); err != nil {
			t.Fatal(err)
		}
	}
	pr := rand.New(rand.NewPCG(1, 2))
	want := make([]float64, d)
	survivors := 0
	for _, id := range p.Roster {
		if id == 8 { // drops after sharing keys
			continue
		}
		sh, _ := srv.SharesFor(id)
		x := make([]float32, d)
		var n2 float64
		for i := range x {
			x[i] = float32(pr.NormFloat64())
			n2 += float64(x[i]) * float64(x[i])
		}
		enc, err := q.Encode(x, r)
		if err != nil {
			t.Fatal(err)
		}
		m, err := clients[id].MaskInput(sh, enc)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ReceiveMasked(m); err != nil {
			t.Fatal(err)
		}
		for i, v := range x {
			want[i] += float64(v) / math.Sqrt(n2) // clipped to norm 1
		}
		survivors++
	}
	req, err := srv.UnmaskRequest()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range req.Survivors {
		if id == 6 || id == 7 { // drop after sending their inputs
			continue
		}
		resp, err := clients[id].Unmask(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ReceiveUnmask(resp); err != nil {
			t.Fatal(err)
		}
	}
	res, err := srv.Sum()
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.Decode(res.Sum)
	if err != nil {
		t.Fatal(err)
	}
	var e2 float64
	for i := range got {
		e2 += (got[i] - want[i]) * (got[i] - want[i])
	}
	// Expected squared error: γ²·d·survivors·(σ² + ≈1/6 rounding).
	exp := cfg.Gamma * cfg.Gamma * d * float64(survivors) * (100 + 1.0/6)
	if math.Abs(e2/exp-1) > 0.15 {
		t.Fatalf("squared error %.4g, expected about %.4g", e2, exp)
	}
	// The charge for this round, if at least t = 5 honest clients' noise
	// is in every unmasked sum.
	mech, err := q.Mechanism(thr)
	if err != nil {
		t.Fatal(err)
	}
	eps, _, err := mech.Epsilon(nil, 1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("7 survivors of 8, squared error %.4g (expected %.4g); ε = %.3g at δ = 1e-5 per round, unit: one client's update", e2, exp, eps)
}
