package tagging

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/face"
)

// Encodings of the vectors stored (sealed) in the library. Each starts with a
// version byte, so a later layout can be told apart; the decoders refuse
// anything malformed and never panic (they are fuzzed: they read bytes that
// come out of a file).

const (
	descriptorVersion = 1
	landmarksVersion  = 1
	// MaxDescriptorDim bounds a stored descriptor's length.
	MaxDescriptorDim = 4096
)

// EncodeDescriptor lays a descriptor out as a version byte followed by its
// float32 components, little-endian.
func EncodeDescriptor(d []float32) []byte {
	b := make([]byte, 1, 1+4*len(d))
	b[0] = descriptorVersion
	for _, v := range d {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// DecodeDescriptor reverses EncodeDescriptor. It refuses an unknown version,
// a length that is not whole float32s, an empty or over-long descriptor, and
// non-finite components.
func DecodeDescriptor(b []byte) ([]float32, error) {
	if len(b) == 0 {
		return nil, errors.New("empty descriptor")
	}
	if b[0] != descriptorVersion {
		return nil, fmt.Errorf("descriptor encoding version %d is not supported", b[0])
	}
	b = b[1:]
	if len(b) == 0 || len(b)%4 != 0 || len(b)/4 > MaxDescriptorDim {
		return nil, fmt.Errorf("descriptor of %d bytes is malformed", len(b))
	}
	d := make([]float32, len(b)/4)
	for i := range d {
		v := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, errors.New("descriptor has a non-finite component")
		}
		d[i] = v
	}
	return d, nil
}

// EncodeLandmarks lays 68 landmarks out as a version byte followed by x, y of
// each point as float32, little-endian.
func EncodeLandmarks(lm *face.Landmarks) []byte {
	b := make([]byte, 1, 1+8*len(lm))
	b[0] = landmarksVersion
	for _, p := range lm {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(p[0])))
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(p[1])))
	}
	return b
}

// DecodeLandmarks reverses EncodeLandmarks, refusing anything malformed or
// non-finite.
func DecodeLandmarks(b []byte) (face.Landmarks, error) {
	var lm face.Landmarks
	if len(b) != 1+8*len(lm) {
		return lm, fmt.Errorf("landmarks of %d bytes are malformed", len(b))
	}
	if b[0] != landmarksVersion {
		return lm, fmt.Errorf("landmarks encoding version %d is not supported", b[0])
	}
	for i := range lm {
		for j := range 2 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(b[1+8*i+4*j:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return lm, errors.New("landmarks have a non-finite coordinate")
			}
			lm[i][j] = float64(v)
		}
	}
	return lm, nil
}
