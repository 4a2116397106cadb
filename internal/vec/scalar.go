package vec

// dotScalar returns Σ a[i]·b[i] with four accumulators (len(b) ≥ len(a)).
func dotScalar(a, b []float64) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpyScalar adds alpha·x to y.
func axpyScalar(alpha float64, x, y []float64) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// axpyWidenScalar adds alpha·float64(x[i]) to y[i].
func axpyWidenScalar(alpha float64, x []float32, y []float64) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * float64(v)
	}
}

// sqNormWidenScalar returns Σ float64(x[i])² with one running sum.
func sqNormWidenScalar(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

// sqDistScalar returns ‖a − b‖² (len(b) ≥ len(a)).
func sqDistScalar(a, b []float64) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		d0, d1, d2, d3 := a[i]-b[i], a[i+1]-b[i+1], a[i+2]-b[i+2], a[i+3]-b[i+3]
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < len(a); i++ {
		d := a[i] - b[i]
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// sqDist32Scalar returns ‖a − b‖² for len(a) ≤ len(b), four independent
// sums so the loop does not wait on one accumulator.
func sqDist32Scalar(a, b []float32) float32 {
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

// sqDistRows32Scalar writes ‖q − row‖² for consecutive len(q)-value rows.
func sqDistRows32Scalar(q, rows []float32, out []float32) {
	d := len(q)
	for r := range out {
		out[r] = sqDist32Scalar(q, rows[r*d:(r+1)*d])
	}
}

// gemmScalar adds Σ_{kk∈[k0,k1)} A[i][kk]·B[kk][j] to C[i][j].
func gemmScalar(c, a, b []float64, i, j, k0, k1, k, p int) {
	s := c[i*p+j]
	for kk := k0; kk < k1; kk++ {
		s += a[i*k+kk] * b[kk*p+j]
	}
	c[i*p+j] = s
}

// gemm32Scalar adds Σ_{kk∈[k0,k1)} A[i][kk]·B[kk][j] to C[i][j] in float32.
func gemm32Scalar(c, a, b []float32, i, j, k0, k1, k, p int) {
	s := c[i*p+j]
	for kk := k0; kk < k1; kk++ {
		s += a[i*k+kk] * b[kk*p+j]
	}
	c[i*p+j] = s
}

// dot32Scalar is the portable float32 inner product, four accumulators
// wide.
func dot32Scalar(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
