package secaggbench

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/secagg/quant"
)

func smallQuant() quant.Config {
	return quant.Config{ClipNorm: 1, Gamma: 1e-3, Beta: math.Exp(-0.5), Bits: 32, Noise: 5, WrapProb: 1e-9}
}

// TestRunMaskingSmallRound plays a small round with a dropout through
// the bench: the sum checks (RunMasking fails otherwise), and the report
// is consistent: padded length, bytes above the plaintext's, the degree
// and colluders the parameters give.
func TestRunMaskingSmallRound(t *testing.T) {
	r, err := RunMasking(MaskingParams{Clients: 6, Degree: 4, Threshold: 3, Length: 1000, Dropped: 1, Sample: 2, Quant: smallQuant(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Padded != 1024 || r.PlaintextBytes != 4000 || r.Degree != 4 || r.ToleratedColluders != 0 { // 2t − k − 2 = 0
		t.Errorf("report %+v", r)
	}
	if r.ClientBytes <= 4*r.Padded || r.BytesRatio <= 1 || r.ServerBytes < 5*r.ClientBytes {
		t.Errorf("bytes: client %d (%.2f× plaintext), server %d", r.ClientBytes, r.BytesRatio, r.ServerBytes)
	}
	if r.ClientCPUS < r.ClientEncodeCPUS || r.ClientCPUS < r.ClientProtocolCPUS {
		t.Errorf("client CPU %v is not the sum of its parts %v + %v", r.ClientCPUS, r.ClientEncodeCPUS, r.ClientProtocolCPUS)
	}
}

// TestRunMaskingRefusesInconsistentParams: more dropouts than the
// threshold allows, or no client timed, are refused.
func TestRunMaskingRefusesInconsistentParams(t *testing.T) {
	for _, p := range []MaskingParams{
		{Clients: 6, Degree: 4, Threshold: 3, Length: 10, Dropped: 4, Sample: 1, Quant: smallQuant()},
		{Clients: 6, Degree: 4, Threshold: 3, Length: 10, Sample: 0, Quant: smallQuant()},
	} {
		if _, err := RunMasking(p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
