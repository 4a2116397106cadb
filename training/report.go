package training

import (
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/train"
)

// EventKind says what an Event reports.
type EventKind int

const (
	// EventDescribe: Done of Total images of Label described.
	EventDescribe EventKind = iota
	// EventStep: step Done of Total of epoch Epoch (1-based) of Epochs,
	// with the step's Loss.
	EventStep
	// EventEpoch: epoch Epoch of Epochs finished with mean step Loss;
	// Privacy is what the weights have spent.
	EventEpoch
	// EventNote: Message says something about the run.
	EventNote
)

// Event reports progress to Options.Progress.
type Event struct {
	Kind           EventKind
	Label, Message string
	Done, Total    int
	Epoch, Epochs  int
	Loss           float64
	Privacy        train.Privacy
}

// Report is the outcome of a run (veil train --json).
type Report struct {
	Model arch.Config `json:"model"`
	Loss  string      `json:"loss"`
	// TrainSet is lfw (the development training identities) or mtfl
	// (public web faces, no identity labels: Identities is 0).
	TrainSet   string    `json:"train_set"`
	Identities int       `json:"identities"`
	Images     int       `json:"images"`
	Epochs     int       `json:"epochs"`
	Steps      int       `json:"steps"`
	LossCurve  []float64 `json:"loss_curve"`
	FinalLoss  float64   `json:"final_loss"`
	DP         bool      `json:"dp"`
	EMA        float64   `json:"ema,omitempty"`
	// PrivacyUnit is what Epsilon protects: "identity" (all the images of
	// one person) or "example" (one image). Present exactly when Epsilon
	// is.
	PrivacyUnit string `json:"privacy_unit,omitempty"`
	// PrivacyUnits is N, the number of units in the training data (people
	// or images), and SamplingQ the rate at which each was sampled.
	PrivacyUnits int     `json:"privacy_units,omitempty"`
	NoiseMult    float64 `json:"noise_multiplier,omitempty"`
	Clip         float64 `json:"clip,omitempty"`
	SamplingQ    float64 `json:"sampling_rate,omitempty"`
	// Epsilon is what the weights have spent at Delta, over every run of
	// their lineage; absent when no ε bounds them (trained on private data
	// without DP: NonPrivateSteps) or the data were public.
	Epsilon *float64 `json:"epsilon,omitempty"`
	Delta   float64  `json:"delta,omitempty"`
	// NonPrivateSteps counts steps the weights took on private data
	// without DP-SGD: their privacy loss is unbounded.
	NonPrivateSteps int `json:"non_private_steps,omitempty"`
	// BudgetEpsilon is the data set's ledger's budget, LedgerEpsilon the
	// worst ε of the run's people (or images) in it, every command on them
	// counted (at least Epsilon: a charge precedes the steps it pays for),
	// and Ledger the ledger's file.
	BudgetEpsilon float64 `json:"budget_epsilon,omitempty"`
	LedgerEpsilon float64 `json:"ledger_epsilon,omitempty"`
	Ledger        string  `json:"ledger,omitempty"`
	DevAccuracy   float64 `json:"dev_accuracy"`
	Threshold     float64 `json:"threshold"`
	// InitAccuracy is the same accuracy of the network as initialised,
	// before any step (absent when resuming): learning is measured
	// against it, since even random features score above chance.
	InitAccuracy *float64 `json:"init_accuracy,omitempty"`
	// DescriptorAccuracy is the accuracy of the head's raw input vectors
	// (descriptors or age/gender features; cosine similarity, threshold
	// from the same tuning pairs): what the head starts from.
	DescriptorAccuracy *float64 `json:"descriptor_accuracy,omitempty"`
	// Init is the checkpoint the weights started from, and FrozenBlocks
	// how many of LightFace's first blocks stayed fixed.
	Init         string `json:"init,omitempty"`
	FrozenBlocks int    `json:"frozen_blocks,omitempty"`
	// Trainable counts the parameters the optimiser (and, under DP,
	// clipping and noise) touches.
	Trainable  int     `json:"trainable_parameters"`
	Checkpoint string  `json:"checkpoint"`
	WallS      float64 `json:"wall_s"`
}
