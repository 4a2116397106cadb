package metric

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/internal/vec"
)

// Metric is a linear map V (Out × In, row-major) that defines the
// Mahalanobis distance d_W(a, b) = ‖V a − V b‖₂ with W = VᵀV (Irene,
// Eq. 3). The zero value is not usable; build one with NewMetric, Identity,
// RandomRotation or a learner. A Metric is immutable after construction and
// safe for concurrent use.
type Metric struct {
	out, in int
	v       []float64
}

// MaxDim bounds each side of a Metric (and so what UnmarshalBinary will
// allocate): 4096 × 4096 float64 is 128 MiB, far above the 128-d faceprints
// Veil learns on.
const MaxDim = 4096

// NewMetric returns the map with the given Out × In row-major entries. The
// slice is copied. It fails on sizes outside [1, MaxDim], a slice of the
// wrong length, or a non-finite entry.
func NewMetric(out, in int, v []float64) (*Metric, error) {
	if out < 1 || in < 1 || out > MaxDim || in > MaxDim {
		return nil, fmt.Errorf("metric: size %d×%d outside 1…%d", out, in, MaxDim)
	}
	if len(v) != out*in {
		return nil, fmt.Errorf("metric: %d×%d map needs %d entries, got %d", out, in, out*in, len(v))
	}
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, errors.New("metric: map has a non-finite entry")
		}
	}
	return &Metric{out: out, in: in, v: append([]float64(nil), v...)}, nil
}

// Identity returns the d × d identity map (the Euclidean distance).
func Identity(d int) *Metric {
	v := make([]float64, d*d)
	for i := range d {
		v[i*d+i] = 1
	}
	return &Metric{out: d, in: d, v: v}
}

// Dims returns the output and input dimensions of V.
func (m *Metric) Dims() (out, in int) { return m.out, m.in }

// At returns V[r][c].
func (m *Metric) At(r, c int) float64 { return m.v[r*m.in+c] }

// Matrix returns a copy of V, Out × In, row-major.
func (m *Metric) Matrix() []float64 { return append([]float64(nil), m.v...) }

// Mahalanobis returns W = VᵀV, In × In, row-major.
func (m *Metric) Mahalanobis() []float64 {
	return gram(m.v, m.out, m.in)
}

// Transform returns V x, written into dst when dst has room (len ≥ Out),
// else into a new slice. It panics when len(x) ≠ In.
func (m *Metric) Transform(dst, x []float64) []float64 {
	if len(x) != m.in {
		panic(fmt.Sprintf("metric: Transform of a %d-vector by a %d×%d map", len(x), m.out, m.in))
	}
	if cap(dst) < m.out {
		dst = make([]float64, m.out)
	}
	dst = dst[:m.out]
	for r := range m.out {
		dst[r] = vec.Dot(m.v[r*m.in:(r+1)*m.in], x)
	}
	return dst
}

// SquaredDistance returns d_W²(a, b) = ‖V(a − b)‖². It panics when a or b
// is not an In-vector.
func (m *Metric) SquaredDistance(a, b []float64) float64 {
	if len(a) != m.in || len(b) != m.in {
		panic(fmt.Sprintf("metric: distance between %d- and %d-vectors under a %d×%d map", len(a), len(b), m.out, m.in))
	}
	diff := make([]float64, m.in)
	for i := range diff {
		diff[i] = a[i] - b[i]
	}
	var s float64
	for r := range m.out {
		t := vec.Dot(m.v[r*m.in:(r+1)*m.in], diff)
		s += t * t
	}
	return s
}

// Distance returns d_W(a, b) = ‖V a − V b‖₂ (Irene, Eq. 3).
func (m *Metric) Distance(a, b []float64) float64 { return math.Sqrt(m.SquaredDistance(a, b)) }

// Stack returns the map [m; o] (m's rows above o's), whose Mahalanobis matrix
// is W_m + W_o. This is how a task's MT-LMNN distance d_{W₀,W_k} (Eq. 6) is
// a single Metric: Stack(shared, private).
func (m *Metric) Stack(o *Metric) (*Metric, error) {
	if m.in != o.in {
		return nil, fmt.Errorf("metric: cannot stack maps of input sizes %d and %d", m.in, o.in)
	}
	if m.out+o.out > MaxDim {
		return nil, fmt.Errorf("metric: stacked map would have %d rows, more than %d", m.out+o.out, MaxDim)
	}
	v := make([]float64, 0, (m.out+o.out)*m.in)
	v = append(v, m.v...)
	v = append(v, o.v...)
	return &Metric{out: m.out + o.out, in: m.in, v: v}, nil
}

// Serialization: "VMTR", version byte, Out and In as uint32 little-endian,
// then Out·In float64 (IEEE 754 bits, little-endian), row-major.
const (
	magic         = "VMTR"
	formatVersion = 1
	headerLen     = len(magic) + 1 + 4 + 4
)

// MarshalBinary encodes V in Veil's versioned metric format.
func (m *Metric) MarshalBinary() ([]byte, error) {
	b := make([]byte, headerLen, headerLen+8*len(m.v))
	copy(b, magic)
	b[4] = formatVersion
	binary.LittleEndian.PutUint32(b[5:], uint32(m.out))
	binary.LittleEndian.PutUint32(b[9:], uint32(m.in))
	for _, x := range m.v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. It checks the header,
// the sizes (against MaxDim and the data's length, before allocating) and
// that every entry is finite; on error m is unchanged.
func (m *Metric) UnmarshalBinary(data []byte) error {
	if len(data) < headerLen {
		return fmt.Errorf("metric: encoded map is %d bytes, shorter than its %d-byte header", len(data), headerLen)
	}
	if string(data[:4]) != magic {
		return errors.New("metric: data is not an encoded metric (bad magic)")
	}
	if data[4] != formatVersion {
		return fmt.Errorf("metric: encoded with format version %d, this build reads version %d", data[4], formatVersion)
	}
	out := binary.LittleEndian.Uint32(data[5:])
	in := binary.LittleEndian.Uint32(data[9:])
	if out < 1 || in < 1 || out > MaxDim || in > MaxDim {
		return fmt.Errorf("metric: encoded size %d×%d outside 1…%d", out, in, MaxDim)
	}
	want := uint64(headerLen) + 8*uint64(out)*uint64(in)
	if uint64(len(data)) != want {
		return fmt.Errorf("metric: encoded %d×%d map needs %d bytes, got %d", out, in, want, len(data))
	}
	v := make([]float64, int(out)*int(in))
	for i := range v {
		x := math.Float64frombits(binary.LittleEndian.Uint64(data[headerLen+8*i:]))
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return errors.New("metric: encoded map has a non-finite entry")
		}
		v[i] = x
	}
	m.out, m.in, m.v = int(out), int(in), v
	return nil
}
