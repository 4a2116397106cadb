// Package ddpserver is the coordinator's half of distributed DP-SGD
// (package fed/ddp): veil train's optimiser step (Adam or SGD, weight
// decay, the weights' moving average) taken with the sum that secure
// aggregation releases each round, its state saved and restored exactly,
// and the model's privacy record naming the released mechanism with its
// effective noise multiplier.
//
// The coordinator (fed/coord) links no engine: it calls a Server through
// coord.DDPServer, stores the bytes Step returns in the transaction that
// closes the round, and hands them back to Restore after a restart, so a
// restarted coordinator takes the very steps an uninterrupted one would.
// veil fed coordinator (through fed/ops) and veil fed sim (fed/sim) use
// the same Server.
package ddpserver

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// Options configure a Server.
type Options struct {
	// Model is the shared model's network (an embedding head with the
	// distillation loss in a federation).
	Model training.ModelOptions
	// Optim is the server's optimiser: Optimizer, LearningRate,
	// WeightDecay, EMA (the moving average's decay), Seed (the initial
	// weights when no Init is given), MicroBatch and Engine. Its Batch is
	// not used (the plan's ExpectedBatch divides the released sum).
	Optim training.OptimOptions
	// Plan is the rounds' plan, MinHonest the T the coordinator states
	// (the mechanism's honest clients, and the ε and σ_eff recorded).
	Plan      ddp.Plan
	MinHonest int
	// Data, if set, is the data the session is built on (fed/sim's whole
	// training set); nil builds it on one placeholder example: the server
	// never reads data, it only steps with released sums.
	Data *training.Data
	// Init, if set, are the initial weights (the coordinator's --init);
	// else the network initialised from Optim.Seed.
	Init wire.Weights
	// MaxPerIdentity caps a sampled person's images in the session's
	// clipped sums (Session().ClippedSum, fed/ddpsim's clients); 0: the
	// micro-batch.
	MaxPerIdentity int
}

// Server is the coordinator's optimiser of distributed DP-SGD rounds. Its
// methods are safe for concurrent use.
type Server struct {
	mu    sync.Mutex
	s     *training.Session
	plan  ddp.Plan
	mech  ddp.Mechanism
	event dp.Event
	key   string
}

// New builds the server's training session: veil train's model and
// optimiser, whose privacy record is the distributed mechanism's (its
// noise multiplier the effective σ of the T honest clients' summed noise,
// √T·σ/Δ, ddp.Mechanism.EffectiveMultiplier), at the plan's unit, clip,
// sampling rate and δ. Its own DP-SGD noise is never drawn: the clients'
// shares are the noise.
func New(o Options) (*Server, error) {
	if err := o.Plan.Validate(); err != nil {
		return nil, fmt.Errorf("ddpserver: %w", err)
	}
	if o.MinHonest < 1 || o.MinHonest > o.Plan.Threshold {
		return nil, fmt.Errorf("ddpserver: T = %d honest clients must be in [1, the plan's threshold %d]", o.MinHonest, o.Plan.Threshold)
	}
	mech := o.Plan.Mechanism(o.MinHonest)
	ev, err := mech.Event(1)
	if err != nil {
		return nil, fmt.Errorf("ddpserver: %w", err)
	}
	d := o.Data
	if d == nil {
		if d, err = placeholder(o.Model); err != nil {
			return nil, err
		}
	}
	s, err := training.NewSession(o.Model, o.Optim, &training.DPOptions{Unit: train.Unit(o.Plan.Unit), NoiseMultiplier: mech.EffectiveMultiplier(),
		Clip: o.Plan.Clip, SamplingRate: o.Plan.SamplingRate, Delta: o.Plan.Delta, MaxPerIdentity: o.MaxPerIdentity}, 1, d)
	if err != nil {
		return nil, fmt.Errorf("ddpserver: %w", err)
	}
	if s.Trainable() != o.Plan.Dim {
		return nil, fmt.Errorf("ddpserver: the plan sums %d values, the model trains %d", o.Plan.Dim, s.Trainable())
	}
	srv := &Server{s: s, plan: o.Plan, mech: mech, event: ev,
		key: fmt.Sprintf("%s/%g/%g/%g/%g/%s/%+v", o.Optim.Optimizer, o.Optim.LearningRate, o.Optim.WeightDecay, o.Optim.Momentum, o.Optim.EMA, mech.Label(), o.Plan)}
	if o.Init != nil {
		if err := srv.Restore(o.Init, nil); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

// placeholder is one example of one person (with one distillation target
// of the network's embedding size): enough to build the session's loss
// head, never read.
func placeholder(m training.ModelOptions) (*training.Data, error) {
	if m.Kind != "head" {
		return nil, fmt.Errorf("ddpserver: a server without data steps an embedding head, not a %q network", m.Kind)
	}
	mc := arch.Config{Kind: "head"}
	if m.Features != "descriptor" {
		mc.Features = m.Features
	}
	net, err := arch.New(mc)
	if err != nil {
		return nil, fmt.Errorf("ddpserver: %w", err)
	}
	t := make([]float32, net.Config().Embedding)
	t[0] = 1
	return &training.Data{Name: "released sums", Train: unread{}, Identities: 1, Targets: [][]float32{t}}, nil
}

// unread is the placeholder's one example; reading it is an error.
type unread struct{}

func (unread) Len() int         { return 1 }
func (unread) Classes() int     { return 1 }
func (unread) Identity(int) int { return 0 }
func (unread) Identities() int  { return 1 }
func (unread) Batch([]int, *rand.Rand) ([]float32, []int32, error) {
	return nil, nil, errors.New("ddpserver: the server reads no data")
}

// Plan is the rounds' plan.
func (s *Server) Plan() ddp.Plan { return s.plan }

// Mechanism is a round's mechanism at the server's T.
func (s *Server) Mechanism() ddp.Mechanism { return s.mech }

// Weights are the current weights.
func (s *Server) Weights() wire.Weights {
	s.mu.Lock()
	defer s.mu.Unlock()
	return local.ToWire(s.s.Weights())
}

// Average is the weights' moving average (the weights without EMA): what
// veil train scores and writes.
func (s *Server) Average() wire.Weights {
	s.mu.Lock()
	defer s.mu.Unlock()
	return local.ToWire(s.s.Average())
}

// Privacy is the weights' privacy record: the steps taken, ε at the
// plan's δ after them (the mechanism at T), the mechanism with its trust
// assumption, and σ_eff as the noise multiplier.
func (s *Server) Privacy() train.Privacy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s.Privacy()
}

// Session is the server's training session (to score its weights; the
// caller must not step it).
func (s *Server) Session() *training.Session { return s.s }

// Step takes central DP-SGD's optimiser step from model with the
// released noisy gradient sum over expectedBatch, records mechanism and
// the ε after it, and returns the next model and the optimiser's state
// after the step (to store with the next model and give back to
// Restore). It implements coord.DDPServer.
func (s *Server) Step(model wire.Weights, released []float32, expectedBatch float64, mechanism string) (wire.Weights, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.s.LoadWeights(local.FromWire(model)); err != nil {
		return nil, nil, fmt.Errorf("ddpserver: %w", err)
	}
	eps, err := s.epsilon(s.s.Privacy().Steps + 1)
	if err != nil {
		return nil, nil, err
	}
	if err := s.s.ApplyReleased(released, expectedBatch, mechanism, eps); err != nil {
		return nil, nil, fmt.Errorf("ddpserver: %w", err)
	}
	st, err := s.encode()
	if err != nil {
		return nil, nil, err
	}
	return local.ToWire(s.s.Weights()), st, nil
}

// epsilon is ε at the plan's δ after n rounds of the mechanism.
func (s *Server) epsilon(n int) (float64, error) {
	ev := s.event
	ev.Count = n
	a, err := dp.NewAccountant(nil)
	if err == nil {
		err = a.Add(ev)
	}
	if err != nil {
		return 0, fmt.Errorf("ddpserver: %w", err)
	}
	eps, _, err := a.Epsilon(s.plan.Delta)
	if err != nil {
		return 0, fmt.Errorf("ddpserver: %w", err)
	}
	return eps, nil
}

// stored is the state's encoding: the settings it was taken with (a
// restart with other settings is refused) and the optimiser's state.
type stored struct {
	Key   string
	State train.State
}

func (s *Server) encode() ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(stored{Key: s.key, State: s.s.State()}); err != nil {
		return nil, fmt.Errorf("ddpserver: encoding the optimiser state: %w", err)
	}
	return b.Bytes(), nil
}

// Restore sets the weights to model and the optimiser state to state, as
// a Step returned it (nil: a fresh optimiser at model, the moving average
// starting there). It refuses a state taken with other settings
// (optimiser, plan, T). It implements coord.DDPServer.
func (s *Server) Restore(model wire.Weights, state []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.s.LoadWeights(local.FromWire(model)); err != nil {
		return fmt.Errorf("ddpserver: %w", err)
	}
	var st stored
	if state != nil {
		if err := gob.NewDecoder(bytes.NewReader(state)).Decode(&st); err != nil {
			return fmt.Errorf("ddpserver: decoding the optimiser state: %w", err)
		}
		if st.Key != s.key {
			return errors.New("ddpserver: the stored optimiser state was taken with other settings (optimiser, learning rate, decay, plan or T): restart with the same ones")
		}
	} else {
		st.State = s.fresh()
	}
	if err := s.s.RestoreReleased(st.State); err != nil {
		return fmt.Errorf("ddpserver: %w", err)
	}
	return nil
}

// fresh is the state of an optimiser that took no step: zero moments.
func (s *Server) fresh() train.State {
	cur := s.s.State()
	st := train.State{M: cur.M, V: cur.V}
	for _, m := range st.M {
		clear(m)
	}
	for _, v := range st.V {
		clear(v)
	}
	return st
}
