// Package tfjs reads TensorFlow.js weight manifests and their binary shards,
// the format the pretrained face networks ship in.
//
// A manifest (NAME-weights_manifest.json) is a JSON array of groups; each
// group lists shard files (concatenated in order) and the tensors stored in
// them back to back, little-endian and row-major. A tensor may be quantized
// to uint8 or uint16 with an affine scale and minimum; it is dequantized to
// float32 as float32(float64(q)*scale + min), which is what TF.js computes.
//
// The reader treats both files as untrusted: every size is checked before
// anything is allocated or read, and errors name the file and the tensor.
package tfjs

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// DType is the element type of a tensor after dequantization.
type DType string

// Supported tensor element types.
const (
	Float32 DType = "float32"
	Int32   DType = "int32"
)

// MaxTensorElements bounds a single tensor's size (256 Mi elements), so a
// hostile manifest cannot make the reader allocate unbounded memory.
const MaxTensorElements = 1 << 28

// Quantization describes an affine quantization of a stored tensor.
type Quantization struct {
	DType string  `json:"dtype"`
	Scale float64 `json:"scale"`
	Min   float64 `json:"min"`
}

// Entry is one tensor's description in a manifest.
type Entry struct {
	Name         string        `json:"name"`
	Shape        []int         `json:"shape"`
	DType        DType         `json:"dtype"`
	Quantization *Quantization `json:"quantization,omitempty"`
}

// Group is one weight group of a manifest: its shard files and tensors.
type Group struct {
	Paths   []string `json:"paths"`
	Weights []Entry  `json:"weights"`
}

// Tensor is a dequantized tensor. Float32 tensors fill F32; int32 tensors
// fill I32 (quantized int32 values are rounded to the nearest integer).
type Tensor struct {
	Name  string
	Shape []int
	DType DType
	F32   []float32
	I32   []int32
}

// Size returns the number of elements of the tensor.
func (t *Tensor) Size() int { return numElements(t.Shape) }

// Weights is the set of tensors of one model, by name, in manifest order.
type Weights struct {
	Order   []string
	Tensors map[string]*Tensor
}

// Get returns the named tensor, checking its shape when want is not nil.
func (w *Weights) Get(name string, want ...int) (*Tensor, error) {
	t, ok := w.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("tfjs: tensor %q not in weights", name)
	}
	if want != nil && !sameShape(t.Shape, want) {
		return nil, fmt.Errorf("tfjs: tensor %q has shape %v, want %v", name, t.Shape, want)
	}
	return t, nil
}

func sameShape(a, b []int) bool {
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

// ErrFormat is wrapped by every error about malformed manifests or shards.
var ErrFormat = errors.New("malformed TF.js weights")

// ParseManifest decodes and validates a manifest.
func ParseManifest(data []byte) ([]Group, error) {
	var groups []Group
	if err := json.Unmarshal(data, &groups); err != nil {
		return nil, fmt.Errorf("%w: manifest is not a JSON array of groups: %w", ErrFormat, err)
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("%w: manifest has no weight groups", ErrFormat)
	}
	seen := map[string]bool{}
	for gi, g := range groups {
		if len(g.Paths) == 0 && len(g.Weights) > 0 {
			return nil, fmt.Errorf("%w: group %d lists tensors but no shard files", ErrFormat, gi)
		}
		for _, p := range g.Paths {
			if p == "" || filepath.IsAbs(p) || filepath.Base(p) != p {
				return nil, fmt.Errorf("%w: group %d: shard path %q must be a plain file name", ErrFormat, gi, p)
			}
		}
		for _, e := range g.Weights {
			if e.Name == "" {
				return nil, fmt.Errorf("%w: group %d has a tensor without a name", ErrFormat, gi)
			}
			if seen[e.Name] {
				return nil, fmt.Errorf("%w: tensor %q appears twice", ErrFormat, e.Name)
			}
			seen[e.Name] = true
			if _, err := e.storedBytes(); err != nil {
				return nil, err
			}
		}
	}
	return groups, nil
}

// storedBytes validates the entry and returns how many bytes it occupies in
// the shard.
func (e *Entry) storedBytes() (int, error) {
	n := 1
	for _, d := range e.Shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: tensor %q has negative dimension in shape %v", ErrFormat, e.Name, e.Shape)
		}
		if d > 0 && n > MaxTensorElements/d {
			return 0, fmt.Errorf("%w: tensor %q shape %v exceeds %d elements", ErrFormat, e.Name, e.Shape, MaxTensorElements)
		}
		n *= d
	}
	if e.DType != Float32 && e.DType != Int32 {
		return 0, fmt.Errorf("%w: tensor %q has unsupported dtype %q", ErrFormat, e.Name, e.DType)
	}
	if q := e.Quantization; q != nil {
		if math.IsNaN(q.Scale) || math.IsInf(q.Scale, 0) || math.IsNaN(q.Min) || math.IsInf(q.Min, 0) {
			return 0, fmt.Errorf("%w: tensor %q has a non-finite quantization scale or minimum", ErrFormat, e.Name)
		}
		switch q.DType {
		case "uint8":
			return n, nil
		case "uint16":
			return 2 * n, nil
		default:
			return 0, fmt.Errorf("%w: tensor %q has unsupported quantization dtype %q", ErrFormat, e.Name, q.DType)
		}
	}
	return 4 * n, nil
}

func numElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Decode dequantizes the tensors of groups from their concatenated shard
// bytes. The data must hold exactly the bytes the manifest describes.
func Decode(groups []Group, shards [][]byte) (*Weights, error) {
	if len(shards) != len(groups) {
		return nil, fmt.Errorf("%w: %d shard groups for %d manifest groups", ErrFormat, len(shards), len(groups))
	}
	w := &Weights{Tensors: map[string]*Tensor{}}
	for gi, g := range groups {
		data := shards[gi]
		off := 0
		for i := range g.Weights {
			e := &g.Weights[i]
			nb, err := e.storedBytes()
			if err != nil {
				return nil, err
			}
			if nb > len(data)-off {
				return nil, fmt.Errorf("%w: tensor %q needs %d bytes at offset %d but the shard has %d: truncated file?",
					ErrFormat, e.Name, nb, off, len(data))
			}
			t := decodeTensor(e, data[off:off+nb])
			off += nb
			w.Order = append(w.Order, e.Name)
			w.Tensors[e.Name] = t
		}
		if off != len(data) {
			return nil, fmt.Errorf("%w: group %d: %d bytes follow the last tensor: shard does not match manifest",
				ErrFormat, gi, len(data)-off)
		}
	}
	return w, nil
}

func decodeTensor(e *Entry, raw []byte) *Tensor {
	n := numElements(e.Shape)
	t := &Tensor{Name: e.Name, Shape: append([]int(nil), e.Shape...), DType: e.DType}
	value := func(i int) float64 {
		q := e.Quantization
		switch {
		case q == nil && e.DType == Int32:
			return float64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		case q == nil:
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		case q.DType == "uint8":
			return float64(raw[i])*q.Scale + q.Min
		default:
			return float64(binary.LittleEndian.Uint16(raw[2*i:]))*q.Scale + q.Min
		}
	}
	if e.DType == Int32 {
		t.I32 = make([]int32, n)
		for i := range t.I32 {
			t.I32[i] = int32(math.Round(value(i)))
		}
		return t
	}
	t.F32 = make([]float32, n)
	if e.Quantization == nil {
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return t
	}
	for i := range t.F32 {
		t.F32[i] = float32(value(i))
	}
	return t
}

// maxShardBytes bounds how much a shard file may hold (1 GiB).
const maxShardBytes = 1 << 30

// Load reads the manifest at path and its shards from the same directory.
// Errors name the file and, where it applies, the tensor.
func Load(manifestPath string) (*Weights, error) {
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		return nil, fmt.Errorf("tfjs: reading manifest: %w", err)
	}
	groups, err := ParseManifest(data)
	if err != nil {
		return nil, fmt.Errorf("tfjs: %s: %w", manifestPath, err)
	}
	dir := filepath.Dir(manifestPath)
	shards := make([][]byte, len(groups))
	for gi, g := range groups {
		var buf []byte
		for _, p := range g.Paths {
			full := filepath.Join(dir, p)
			st, err := os.Stat(full)
			if err != nil {
				return nil, fmt.Errorf("tfjs: shard of %s: %w", manifestPath, err)
			}
			if st.Size() > maxShardBytes {
				return nil, fmt.Errorf("tfjs: %s: %w: shard is %d bytes, over the %d limit", full, ErrFormat, st.Size(), maxShardBytes)
			}
			b, err := os.ReadFile(full)
			if err != nil {
				return nil, fmt.Errorf("tfjs: reading shard: %w", err)
			}
			buf = append(buf, b...)
		}
		shards[gi] = buf
	}
	w, err := Decode(groups, shards)
	if err != nil {
		return nil, fmt.Errorf("tfjs: %s: %w", manifestPath, err)
	}
	return w, nil
}
