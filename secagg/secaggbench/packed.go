package secaggbench

import (
	"fmt"
	"math"
	mrand "math/rand/v2"
	"time"

	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// PackedParams configure a measurement of DPHE on DP-selected, packed
// sparse updates (dphe.Selection, dphe.Packing).
type PackedParams struct {
	// Users contribute updates of Coordinates values.
	Users, Coordinates int
	// BlockFraction of the blocks is the most each user selects.
	BlockFraction float64
	// Bound clamps values; MaxUsers is the packing's headroom.
	Bound    float64
	MaxUsers int
	FracBits int
	// SelectEpsilon is the selection's ε (Irene's parameter).
	SelectEpsilon float64
	// UnpackedSample encryptions time one unpacked value, to extrapolate
	// the unpacked figures.
	UnpackedSample int
	Kind           paillier.RandomnessKind
	Key            paillier.KeyOptions
	Reporter
}

// PackedReport is the cost of one packed round, per user and per round,
// with the same round unpacked and with the support in the clear.
type PackedReport struct {
	Users        int     `json:"users"`
	Coordinates  int     `json:"coordinates"`
	Bits         int     `json:"bits"`
	FracBits     int     `json:"frac_bits"`
	Bound        float64 `json:"bound"`
	MaxUsers     int     `json:"max_users"`
	Lanes        int     `json:"lanes"`
	LaneBits     int     `json:"lane_bits"`
	Blocks       int     `json:"blocks"`
	SelectBlocks int     `json:"selected_blocks_max"`
	UnionBlocks  int     `json:"union_blocks"`
	// One contribution's ε (selection and values) at δ = 1e-5, per user's
	// whole update.
	SelectEpsilon       float64 `json:"select_epsilon"`
	ContributionEpsilon float64 `json:"contribution_epsilon"`
	// PrivacyUnit is what the ε protects: a user's whole update.
	PrivacyUnit string `json:"privacy_unit"`
	// Measured, per user (means) and per round.
	UserEncryptCPUS float64 `json:"user_encrypt_cpu_s"`
	UserEncryptS    float64 `json:"user_encrypt_s"`
	UserBytes       int     `json:"user_bytes"`
	AggregateCPUS   float64 `json:"aggregate_cpu_s"`
	AggregateBytes  int     `json:"aggregate_bytes"`
	DecryptCPUS     float64 `json:"decrypt_cpu_s"`
	DecryptS        float64 `json:"decrypt_s"`
	// The same selected coordinates unpacked (one value per ciphertext),
	// extrapolated from measured per-operation costs.
	UnpackedUserEncryptCPUS float64 `json:"unpacked_user_encrypt_cpu_s"`
	UnpackedUserBytes       int     `json:"unpacked_user_bytes"`
	UnpackedAggregateBytes  int     `json:"unpacked_aggregate_bytes"`
	UnpackedDecryptCPUS     float64 `json:"unpacked_decrypt_cpu_s"`
	// The support in the clear (each user sends its blocks' indices and
	// ciphertexts, the sum is over the union only): derived from the
	// measured per-operation costs.
	ClearUserBytes      int     `json:"clear_support_user_bytes"`
	ClearAggregateBytes int     `json:"clear_support_aggregate_bytes"`
	ClearDecryptCPUS    float64 `json:"clear_support_decrypt_cpu_s"`
	// Plaintext float32 update, for scale.
	PlaintextBytes int    `json:"plaintext_bytes"`
	Note           string `json:"note"`
}

// RunPackedDPHE measures one packed round with DP selection.
func RunPackedDPHE(p PackedParams) (*PackedReport, error) {
	if p.Users < dphe.MinUsers || p.Users > p.MaxUsers || !(p.BlockFraction > 0 && p.BlockFraction <= 1) || p.UnpackedSample < 1 {
		return nil, fmt.Errorf("secaggbench: %d users (3 to max users %d), block fraction %v (in (0, 1]), unpacked sample %d", p.Users, p.MaxUsers, p.BlockFraction, p.UnpackedSample)
	}
	sk, err := paillier.GenerateKey(p.Key)
	if err != nil {
		return nil, err
	}
	pack, err := dphe.NewPacking(sk.Public(), p.FracBits, p.Coordinates, p.Bound, p.MaxUsers)
	if err != nil {
		return nil, err
	}
	w, _ := pack.LaneBits(p.FracBits)
	count := max(1, int(math.Ceil(p.BlockFraction*float64(pack.Blocks()))))
	r := &PackedReport{Users: p.Users, Coordinates: p.Coordinates, Bits: sk.Public().Bits(), FracBits: p.FracBits, Bound: p.Bound, MaxUsers: p.MaxUsers,
		Lanes: pack.Lanes, LaneBits: w, Blocks: pack.Blocks(), SelectBlocks: count, SelectEpsilon: p.SelectEpsilon, PlaintextBytes: 4 * p.Coordinates,
		PrivacyUnit: PrivacyUnit,
		Note:        "measured in full: the users' selection, noise and encryption (padding and checksum included), the aggregator's multiplication and the key generator's checks and decryption; unpacked_* and clear_support_* are derived from the measured per-ciphertext costs (unpacked_sample encryptions of single values, and this round's decryptions)"}
	kg, err := dphe.NewKeyGenerator(dphe.KeyGeneratorOptions{Key: sk, FracBits: p.FracBits})
	if err != nil {
		return nil, err
	}
	setup, err := kg.NewRound(dphe.RoundParams{Round: 1, Dim: pack.Blocks(), Capacity: count, Users: userIDs(p.Users), Packing: pack})
	if err != nil {
		return nil, err
	}
	agg, err := packedUsers(p, r, setup, count)
	if err != nil {
		return nil, err
	}
	if err := packedDecrypt(p, r, kg, agg, pack.Lanes); err != nil {
		return nil, err
	}
	return r, packedDerived(p, r, sk)
}

// packedPrivacy is a user's release: clip 1, σ = 1, Irene's selection of
// at most count blocks at threshold 0.
func packedPrivacy(p PackedParams, count int) (*dphe.Privacy, error) {
	return benchPrivacy(&dphe.Privacy{Clip: DPHEClip, NoiseMultiplier: DPHESigma,
		Select: &dphe.Selection{Epsilon: p.SelectEpsilon, Delta: 1e-5, Threshold: 0, Count: count}})
}

// packedUsers has every user release and encrypt its update and the
// aggregator multiply the messages; it returns the aggregate's encoding.
func packedUsers(p PackedParams, r *PackedReport, setup *dphe.RoundSetup, count int) ([]byte, error) {
	rng := mrand.New(mrand.NewPCG(uint64(p.Coordinates), uint64(p.Users)))
	var all [][]byte
	n := float64(p.Users)
	for _, id := range userIDs(p.Users) {
		priv, err := packedPrivacy(p, count)
		if err != nil {
			return nil, err
		}
		if r.ContributionEpsilon == 0 {
			if r.ContributionEpsilon, err = contributionEpsilon(*priv, p.Coordinates, r.Lanes); err != nil {
				return nil, err
			}
		}
		upd := make([]float64, p.Coordinates)
		for _, i := range rng.Perm(p.Coordinates)[:min(p.Coordinates, count*r.Lanes)] {
			upd[i] = rng.NormFloat64() * 0.01
		}
		report, finish := p.progress(fmt.Sprintf("user %d: selecting up to %d of %d blocks of %d values, encrypting", id, count, r.Blocks, r.Lanes))
		t0, c0 := time.Now(), cputime.Process()
		u, err := dphe.NewUser(setup.Users[id], dphe.UserOptions{Encrypter: paillier.EncrypterOptions{Randomness: p.Kind, PoolSize: 1}, Progress: report, Privacy: priv})
		if err != nil {
			finish()
			return nil, err
		}
		msgs, err := u.Encrypt(upd)
		finish()
		if err != nil {
			return nil, err
		}
		r.UserEncryptCPUS += (cputime.Process() - c0).Seconds() / n
		r.UserEncryptS += time.Since(t0).Seconds() / n
		r.UserBytes = max(r.UserBytes, totalLen(msgs))
		all = append(all, msgs...)
	}
	return packedAggregate(p, r, setup, all)
}

func packedAggregate(p PackedParams, r *PackedReport, setup *dphe.RoundSetup, msgs [][]byte) ([]byte, error) {
	agg, err := dphe.NewAggregator(setup.Aggregator, dphe.AggregatorOptions{Encrypter: paillier.EncrypterOptions{Randomness: p.Kind, PoolSize: 1}})
	if err != nil {
		return nil, err
	}
	p.status("aggregator: multiplying %d messages over %d blocks...", len(msgs), r.Blocks)
	c0 := cputime.Process()
	for _, m := range msgs {
		if err := agg.Receive(m); err != nil {
			return nil, err
		}
	}
	sum, err := agg.Sum()
	if err != nil {
		return nil, err
	}
	b, err := sum.Encode(setup.Aggregator.PublicKey)
	r.AggregateCPUS = (cputime.Process() - c0).Seconds()
	r.AggregateBytes = len(b)
	return b, err
}

// packedDecrypt has the key generator check and decrypt the aggregate,
// and counts the blocks any user sent (the union of the supports).
func packedDecrypt(p PackedParams, r *PackedReport, kg *dphe.KeyGenerator, b []byte, lanes int) error {
	a, err := dphe.DecodeAggregate(b, kg.PublicKey())
	if err != nil {
		return err
	}
	report, finish := p.progress(fmt.Sprintf("key generator: decrypting the sum of %d blocks", r.Blocks))
	t0, c0 := time.Now(), cputime.Process()
	res, err := kg.DecryptWithProgress(a, report)
	finish()
	if err != nil {
		return err
	}
	r.DecryptCPUS, r.DecryptS = (cputime.Process() - c0).Seconds(), time.Since(t0).Seconds()
	for b := 0; b*lanes < len(res.Sum); b++ {
		for _, x := range res.Sum[b*lanes : min((b+1)*lanes, len(res.Sum))] {
			if math.Abs(x) > float64(p.Users)*p.Bound {
				return fmt.Errorf("secaggbench: packed sum value %g beyond %d users' bound", x, p.Users)
			}
			if x != 0 {
				r.UnionBlocks++
				break
			}
		}
	}
	return nil
}

// packedDerived fills the unpacked and clear-support figures from the
// measured per-ciphertext costs.
func packedDerived(p PackedParams, r *PackedReport, sk *paillier.PrivateKey) error {
	pk := sk.Public()
	enc, err := paillier.NewEncrypter(pk, paillier.EncrypterOptions{Randomness: p.Kind, PoolSize: 1})
	if err != nil {
		return err
	}
	fp, err := paillier.NewFixedPoint(pk, p.FracBits)
	if err != nil {
		return err
	}
	report, finish := p.progress(fmt.Sprintf("unpacked: %d encryptions of single values", p.UnpackedSample))
	_, cpu, err := DenseSample(enc, fp, mrand.New(mrand.NewPCG(1, 2)), p.UnpackedSample, report)
	finish()
	if err != nil {
		return err
	}
	perEnc := cpu / float64(p.UnpackedSample)
	perDec := r.DecryptCPUS / float64(r.UnionBlocks+2) // distinct ciphertexts: the union, the shared zero, the checksum
	size := pk.CiphertextSize()
	values := min(p.Coordinates, r.SelectBlocks*r.Lanes)
	r.UnpackedUserEncryptCPUS = float64(values+1) * perEnc
	r.UnpackedUserBytes = values*(4+size) + size
	r.UnpackedAggregateBytes = (p.Coordinates + 1) * size
	r.UnpackedDecryptCPUS = float64(min(p.Coordinates, r.UnionBlocks*r.Lanes)+2) * perDec
	r.ClearUserBytes = r.SelectBlocks * (4 + size)
	r.ClearAggregateBytes = r.UnionBlocks * (4 + size)
	r.ClearDecryptCPUS = float64(r.UnionBlocks) * perDec
	return nil
}
