// Package record holds the plain records a training run keeps with its
// weights: the privacy they have spent (Privacy, in a Unit) and the
// optimiser state a run resumes from (State). The trainer (nn/train) fills
// them; checkpoints (nn/checkpoint) store them without importing the
// trainer.
package record

// Unit is what DP-SGD's adjacency protects: the data sets an (ε, δ)
// guarantee compares differ by one Unit.
type Unit string

const (
	// UnitExample: neighbouring data sets differ by one example (one
	// image). On face data a person with m images is protected only at
	// group-privacy cost (roughly m·ε).
	UnitExample Unit = "example"
	// UnitIdentity: neighbouring data sets differ by all the examples of
	// one person. The trainer Poisson-samples people, not images, and clips
	// the sum of each sampled person's gradients; the data must implement
	// the trainer's Identified.
	UnitIdentity Unit = "identity"
)

// Privacy is the privacy a model's weights have spent so far. It is saved
// in checkpoints and travels with the weights across resumed runs.
type Privacy struct {
	// Unit is the privacy unit ε refers to ("" in checkpoints written
	// before units existed, which were all example-level).
	Unit            Unit    `json:"unit,omitempty"`
	NoiseMultiplier float64 `json:"noise_multiplier"`
	Clip            float64 `json:"clip"`
	SamplingRate    float64 `json:"sampling_rate"`
	// Steps counts DP-SGD steps.
	Steps int     `json:"steps"`
	Delta float64 `json:"delta"`
	// Epsilon is ε at Delta of the Steps DP-SGD steps, by package dp's RDP
	// accountant of the mechanism that ran (dp.DPSGD.Event). It bounds what
	// the weights reveal only when Bounded.
	Epsilon float64 `json:"epsilon"`
	// Mechanism names the mechanism the steps released, with its trust
	// assumption, when it is not the trainer's own central DP-SGD ("");
	// e.g. distributed DP-SGD under secure aggregation (package fed/ddp),
	// whose ε assumes enough honest clients in every sum.
	Mechanism string `json:"mechanism,omitempty"`
	// NonPrivateSteps counts optimiser steps taken without DP-SGD, in this
	// run or in any run the weights were resumed from. It never decreases:
	// such steps may have seen private data with no noise, so the weights
	// carry no DP guarantee any more, and a DP-SGD run refuses to resume
	// from them (train.Trainer.Restore). Whether those data were public is
	// the caller's record (checkpoint.Header.Public), not the trainer's.
	NonPrivateSteps int `json:"non_private_steps,omitempty"`
}

// Bounded reports whether Epsilon bounds the privacy loss of the weights:
// every step they took was a DP-SGD step. A report of Epsilon when Bounded
// is false must say that ε is unbounded.
func (p Privacy) Bounded() bool { return p.NonPrivateSteps == 0 }

// State is the optimiser state needed to resume exactly.
type State struct {
	Step    int
	Privacy Privacy
	// M and V are the first and second moments (V only for Adam), one per
	// parameter in declaration order.
	M, V [][]float32
	// EMA is the parameters' moving average (only with train.Options.EMA).
	EMA [][]float32
}
