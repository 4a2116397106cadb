package secaggbench

import (
	"testing"

	"github.com/veil-privacy/veil/secagg/paillier"
)

var testKey = paillier.KeyOptions{Bits: 512, AllowInsecureTestKeySize: true}

// TestRunPackedDPHESmall: a small packed round runs end to end (the
// key generator's checks and the lane bounds included), and the report is
// consistent: lanes fill the key, the aggregate covers every block, the
// support in the clear and the packed round send less than unpacked.
func TestRunPackedDPHESmall(t *testing.T) {
	r, err := RunPackedDPHE(PackedParams{Users: 3, Coordinates: 500, BlockFraction: 0.2, Bound: 8, MaxUsers: 8, FracBits: 16,
		SelectEpsilon: 1, UnpackedSample: 20, Kind: paillier.RandomnessShortExponent, Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if r.Lanes*r.LaneBits > r.Bits-3 || r.Lanes*(r.LaneBits+1) <= r.Bits-3-r.LaneBits {
		t.Errorf("%d lanes of %d bits on a %d-bit key: not the most that fit", r.Lanes, r.LaneBits, r.Bits)
	}
	if r.Blocks != (500+r.Lanes-1)/r.Lanes || r.AggregateBytes < r.Blocks*64 {
		t.Errorf("blocks %d, aggregate %d bytes", r.Blocks, r.AggregateBytes)
	}
	if r.UnionBlocks < 1 || r.UnionBlocks > 3*r.SelectBlocks {
		t.Errorf("union of %d blocks, at most %d selected each", r.UnionBlocks, r.SelectBlocks)
	}
	if !(r.UserBytes < r.UnpackedUserBytes && r.ClearAggregateBytes < r.AggregateBytes && r.ContributionEpsilon > 0) {
		t.Errorf("report %+v", r)
	}
}

// TestRunDPHESmall: the library behind veil bench dphe checks its sum.
func TestRunDPHESmall(t *testing.T) {
	r, err := RunDPHE(DPHEParams{Dim: 8, Classes: 4, Users: 3, DenseSample: 30, FracBits: 24, Sparsity: 0.5, Kind: paillier.RandomnessShortExponent, Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if r.Weights != 32 || r.NonZeros != 16 || r.UserMessages != 1 || r.ContributionEpsilon <= 0 {
		t.Errorf("report %+v", r)
	}
}

// TestRunPaillierSmall: the library behind veil bench paillier checks its
// decryptions and reports every rate.
func TestRunPaillierSmall(t *testing.T) {
	r, err := RunPaillier(PaillierParams{Key: testKey, Samples: 4, Kind: paillier.RandomnessShortExponent})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"encrypt": r.EncryptPerS, "full": r.EncryptFullPerS, "precomputed": r.EncryptPrecomputedPerS,
		"decrypt": r.DecryptPerS, "add": r.AddPerS, "scalar": r.ScalarMulPerS} {
		if !(v > 0) {
			t.Errorf("%s rate %v", name, v)
		}
	}
	if _, err := RunPaillier(PaillierParams{Key: testKey, Samples: 0}); err == nil {
		t.Error("zero samples accepted")
	}
}
