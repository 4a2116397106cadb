//go:build !amd64

package vec

// UpperInUse reports false, false: there is no AVX state on this
// architecture (on amd64 it reports whether the AVX registers' upper
// halves are in use).
func UpperInUse() (inUse, known bool) { return false, false }
