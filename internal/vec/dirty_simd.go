//go:build goexperiment.simd && amd64

package vec

import "simd/archsimd"

// DirtyUpper leaves the upper halves of the AVX registers in use, as a
// kernel returning without VZEROUPPER or an asynchronous preemption on an
// AVX-512 processor does: for tests and benchmarks of code that must
// clear them (ClearUpper, internal/digest). It returns a sum so that the
// work is not optimised away.
//
//go:noinline
func DirtyUpper() float64 {
	a, b := [4]float64{1, 2, 3, 4}, [4]float64{5, 6, 7, 8}
	archsimd.LoadFloat64x4Slice(a[:]).Add(archsimd.LoadFloat64x4Slice(b[:])).StoreSlice(b[:])
	return b[0]
}
