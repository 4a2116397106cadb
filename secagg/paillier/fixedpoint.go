package paillier

import (
	"errors"
	"fmt"
	"math"
	"math/big"
)

// MaxFracBits bounds the fixed-point scale 2^fracBits.
const MaxFracBits = 128

// FixedPoint encodes floats as integers modulo n with an explicit scale
// 2^FracBits: x is encoded as round(x·2^FracBits), negatives as n − |v|
// (the upper part of the range). Values whose magnitude exceeds n/3 are
// refused on encoding, and a decrypted integer between n/3 and n − n/3 is
// reported as ErrOverflow instead of being decoded as garbage.
type FixedPoint struct {
	pk       *PublicKey
	fracBits uint
	scale    float64
}

// NewFixedPoint returns an encoding with scale 2^fracBits for the key.
func NewFixedPoint(pk *PublicKey, fracBits int) (*FixedPoint, error) {
	if pk == nil {
		return nil, errors.New("paillier: nil public key")
	}
	if fracBits < 0 || fracBits > MaxFracBits {
		return nil, fmt.Errorf("paillier: fixed-point fraction bits %d outside [0, %d]", fracBits, MaxFracBits)
	}
	return &FixedPoint{pk: pk, fracBits: uint(fracBits), scale: math.Ldexp(1, fracBits)}, nil
}

// FracBits returns the number of fraction bits of the scale.
func (f *FixedPoint) FracBits() int { return int(f.fracBits) }

// Scale returns the scale 2^FracBits.
func (f *FixedPoint) Scale() float64 { return f.scale }

// EncodeSigned returns round(x·scale) as a signed integer.
func (f *FixedPoint) EncodeSigned(x float64) (*big.Int, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil, fmt.Errorf("paillier: cannot encode non-finite value %v", x)
	}
	y := math.Round(math.Ldexp(x, int(f.fracBits)))
	if math.IsInf(y, 0) {
		return nil, fmt.Errorf("%w: %v scaled by 2^%d is not finite", ErrOverflow, x, f.fracBits)
	}
	if math.Abs(y) < 1<<62 {
		return big.NewInt(int64(y)), nil
	}
	v, _ := new(big.Float).SetFloat64(y).Int(nil)
	return v, nil
}

// Encode returns the plaintext in [0, n) for x.
func (f *FixedPoint) Encode(x float64) (*big.Int, error) {
	v, err := f.EncodeSigned(x)
	if err != nil {
		return nil, err
	}
	m, err := f.pk.fromSigned(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %v: %w", x, err)
	}
	return m, nil
}

// Encode32 encodes a float32.
func (f *FixedPoint) Encode32(x float32) (*big.Int, error) { return f.Encode(float64(x)) }

// Decode maps a plaintext in [0, n) back to a float64, reporting overflow.
func (f *FixedPoint) Decode(m *big.Int) (float64, error) {
	if m == nil || m.Sign() < 0 || m.Cmp(f.pk.n) >= 0 {
		return 0, errors.New("paillier: plaintext outside [0, n)")
	}
	v, err := f.pk.toSigned(m)
	if err != nil {
		return 0, err
	}
	if v.IsInt64() {
		return math.Ldexp(float64(v.Int64()), -int(f.fracBits)), nil
	}
	x, _ := new(big.Float).SetMantExp(new(big.Float).SetInt(v), -int(f.fracBits)).Float64()
	if math.IsInf(x, 0) {
		return 0, fmt.Errorf("%w: value exceeds the float64 range", ErrOverflow)
	}
	return x, nil
}

// Decode32 decodes to float32, reporting values beyond its range as overflow.
func (f *FixedPoint) Decode32(m *big.Int) (float32, error) {
	x, err := f.Decode(m)
	if err != nil {
		return 0, err
	}
	if math.Abs(x) > math.MaxFloat32 {
		return 0, fmt.Errorf("%w: value exceeds the float32 range", ErrOverflow)
	}
	return float32(x), nil
}
