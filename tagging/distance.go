package tagging

import "math"

// sqDistScalar returns ‖a − b‖² for len(a) ≤ len(b), four independent
// sums so the loop does not wait on one accumulator.
func sqDistScalar(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		d0, d1, d2, d3 := a[i]-b[i], a[i+1]-b[i+1], a[i+2]-b[i+2], a[i+3]-b[i+3]
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < n; i++ {
		d := a[i] - b[i]
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// Distance is the Euclidean distance of two descriptors of equal length,
// the distance every threshold in thresholds.go is measured in.
func Distance(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	return math.Sqrt(float64(sqDist(a, b)))
}

// sqDistRowsScalar writes ‖q − row‖² for consecutive len(q)-value rows.
func sqDistRowsScalar(q, rows []float32, out []float32) {
	d := len(q)
	for r := range out {
		out[r] = sqDistScalar(q, rows[r*d:(r+1)*d])
	}
}
