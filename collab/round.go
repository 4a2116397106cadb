package collab

import (
	"fmt"

	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// NoisedDimension is the number of values DP-SGD noises per step when ψ
// is bootstrapped over classes hashed-tag classes: ψ's parameters and
// φ's (the classifier trained beside ψ and then thrown away). A federated
// client that sends only ψ is charged for this mechanism, not for ψ's
// size alone.
func NoisedDimension(ψ *Psi, classes int) (int, error) {
	if classes < 2 {
		return 0, fmt.Errorf("collab: bootstrapping needs at least 2 classes, got %d", classes)
	}
	p := ψ.params.Clone()
	if _, err := loss.New(p, loss.Config{Kind: "irene", Classes: classes, Alpha: 0.9}, ψ.o.Dim); err != nil {
		return 0, fmt.Errorf("collab: φ: %w", err)
	}
	return train.NoisedDimension(p, nil), nil
}
