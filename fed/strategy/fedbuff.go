package strategy

import (
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/fed/wire"
)

// FedBuffOptions configures buffered asynchronous aggregation (FedBuff,
// Nguyen et al. 2022).
type FedBuffOptions struct {
	// BufferSize K ≥ 1 is the number of updates folded before the model
	// moves. Under secure aggregation it must be at least the secure
	// threshold, so each buffer is aggregated securely.
	BufferSize int
	// MaxStaleness is the largest accepted staleness: the number of model
	// versions published since the one an update was computed on. Older
	// updates are refused (ErrStale) and change nothing.
	MaxStaleness int
	// ServerLR η > 0 scales the buffer's mean (default 1).
	ServerLR float64
	// Exponent a ≥ 0 of the staleness weight (1 + s)^−a (default 0.5, the
	// paper's polynomial 1/√(1+s)).
	Exponent float64
}

// FedBuff is the coordinator's buffered asynchronous aggregator: clients
// send model differences Δ computed on the version they fetched, in any
// order; each is weighted by StalenessWeight and folded into the buffer;
// when the buffer holds K updates the model moves by η·(1/K)·Σ w_i·Δ_i and
// the version advances. Stragglers never block: a slow client's update is
// simply staler, down-weighted, and refused past MaxStaleness. Not safe
// for concurrent use (the coordinator serialises updates).
type FedBuff struct {
	o       FedBuffOptions
	model   wire.Weights
	version uint64
	buf     *Sum
}

// NewFedBuff validates o and starts at model, version 0.
func NewFedBuff(o FedBuffOptions, model wire.Weights) (*FedBuff, error) {
	if o.BufferSize < 1 {
		return nil, fmt.Errorf("strategy: FedBuff buffer size must be at least 1, got %d", o.BufferSize)
	}
	if o.MaxStaleness < 0 {
		return nil, fmt.Errorf("strategy: FedBuff maximum staleness must not be negative, got %d", o.MaxStaleness)
	}
	if o.ServerLR == 0 {
		o.ServerLR = 1
	}
	if !(o.ServerLR > 0) || math.IsInf(o.ServerLR, 0) {
		return nil, fmt.Errorf("strategy: FedBuff server learning rate must be positive and finite, got %g", o.ServerLR)
	}
	if o.Exponent == 0 {
		o.Exponent = 0.5
	}
	if !(o.Exponent >= 0) || math.IsInf(o.Exponent, 0) {
		return nil, fmt.Errorf("strategy: FedBuff staleness exponent must be finite and not negative, got %g", o.Exponent)
	}
	if err := model.Validate(); err != nil {
		return nil, fmt.Errorf("strategy: FedBuff model: %w", err)
	}
	return &FedBuff{o: o, model: model.Clone(), buf: NewSum(model)}, nil
}

// StalenessWeight is FedBuff's weight (1 + s)^−a of an update of staleness
// s ≥ 0.
func StalenessWeight(staleness int, exponent float64) float64 {
	return math.Pow(1+float64(staleness), -exponent)
}

// Version is the number of times the model has moved.
func (f *FedBuff) Version() uint64 { return f.version }

// Model returns a copy of the current model.
func (f *FedBuff) Model() wire.Weights { return f.model.Clone() }

// Buffered is the number of updates waiting in the buffer.
func (f *FedBuff) Buffered() int { return f.buf.Count }

// Add folds an update computed on model version base. It returns whether
// the buffer filled and the model moved. An update from the future, of
// another layout, not finite, or staler than MaxStaleness (ErrStale) is
// refused and changes nothing.
func (f *FedBuff) Add(update wire.Weights, base uint64) (moved bool, err error) {
	if base > f.version {
		return false, fmt.Errorf("strategy: FedBuff update on version %d, but the model is at %d", base, f.version)
	}
	s := f.version - base
	if s > uint64(f.o.MaxStaleness) {
		return false, fmt.Errorf("%w: computed on version %d, %d versions old (limit %d)", ErrStale, base, s, f.o.MaxStaleness)
	}
	if err := f.model.SameLayout(update); err != nil {
		return false, fmt.Errorf("strategy: FedBuff update: %w", err)
	}
	if err := update.CheckFinite(); err != nil {
		return false, fmt.Errorf("strategy: FedBuff update: %w", err)
	}
	if err := f.buf.Add(update, StalenessWeight(int(s), f.o.Exponent)); err != nil {
		return false, err
	}
	if f.buf.Count < f.o.BufferSize {
		return false, nil
	}
	k := 0
	scale := f.o.ServerLR / float64(f.buf.Count)
	for i := range f.model {
		for j := range f.model[i].Values {
			f.model[i].Values[j] = float32(float64(f.model[i].Values[j]) + scale*f.buf.Values[k])
			k++
		}
	}
	f.version++
	f.buf = NewSum(f.model)
	return true, nil
}

// ErrStale says an asynchronous update was computed on a model too old to
// be accepted (FedBuffOptions.MaxStaleness).
var ErrStale = errors.New("strategy: update too stale")
