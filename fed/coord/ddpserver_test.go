package coord_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/veil-privacy/veil/fed/wire"
)

// sgdServer is a coord.DDPServer standing in for fed/ddpserver's (tested
// there with veil train's optimiser): SGD with momentum 0.5 on the
// released mean, so that its state (the velocity and the step count)
// changes every step and a restart that lost it would step elsewhere. It
// notes every step it takes.
type sgdServer struct {
	lr float32

	mu    sync.Mutex
	vel   []float32
	n     uint64
	steps []stepped
	// restored notes the states Restore was given (nil: fresh).
	restored [][]byte
}

// stepped is one server step: what it was given and what it returned.
type stepped struct {
	released []float32
	batch    float64
	mech     string
	next     wire.Weights
	state    []byte
}

func (s *sgdServer) Step(model wire.Weights, released []float32, batch float64, mech string) (wire.Weights, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vel == nil {
		s.vel = make([]float32, len(released))
	}
	next := model.Clone()
	k := 0
	for i := range next {
		for j := range next[i].Values {
			s.vel[k] = 0.5*s.vel[k] + released[k]/float32(batch)
			next[i].Values[j] -= s.lr * s.vel[k]
			k++
		}
	}
	s.n++
	st := s.encode()
	s.steps = append(s.steps, stepped{slices.Clone(released), batch, mech, next.Clone(), st})
	return next, st, nil
}

func (s *sgdServer) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, s.n)
	for _, v := range s.vel {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func (s *sgdServer) Restore(model wire.Weights, state []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restored = append(s.restored, slices.Clone(state))
	if state == nil {
		s.vel, s.n = nil, 0
		return nil
	}
	if len(state) != 8+4*model.Len() {
		return fmt.Errorf("a state of %d bytes for %d values", len(state), model.Len())
	}
	if len(state) < 8 {
		return errors.New("short state")
	}
	s.n = binary.LittleEndian.Uint64(state)
	s.vel = make([]float32, model.Len())
	for i := range s.vel {
		s.vel[i] = math.Float32frombits(binary.LittleEndian.Uint32(state[8+4*i:]))
	}
	return nil
}
