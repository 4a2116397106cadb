package coord

import (
	"context"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/secagg/quant"
)

// Secure aggregation of a round. A round in a secure mode never holds an
// individual update in plaintext: not in memory, not in the state file,
// not in the logs. The round's logic lives behind secureRound, one value
// per round, so that a mode other than masking (DPHE) plugs in with its
// own begin (beginMasking's counterpart), messages and finish.

// SecAggOptions configures the secure aggregation of a coordinator's
// rounds (Options.SecAgg; nil: clients send updates in plaintext).
type SecAggOptions struct {
	// Mode is "masking": SecAgg+ masking (secagg/masking) of updates
	// quantised by secagg/quant.
	Mode string
	// Degree is k, each client's number of neighbours (0: the complete
	// graph, SecAgg, for up to 16 clients; 2⌈log₂ n⌉ beyond, SecAgg+).
	Degree int
	// Threshold is t (0: the least t with 2t > k + 1, and at least
	// MinHonest). No round with fewer than t survivors is unmasked.
	Threshold int
	// MinHonest is T, the least number of honest surviving clients the
	// distributed noise assumes (at least 2, at most Options.MinUpdates):
	// sent to clients, who check it against their own policy.
	MinHonest int
	// Bits is b, the sum lives in Z_(2^b) (0: 32).
	Bits int
	// Gamma is the lattice step γ (0: the smallest power of two for which
	// the sum of the round's clients, with the proposed noise, stays
	// within 2^(b−3), a margin of 4 for clients adding more noise).
	Gamma float64
	// Block is the Walsh–Hadamard block size (0: 2^14; the head's 557,824
	// values become 573,440).
	Block int
	// Beta is the conditional rounding's β (0: e^(−1/2), the DDG paper's).
	Beta float64
	// WrapProb bounds the probability that the sum wraps (0: 1e-9).
	WrapProb float64
	// NoiseMultiplier z sets the proposed per-client noise share,
	// ⌈z·C/(γ·√T)⌉ in lattice units with C the clip (Options.MaxUpdateNorm);
	// 0 proposes none (the clients' local DP-SGD carries the guarantee
	// until the distributed DP-SGD trainer lands). A client adds at least
	// what its own policy requires.
	NoiseMultiplier float64
	// PhaseTimeout bounds the adverts, the shares and the unmasking phases
	// each (0: RoundTimeout/6). The masked vectors are due PhaseTimeout
	// before the round's deadline.
	PhaseTimeout time.Duration
	// Roots is the clients' certificate authority: the coordinator
	// checks each advert against the certificate of the client that sent
	// it, which it relays to the client's neighbours.
	Roots *x509.CertPool
	// DDP, if set, makes every round one step of distributed DP-SGD
	// (package fed/ddp) instead of FedAvg of the clients' local updates.
	DDP *DDPOptions
}

// DDPOptions configure distributed DP-SGD rounds: the plan every client
// checks against its own policy, and the server's optimiser step.
type DDPOptions struct {
	// Plan is the rounds' plan; its Dim must be the model's length and
	// its Clients at least any round's roster (the wrap bound's n). Each
	// round's masking threshold is at least Plan.Threshold.
	Plan ddp.Plan
	// Server takes the server's optimiser steps (fed/ddpserver: veil
	// train's); the coordinator does not link the engine.
	Server DDPServer

	// mu guards the cached charge of a round (ddpEvent).
	mu        sync.Mutex
	event     *dp.Event
	eventPlan ddp.Plan
	eventT    int
}

// validate fills the defaults and checks o against the coordinator's
// options.
func (s *SecAggOptions) validate(o *Options) error {
	if s.Mode != secround.Masking {
		return fmt.Errorf("coordinator: secure aggregation mode %q (want %s)", s.Mode, secround.Masking)
	}
	if s.Roots == nil {
		return errors.New("coordinator: secure aggregation needs the clients' certificate authority (Roots)")
	}
	if s.MinHonest < 2 || s.MinHonest > o.MinUpdates {
		return fmt.Errorf("coordinator: the minimum honest clients T = %d must be in [2, the minimum updates %d]", s.MinHonest, o.MinUpdates)
	}
	// The coordinator never sees an update, so it cannot weigh one: the
	// survivors' sum is averaged uniformly.
	if st, err := strategy.New(o.Strategy); err == nil {
		if w, err := st.Weight(0); err != nil || w != 1 {
			return errors.New("coordinator: masking averages the surviving clients' updates uniformly (the coordinator never sees one to weigh it): use uniform weighting")
		}
	}
	if o.MinAvailable < 3 {
		return fmt.Errorf("coordinator: masking needs rounds of at least 3 clients; the minimum available is %d", o.MinAvailable)
	}
	if s.Degree < 0 || s.Threshold < 0 || s.Gamma < 0 || math.IsInf(s.Gamma, 0) || s.Block < 0 || s.NoiseMultiplier < 0 || s.PhaseTimeout < 0 {
		return errors.New("coordinator: secure aggregation settings must not be negative")
	}
	if d := s.DDP; d != nil {
		if d.Server == nil {
			return errors.New("coordinator: distributed DP-SGD needs the server's optimiser (SecAgg.DDP.Server)")
		}
		if err := d.Plan.Validate(); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		if o.Task.DP != nil {
			return errors.New("coordinator: a distributed DP-SGD round's DP is its plan (SecAgg.DDP.Plan), which each client charges: the task must state no local DP-SGD (Task.DP)")
		}
		if d.Plan.Threshold < s.MinHonest {
			return fmt.Errorf("coordinator: the distributed DP-SGD plan's threshold %d is below T = %d", d.Plan.Threshold, s.MinHonest)
		}
	}
	if s.Bits == 0 {
		s.Bits = 32
	}
	if s.Bits < 8 || s.Bits > 32 {
		return fmt.Errorf("coordinator: the modulus bits must be in [8, 32], got %d", s.Bits)
	}
	if s.Block == 0 {
		s.Block = 1 << 14
	}
	if s.Beta == 0 {
		s.Beta = math.Exp(-0.5)
	}
	if s.WrapProb == 0 {
		s.WrapProb = 1e-9
	}
	if s.PhaseTimeout == 0 {
		s.PhaseTimeout = o.RoundTimeout / 6
	}
	if 4*s.PhaseTimeout > o.RoundTimeout {
		return fmt.Errorf("coordinator: the round timeout %s leaves no time for training after three phases of %s", o.RoundTimeout, s.PhaseTimeout)
	}
	return nil
}

// graph returns k and t for a roster of n clients.
func (s *SecAggOptions) graph(n int) (k, t int) {
	k = s.Degree
	if k == 0 {
		k = n - 1
		if n > 16 {
			k = min(n-1, 2*int(math.Ceil(math.Log2(float64(n)))))
		}
	}
	k = min(k, n-1)
	if k%2 == 1 && n%2 == 1 && k < n-1 {
		k++ // as masking.Params.EffectiveDegree
	}
	t = s.Threshold
	if t == 0 {
		t = max(s.MinHonest, (k+1)/2+1)
	}
	return k, t
}

// quantConfig returns the quantisation of a round of n clients on dim
// values with clip C.
func (s *SecAggOptions) quantConfig(dim, n int, clip float64) (*fedpb.QuantConfig, error) {
	cfg := quant.Config{Dim: dim, Block: s.Block, ClipNorm: clip, Beta: s.Beta, Bits: s.Bits, Clients: n, WrapProb: s.WrapProb}
	if cfg.Block > 1<<26 || dim <= cfg.Block/2 {
		cfg.Block = 0 // one block of 2^⌈log₂ d⌉ already
	}
	noise := func(gamma float64) uint64 {
		return uint64(math.Ceil(s.NoiseMultiplier * clip / (gamma * math.Sqrt(float64(s.MinHonest)))))
	}
	gamma := s.Gamma
	if gamma == 0 {
		// The bound is (signal + noise)/γ + n: the smallest power of two
		// that keeps it within 2^(b−3).
		gamma = math.Ldexp(1, -60)
		for ; gamma < clip; gamma *= 2 {
			cfg.Gamma, cfg.Noise = gamma, noise(gamma)
			if b, err := quant.Bound(cfg); err == nil && b.Bound <= math.Ldexp(1, s.Bits-3) {
				break
			}
		}
	}
	cfg.Gamma, cfg.Noise = gamma, noise(gamma)
	if _, err := quant.New(cfg, [32]byte{}); err != nil {
		return nil, fmt.Errorf("coordinator: the round's quantisation: %w", err)
	}
	return &fedpb.QuantConfig{Dim: uint32(dim), Block: uint32(cfg.Block), Clip: clip, Gamma: gamma, Beta: cfg.Beta, Bits: uint32(cfg.Bits),
		Noise: cfg.Noise, WrapProb: cfg.WrapProb}, nil
}

// secureRound is one round's secure aggregation, driven by the
// coordinator: clients' messages come in through receive and
// receiveMasked (each stored before it is acknowledged), the loop calls
// step, Subscribe streams push what push returns, and once step reports
// the round finished, outcome gives the aggregate (or why there is none)
// and erase removes the round's messages from the state file in the
// transaction that closes it.
type secureRound interface {
	// push returns the phase message due to client after the phase
	// numbered after (0: none pushed yet), and its phase number; nil if
	// none is due.
	push(client string, after int) (*fedpb.SecAggPhase, int)
	// receive takes a phase message of client, whose verified
	// certificate is leaf.
	receive(ctx context.Context, client string, leaf *x509.Certificate, m *fedpb.SecAggMessage) error
	// maskedSize is the exact size of a masked vector's encoding.
	maskedSize() int
	// receiveMasked takes client's masked vector, with the header that
	// binds it to the round and states its DP, charging the client's
	// ledger in the transaction that stores it; it returns the ε spent.
	receiveMasked(ctx context.Context, client string, h *fedpb.UpdateHeader, payload []byte) (float64, error)
	// step moves the round on at time now: closes the phase whose
	// messages are all in or whose deadline passed. It reports whether
	// the round is finished.
	step(ctx context.Context, now time.Time) (bool, error)
	// outcome is the finished round's aggregate: the sum of the
	// survivors' decoded updates (Weight and Count their number), or
	// the reason the round failed.
	outcome() (*strategy.Sum, string)
	// erase deletes the round's stored messages.
	erase(tx *sql.Tx) error
}

// closeSecure works out the close of the finished secure round r.
func (c *Coordinator) closeSecure(r *openRound, withdrawn int) (closing, *strategy.Sum) {
	sum, reason := r.sec.outcome()
	if reason != "" || sum == nil {
		if reason == "" {
			reason = "secure aggregation: no aggregate"
		}
		return closing{state: "failed", reason: reason, withdrawn: withdrawn}, strategy.NewSum(c.model)
	}
	return c.aggregate(r, sum, sum.Count, withdrawn), sum
}
