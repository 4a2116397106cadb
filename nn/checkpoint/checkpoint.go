// Package checkpoint saves and loads training checkpoints: the model and
// loss configuration, every parameter, the optimiser state and the privacy
// spent so far, so that training resumes exactly and a checkpoint is never
// loaded into a different model.
//
// Format: the line "VEILCKPT1\n", a little-endian uint32 header length, a
// JSON header, then float32 little-endian tensors in header order (each
// parameter's values, then its first moments, then its second moments if
// any).
package checkpoint

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"

	"github.com/veil-privacy/veil/internal/atomicfile"
	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/record"
)

const magic = "VEILCKPT1\n"

// maxHeader and maxValues bound what a reader allocates for untrusted files.
const (
	maxHeader = 1 << 20
	maxValues = 1 << 28
)

// Header describes the checkpoint.
type Header struct {
	Model     arch.Config    `json:"model"`
	Loss      loss.Config    `json:"loss"`
	Params    []ParamInfo    `json:"params"`
	Optimizer string         `json:"optimizer"`
	Step      int            `json:"step"`
	Epoch     int            `json:"epoch"`
	Seed      uint64         `json:"seed"`
	Privacy   record.Privacy `json:"privacy"`
	// SecondMoments says whether V tensors follow (Adam).
	SecondMoments bool `json:"second_moments"`
	// EMA says whether the parameters' moving average follows.
	EMA bool `json:"ema,omitempty"`
	// Data names the training set of the run that wrote the checkpoint
	// (e.g. "lfw" or "mtfl").
	Data string `json:"data,omitempty"`
	// Public says that every example the weights have seen, in this run
	// and in the runs it started from, came from public data: DP training
	// may start from such weights without accounting for them.
	Public bool `json:"public,omitempty"`
	// Federation, on a model a federation trained (veil fed coordinator
	// --out), says what Privacy means for the people in the clients' data
	// and holds the record of the model the federation started from.
	Federation *Federation `json:"federation,omitempty"`
}

// Federation is the privacy record of a federated model. Its ε are at
// Delta per Unit, from the coordinator's ledgers of the clients' DP-SGD
// releases (Rényi composition); Privacy in the header holds the bound
// that covers every unit under Assumption, the initial model's ε included.
type Federation struct {
	// DPRounds counts the rounds aggregated into the model whose clients
	// ran DP-SGD, PlainRounds those whose clients did not (their updates
	// carry no guarantee: Privacy.NonPrivateSteps counts them).
	DPRounds    int `json:"dp_rounds"`
	PlainRounds int `json:"plain_rounds,omitempty"`
	// Clients counts the clients whose ledgers were charged: every
	// accepted update of a round with DP, including a failed round's (the
	// coordinator saw it), so the ε below may exceed what the model's
	// rounds alone spent, never fall short of it.
	Clients int         `json:"clients"`
	Unit    record.Unit `json:"unit,omitempty"`
	Delta   float64     `json:"delta,omitempty"`
	// EpsilonOneClient is the largest ε any one client's releases spent:
	// the federation's ε for a unit whose data one client alone holds.
	EpsilonOneClient float64 `json:"epsilon_one_client"`
	// Assumption says, in words, for whom EpsilonOneClient holds and what
	// holds for the others.
	Assumption string `json:"assumption"`
	// KClients gives the ε of a unit whose data k clients hold, k from 1
	// to Clients: those clients' releases composed (worst case over which
	// k), never k times EpsilonOneClient.
	KClients []ClientsEpsilon `json:"epsilon_k_clients,omitempty"`
	// Init is the record of the model the federation started from.
	Init *Origin `json:"init,omitempty"`
}

// ClientsEpsilon is the ε of a unit whose data K clients hold.
type ClientsEpsilon struct {
	K int `json:"k"`
	// Epsilon is at Federation.Delta; Exact says it is the composition of
	// the worst K clients' releases, else an upper bound on every K.
	Epsilon float64 `json:"epsilon"`
	Exact   bool    `json:"exact"`
	// WithInit, when the initial model was trained with DP-SGD, bounds a
	// unit that is also in the initial model's training data: Epsilon
	// plus the initial model's ε, at Federation.Delta plus its δ (basic
	// composition), in the weaker of the two units.
	WithInit float64 `json:"epsilon_with_init,omitempty"`
}

// Origin is the record of a federation's initial model, as its header
// said.
type Origin struct {
	// Data names what it was trained on ("lfw", "mtfl", "federated";
	// empty for a model that has seen no data).
	Data       string         `json:"data,omitempty"`
	Public     bool           `json:"public,omitempty"`
	Privacy    record.Privacy `json:"privacy"`
	Federation *Federation    `json:"federation,omitempty"`
	// Note says, in words, how the initial model's privacy and the
	// federation's combine.
	Note string `json:"note"`
}

// ParamInfo names one stored parameter.
type ParamInfo struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
}

// Checkpoint is a header plus tensors.
type Checkpoint struct {
	Header Header
	Values [][]float32
	State  record.State
}

// FromTrainer captures a trainer's parameters and optimiser state.
func FromTrainer(h Header, p *nn.Params, st record.State) *Checkpoint {
	h.Params = nil
	for _, s := range p.Specs() {
		h.Params = append(h.Params, ParamInfo{Name: s.Name, Shape: s.Shape})
	}
	h.Step = st.Step
	h.Privacy = st.Privacy
	h.SecondMoments = len(st.V) > 0
	h.EMA = len(st.EMA) > 0
	c := &Checkpoint{Header: h, State: st}
	for i := 0; i < p.Len(); i++ {
		c.Values = append(c.Values, append([]float32(nil), p.Values(i)...))
	}
	return c
}

// Write encodes c.
func (c *Checkpoint) Write(w io.Writer) error {
	if len(c.State.M) != len(c.Values) || (c.Header.SecondMoments && len(c.State.V) != len(c.Values)) {
		return fmt.Errorf("checkpoint: %d parameters but %d/%d moment tensors", len(c.Values), len(c.State.M), len(c.State.V))
	}
	if c.Header.EMA && len(c.State.EMA) != len(c.Values) {
		return fmt.Errorf("checkpoint: %d parameters but %d moving-average tensors", len(c.Values), len(c.State.EMA))
	}
	for i, v := range c.Values {
		if len(c.State.M[i]) != len(v) || (c.Header.SecondMoments && len(c.State.V[i]) != len(v)) || (c.Header.EMA && len(c.State.EMA[i]) != len(v)) {
			return fmt.Errorf("checkpoint: moments of parameter %d have the wrong size", i)
		}
	}
	hdr, err := json.Marshal(c.Header)
	if err != nil {
		return fmt.Errorf("checkpoint: encoding header: %w", err)
	}
	bw := bufio.NewWriter(w)
	bw.WriteString(magic)
	binary.Write(bw, binary.LittleEndian, uint32(len(hdr)))
	bw.Write(hdr)
	groups := [][][]float32{c.Values, c.State.M}
	if c.Header.SecondMoments {
		groups = append(groups, c.State.V)
	}
	if c.Header.EMA {
		groups = append(groups, c.State.EMA)
	}
	buf := make([]byte, 4)
	for _, g := range groups {
		for _, t := range g {
			for _, v := range t {
				binary.LittleEndian.PutUint32(buf, math.Float32bits(v))
				bw.Write(buf)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("checkpoint: writing: %w", err)
	}
	return nil
}

// Save writes c to path atomically and durably (atomicfile.Write, mode
// 0600), so that
// after a crash path holds either the previous checkpoint or this one,
// never a mixture.
func (c *Checkpoint) Save(path string) error {
	if err := atomicfile.Write(path, 0o600, c.Write); err != nil {
		return fmt.Errorf("checkpoint: saving %s: %w", path, err)
	}
	return nil
}

// lengther is a reader that knows how many bytes it has left
// (bytes.Reader, bytes.Buffer, strings.Reader).
type lengther interface{ Len() int }

// Read decodes a checkpoint from r. Sizes in the header are untrusted: they
// are bounded (maxValues), checked against the bytes r holds when r can say
// (a file, or a reader with a Len method) before any tensor is allocated,
// and otherwise tensors grow only as their bytes actually arrive, so a
// short input claiming huge tensors never causes a large allocation.
func Read(r io.Reader) (*Checkpoint, error) {
	remaining := int64(-1)
	switch v := r.(type) {
	case lengther:
		remaining = int64(v.Len())
	case *os.File:
		if st, err := v.Stat(); err == nil && st.Mode().IsRegular() {
			if pos, err := v.Seek(0, io.SeekCurrent); err == nil {
				remaining = st.Size() - pos
			}
		}
	}
	return read(r, remaining)
}

// read decodes a checkpoint from r, which holds remaining bytes (-1:
// unknown).
func read(r io.Reader, remaining int64) (*Checkpoint, error) {
	br := bufio.NewReader(r)
	m := make([]byte, len(magic))
	if _, err := io.ReadFull(br, m); err != nil || string(m) != magic {
		return nil, errors.New("not a Veil checkpoint (one written by veil train or veil fed)")
	}
	var n uint32
	if err := binary.Read(br, binary.LittleEndian, &n); err != nil {
		return nil, fmt.Errorf("checkpoint: truncated header length: %w", err)
	}
	if n == 0 || n > maxHeader {
		return nil, fmt.Errorf("checkpoint: header length %d outside (0, %d]", n, maxHeader)
	}
	prefix := int64(len(magic)) + 4 + int64(n)
	if remaining >= 0 && int64(n) > remaining-int64(len(magic))-4 {
		return nil, fmt.Errorf("checkpoint: header of %d bytes in a file of %d bytes", n, remaining)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return nil, fmt.Errorf("checkpoint: truncated header: %w", err)
	}
	c := &Checkpoint{}
	if err := json.Unmarshal(hdr, &c.Header); err != nil {
		return nil, fmt.Errorf("checkpoint: header: %w", err)
	}
	total := 0
	sizes := make([]int, len(c.Header.Params))
	for i, p := range c.Header.Params {
		s := 1
		for _, d := range p.Shape {
			if d <= 0 || d > maxValues || s > maxValues/d {
				return nil, fmt.Errorf("checkpoint: parameter %q has bad shape %v", p.Name, p.Shape)
			}
			s *= d
		}
		sizes[i] = s
		total += s
		if total > maxValues {
			return nil, errors.New("checkpoint: too many values")
		}
	}
	groups := int64(2) // values and first moments
	if c.Header.SecondMoments {
		groups++
	}
	if c.Header.EMA {
		groups++
	}
	if need := prefix + groups*int64(total)*4; remaining >= 0 && need != remaining {
		return nil, fmt.Errorf("checkpoint: the header declares %d bytes of tensors, the file holds %d after the header", need-prefix, remaining-prefix)
	}
	var buf []byte // reused across tensors, at most chunk bytes
	const chunk = 1 << 16
	read := func() ([][]float32, error) {
		var out [][]float32
		for i, s := range sizes {
			// Grow with the data that actually arrives, never by s alone.
			t := make([]float32, 0, min(s, chunk))
			for len(t) < s {
				k := min(s-len(t), chunk)
				if cap(buf) < 4*k {
					buf = make([]byte, 4*chunk)
				}
				b := buf[:4*k]
				if _, err := io.ReadFull(br, b); err != nil {
					return nil, fmt.Errorf("checkpoint: truncated data of %q: %w", c.Header.Params[i].Name, err)
				}
				for j := 0; j < k; j++ {
					t = append(t, math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:])))
				}
			}
			out = append(out, t)
		}
		return out, nil
	}
	var err error
	if c.Values, err = read(); err != nil {
		return nil, err
	}
	if c.State.M, err = read(); err != nil {
		return nil, err
	}
	if c.Header.SecondMoments {
		if c.State.V, err = read(); err != nil {
			return nil, err
		}
	}
	if c.Header.EMA {
		if c.State.EMA, err = read(); err != nil {
			return nil, err
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, errors.New("checkpoint: trailing data after the tensors")
	}
	c.State.Step = c.Header.Step
	c.State.Privacy = c.Header.Privacy
	return c, nil
}

// Load reads the checkpoint at path, checking the sizes its header
// declares against the file's length before allocating tensors.
func Load(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("cannot read checkpoint %s: %w", path, pe.Err) // the path once
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ApplyInit copies the checkpoint's values into the parameters of p with
// the same name and shape, to start a new run from them (no optimiser
// state, step 0). When the checkpoint holds a moving average of the
// weights, the average is copied: it is what that run evaluated with. The model configuration must match and every parameter
// of p outside the loss head (names starting with headPrefix) must be in
// the checkpoint; the head may differ, since a new run may change the
// loss. It returns how many parameters were copied.
func (c *Checkpoint) ApplyInit(model arch.Config, p *nn.Params, headPrefix string) (int, error) {
	if !c.Header.Model.Equal(model) {
		a, _ := json.Marshal(c.Header.Model)
		b, _ := json.Marshal(model)
		return 0, fmt.Errorf("checkpoint: it holds model %s, not %s", a, b)
	}
	byName := make(map[string]int, len(c.Header.Params))
	for i, info := range c.Header.Params {
		byName[info.Name] = i
	}
	n := 0
	for i := 0; i < p.Len(); i++ {
		s := p.Spec(i)
		j, ok := byName[s.Name]
		if ok && fmt.Sprint(c.Header.Params[j].Shape) != fmt.Sprint(s.Shape) {
			return 0, fmt.Errorf("checkpoint: parameter %q is %v, the model has %v", s.Name, c.Header.Params[j].Shape, s.Shape)
		}
		if !ok {
			if headPrefix != "" && strings.HasPrefix(s.Name, headPrefix) {
				continue
			}
			return 0, fmt.Errorf("checkpoint: no parameter %q", s.Name)
		}
		v := c.Values[j]
		if c.Header.EMA && j < len(c.State.EMA) {
			v = c.State.EMA[j]
		}
		copy(p.Values(i), v)
		n++
	}
	return n, nil
}

// Apply checks that the checkpoint belongs to the model configuration and
// parameters p, and copies its values into p.
func (c *Checkpoint) Apply(model arch.Config, p *nn.Params) error {
	if !c.Header.Model.Equal(model) {
		a, _ := json.Marshal(c.Header.Model)
		b, _ := json.Marshal(model)
		return fmt.Errorf("checkpoint: it holds model %s, not %s", a, b)
	}
	if len(c.Header.Params) != p.Len() {
		return fmt.Errorf("checkpoint: %d parameters, the model has %d", len(c.Header.Params), p.Len())
	}
	for i, info := range c.Header.Params {
		s := p.Spec(i)
		if info.Name != s.Name || fmt.Sprint(info.Shape) != fmt.Sprint(s.Shape) {
			return fmt.Errorf("checkpoint: parameter %d is %q %v, the model has %q %v", i, info.Name, info.Shape, s.Name, s.Shape)
		}
	}
	for i := range c.Header.Params {
		copy(p.Values(i), c.Values[i])
	}
	return nil
}
