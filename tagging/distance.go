package tagging

import (
	"math"

	"github.com/veil-privacy/veil/internal/vec"
)

// Distance is the Euclidean distance of two descriptors of equal length,
// the distance every threshold in thresholds.go is measured in (+Inf for
// descriptors of different lengths).
func Distance(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	return math.Sqrt(float64(vec.SqDist32(a, b)))
}
