//go:build !amd64

package vec

// ClearUpper does nothing on this architecture (it clears the AVX
// registers' upper halves on amd64).
func ClearUpper() {}
