// Package wire encodes model weights and updates for the federation
// protocol: named float32 tensors, sent as a header (names, shapes, byte
// count, SHA-256) followed by the payload in chunks, and decoded with every
// size checked before anything is allocated. Everything here treats the
// peer's bytes as untrusted.
package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/internal/digest"
	"github.com/veil-privacy/veil/internal/vec"
)

// DefaultChunk is the payload bytes per chunk message: well under gRPC's
// default 4 MiB message limit.
const DefaultChunk = 1 << 20

// Tensor is one named tensor of float32 values in row-major order.
type Tensor struct {
	Name   string
	Shape  []int
	Values []float32
}

// Weights is an ordered list of tensors: a model's parameters, or an update
// to them (a difference of weights, or a gradient).
type Weights []Tensor

// Len returns the number of values.
func (w Weights) Len() int {
	n := 0
	for _, t := range w {
		n += len(t.Values)
	}
	return n
}

// Clone returns a deep copy.
func (w Weights) Clone() Weights {
	out := make(Weights, len(w))
	for i, t := range w {
		out[i] = Tensor{Name: t.Name, Shape: append([]int(nil), t.Shape...), Values: append([]float32(nil), t.Values...)}
	}
	return out
}

// SameLayout reports, as an error naming the first difference, whether w
// and o have the same tensor names and shapes in the same order.
func (w Weights) SameLayout(o Weights) error {
	if len(w) != len(o) {
		return fmt.Errorf("wire: %d tensors, want %d", len(o), len(w))
	}
	for i := range w {
		if w[i].Name != o[i].Name {
			return fmt.Errorf("wire: tensor %d is %q, want %q", i, o[i].Name, w[i].Name)
		}
		if !equalInts(w[i].Shape, o[i].Shape) {
			return fmt.Errorf("wire: tensor %q has shape %v, want %v", w[i].Name, o[i].Shape, w[i].Shape)
		}
	}
	return nil
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Validate checks names, shapes and value counts.
func (w Weights) Validate() error {
	seen := map[string]bool{}
	for i, t := range w {
		if err := checkName(t.Name); err != nil {
			return fmt.Errorf("wire: tensor %d: %w", i, err)
		}
		if seen[t.Name] {
			return fmt.Errorf("wire: tensor %q appears twice", t.Name)
		}
		seen[t.Name] = true
		n, err := shapeSize(t.Shape)
		if err != nil {
			return fmt.Errorf("wire: tensor %q: %w", t.Name, err)
		}
		if n != len(t.Values) {
			return fmt.Errorf("wire: tensor %q has %d values for shape %v", t.Name, len(t.Values), t.Shape)
		}
	}
	return nil
}

// CheckFinite returns an error naming the first tensor holding a NaN or an
// infinity (not the value).
//
// It checks each tensor's sum of squares in float64 (vec.SqNormWiden, one
// vector pass): that is NaN or infinite exactly when a value is, since the
// squares of finite float32 values (at most 1.2e77 each) cannot add up
// to an overflow in any tensor that fits in memory.
func (w Weights) CheckFinite() error {
	for _, t := range w {
		if s := vec.SqNormWiden(t.Values); math.IsNaN(s) || math.IsInf(s, 0) {
			return fmt.Errorf("wire: tensor %q holds a non-finite value", t.Name)
		}
	}
	return nil
}

// Norm returns the L2 norm over all values. It is +Inf or NaN when a
// value is not finite (squares of finite float32 values cannot overflow a
// float64), so one pass checks both the bound and finiteness.
func (w Weights) Norm() float64 {
	var ss float64
	for _, t := range w {
		ss += vec.SqNormWiden(t.Values)
	}
	return math.Sqrt(ss)
}

const maxNameLen = 256

func checkName(name string) error {
	if name == "" || len(name) > maxNameLen || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return fmt.Errorf("tensor name must be 1–%d bytes of UTF-8 without NUL", maxNameLen)
	}
	return nil
}

// maxValues bounds any one payload (1 Gi values, 4 GiB); Limits bound it
// further.
const maxValues = 1 << 30

func shapeSize(shape []int) (int, error) {
	if len(shape) > 8 {
		return 0, fmt.Errorf("shape has %d dimensions, at most 8", len(shape))
	}
	n := 1
	for _, d := range shape {
		if d <= 0 {
			return 0, fmt.Errorf("shape %v has a dimension below 1", shape)
		}
		if n > maxValues/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// Header returns the header of w's payload (with its SHA-256).
func (w Weights) Header() *fedpb.WeightsHeader {
	h := w.layoutHeader()
	sum := digest.New()
	if !w.hashValues(sum) {
		w.writePayload(sum)
	}
	h.Sha256 = sum.Sum(nil)
	return h
}

// Encode returns the header and the payload together, the values encoded
// once (Header and Payload each encode them): what is sent is what was
// hashed.
func (w Weights) Encode() (*fedpb.WeightsHeader, []byte) {
	p := w.Payload()
	h := w.layoutHeader()
	sum := digest.Sum256(p)
	h.Sha256 = sum[:]
	return h, p
}

// layoutHeader returns the header without its checksum.
func (w Weights) layoutHeader() *fedpb.WeightsHeader {
	h := &fedpb.WeightsHeader{ProtocolVersion: fedpb.ProtocolVersion, TotalBytes: uint64(4 * w.Len())}
	for _, t := range w {
		shape := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int64(d)
		}
		h.Tensors = append(h.Tensors, &fedpb.TensorSpec{Name: t.Name, Shape: shape})
	}
	return h
}

// writePayload writes the values little-endian, 64 KiB at a time.
func (w Weights) writePayload(dst interface{ Write([]byte) (int, error) }) {
	buf := make([]byte, 0, 1<<16)
	for _, t := range w {
		for _, v := range t.Values {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			if len(buf) == cap(buf) {
				_, _ = dst.Write(buf)
				buf = buf[:0]
			}
		}
	}
	if len(buf) > 0 {
		_, _ = dst.Write(buf)
	}
}

// Payload returns the payload bytes.
func (w Weights) Payload() []byte {
	out := make([]byte, 0, 4*w.Len())
	for _, t := range w {
		if b := valueBytes(t.Values); b != nil {
			out = append(out, b...)
			continue
		}
		for _, v := range t.Values {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	}
	return out
}

// Version returns the id of a model version: the hex SHA-256 of its layout
// (names and shapes) and the SHA-256 of its payload.
func Version(h *fedpb.WeightsHeader) string {
	d := sha256.New()
	d.Write([]byte("veil model v1\x00"))
	var b [8]byte
	for _, t := range h.GetTensors() {
		binary.LittleEndian.PutUint64(b[:], uint64(len(t.GetName())))
		d.Write(b[:])
		d.Write([]byte(t.GetName()))
		binary.LittleEndian.PutUint64(b[:], uint64(len(t.GetShape())))
		d.Write(b[:])
		for _, s := range t.GetShape() {
			binary.LittleEndian.PutUint64(b[:], uint64(s))
			d.Write(b[:])
		}
	}
	d.Write(h.GetSha256())
	return hex.EncodeToString(d.Sum(nil))
}

// Chunks calls send with successive pieces of w's payload of at most size
// bytes (DefaultChunk when size ≤ 0).
func (w Weights) Chunks(size int, send func([]byte) error) error {
	if size <= 0 {
		size = DefaultChunk
	}
	p := w.Payload()
	for len(p) > 0 {
		n := min(size, len(p))
		if err := send(p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// Limits bound what a Decoder accepts.
type Limits struct {
	// MaxBytes bounds the payload (required, > 0).
	MaxBytes uint64
	// MaxTensors bounds the number of tensors (0: 4096).
	MaxTensors int
	// Layout, if non-nil, is the layout the payload must have (names and
	// shapes in order); anything else is refused before any allocation.
	Layout Weights
	// Buffer, if its capacity holds the payload, receives it instead of a
	// new allocation, and the decoded Weights alias it (on little-endian
	// machines): a receiver can reuse one buffer per update rather than
	// have the runtime allocate and clear megabytes each time. Its old
	// contents are never read: Finish accepts only a payload written in
	// full.
	Buffer []byte
}

// ErrRefused wraps every refusal of a malformed or oversized payload.
var ErrRefused = errors.New("refused")

// Decoder reassembles a payload from its header and chunks.
//
// It makes one pass over the payload while each piece is in the cache:
// Write copies a block into the payload's buffer, hashes the copy (the
// bytes that will be used, not the sender's) and adds the squares of the
// values it completes to a running sum, so that SumSquares gives the
// update's squared norm and finiteness without another pass over
// megabytes that have left the cache by the time the last chunk arrives.
type Decoder struct {
	w    Weights
	buf  []byte
	got  uint64 // payload bytes received (buf is released by Finish)
	want uint64
	sum  []byte
	h    hash.Hash
	// squared is Σ v² over the values in buf[:normed] (normed is a
	// multiple of 4: a value split between chunks is added once whole).
	squared float64
	normed  int
}

// NewDecoder validates a header against the limits and prepares to
// receive its payload. Nothing is allocated before every size is checked.
func NewDecoder(h *fedpb.WeightsHeader, lim Limits) (*Decoder, error) {
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("wire: weights header %w: %s", ErrRefused, fmt.Sprintf(format, a...))
	}
	if h == nil {
		return nil, refuse("missing")
	}
	if h.GetProtocolVersion() != fedpb.ProtocolVersion {
		return nil, refuse("protocol version %d, this build speaks %d", h.GetProtocolVersion(), fedpb.ProtocolVersion)
	}
	if lim.MaxBytes == 0 {
		return nil, errors.New("wire: decoder limits need MaxBytes > 0")
	}
	maxT := lim.MaxTensors
	if maxT <= 0 {
		maxT = 4096
	}
	if len(h.GetTensors()) == 0 || len(h.GetTensors()) > maxT {
		return nil, refuse("%d tensors (want 1 to %d)", len(h.GetTensors()), maxT)
	}
	if len(h.GetSha256()) != sha256.Size {
		return nil, refuse("checksum has %d bytes, want %d", len(h.GetSha256()), sha256.Size)
	}
	if lim.Layout != nil && len(lim.Layout) != len(h.GetTensors()) {
		return nil, refuse("%d tensors, the model has %d", len(h.GetTensors()), len(lim.Layout))
	}
	var total uint64
	specs := make([]Tensor, len(h.GetTensors()))
	seen := map[string]bool{}
	for i, t := range h.GetTensors() {
		if err := checkName(t.GetName()); err != nil {
			return nil, refuse("tensor %d: %v", i, err)
		}
		if seen[t.GetName()] {
			return nil, refuse("tensor %q appears twice", t.GetName())
		}
		seen[t.GetName()] = true
		shape := make([]int, len(t.GetShape()))
		for j, d := range t.GetShape() {
			if d <= 0 || d > maxValues {
				return nil, refuse("tensor %q has a dimension %d", t.GetName(), d)
			}
			shape[j] = int(d)
		}
		n, err := shapeSize(shape)
		if err != nil {
			return nil, refuse("tensor %q: %v", t.GetName(), err)
		}
		if lim.Layout != nil {
			if l := lim.Layout[i]; l.Name != t.GetName() || !equalInts(l.Shape, shape) {
				return nil, refuse("tensor %d is %q %v, the model has %q %v", i, t.GetName(), shape, l.Name, l.Shape)
			}
		}
		total += 4 * uint64(n)
		if total > lim.MaxBytes {
			return nil, refuse("payload above the limit of %d bytes", lim.MaxBytes)
		}
		specs[i] = Tensor{Name: t.GetName(), Shape: shape}
	}
	if total != h.GetTotalBytes() {
		return nil, refuse("declares %d bytes, its shapes need %d", h.GetTotalBytes(), total)
	}
	d := &Decoder{w: specs, want: total, sum: h.GetSha256(), h: digest.New()}
	if uint64(cap(lim.Buffer)) >= total {
		d.buf = lim.Buffer[:0]
	} else {
		d.buf = make([]byte, 0, total)
	}
	return d, nil
}

// Write appends one chunk; a chunk that would run past the declared length
// is refused (and nothing of it is kept).
func (d *Decoder) Write(p []byte) error {
	if len(p) == 0 {
		return fmt.Errorf("wire: %w: empty chunk", ErrRefused)
	}
	if uint64(len(d.buf))+uint64(len(p)) > d.want {
		return fmt.Errorf("wire: %w: payload longer than the %d bytes declared", ErrRefused, d.want)
	}
	for len(p) > 0 {
		n := min(len(p), passBlock)
		start := len(d.buf)
		d.buf = append(d.buf, p[:n]...)
		d.h.Write(d.buf[start:]) // digest.New: clears the AVX upper state first
		d.addSquares()
		d.got += uint64(n)
		p = p[n:]
	}
	return nil
}

// passBlock is the bytes Write copies, hashes and squares at a time: small
// enough to stay in a core's L1/L2 cache between the three.
const passBlock = 32 << 10

// addSquares adds the squares of the whole values received since the last
// call.
func (d *Decoder) addSquares() {
	end := len(d.buf) &^ 3
	if end <= d.normed {
		return
	}
	b := d.buf[d.normed:end]
	if v := asFloat32(b); v != nil {
		d.squared += vec.SqNormWiden(v)
	} else {
		for i := 0; i < len(b); i += 4 {
			x := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
			d.squared += x * x
		}
	}
	d.normed = end
}

// SumSquares returns Σ v² over the values received so far, in float64:
// after a successful Finish, the squared L2 norm of the whole update. It
// is +Inf or NaN exactly when a value is not finite (the squares of up to
// 2³⁰ finite float32 values cannot overflow a float64), so it checks the
// norm bound and finiteness at once. Its last bits can differ from
// Weights.Norm's, which adds in another order.
func (d *Decoder) SumSquares() float64 { return d.squared }

// Received returns the payload bytes received so far (also after Finish).
func (d *Decoder) Received() uint64 { return d.got }

// Finish checks the length and the checksum and returns the weights.
func (d *Decoder) Finish() (Weights, error) {
	if uint64(len(d.buf)) != d.want {
		return nil, fmt.Errorf("wire: %w: payload truncated: %d of %d bytes", ErrRefused, len(d.buf), d.want)
	}
	if string(d.h.Sum(nil)) != string(d.sum) {
		return nil, fmt.Errorf("wire: %w: payload does not match its SHA-256", ErrRefused)
	}
	// On a little-endian machine the payload's bytes already are the
	// values' memory: the tensors alias the buffer (every bit pattern is
	// a float32, so nothing can be smuggled in) instead of copying it.
	all := asFloat32(d.buf)
	off := 0
	for i := range d.w {
		n, _ := shapeSize(d.w[i].Shape)
		if all != nil {
			d.w[i].Values = all[off : off+n : off+n]
			off += n
			continue
		}
		vals := make([]float32, n)
		for j := range vals {
			vals[j] = math.Float32frombits(binary.LittleEndian.Uint32(d.buf[4*off:]))
			off++
		}
		d.w[i].Values = vals
	}
	d.buf = nil
	return d.w, nil
}

// littleEndian says whether this machine stores a float32 as the wire
// does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// asFloat32 returns b's memory as float32 values when this machine is
// little-endian and b is 4-byte aligned, else nil.
func asFloat32(b []byte) []float32 {
	if !littleEndian || len(b) == 0 || len(b)%4 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 != 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
