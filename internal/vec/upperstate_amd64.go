package vec

// UpperInUse reports whether the AVX registers' upper halves (YMM or ZMM,
// XINUSE bits 2, 6 and 7) hold anything on this thread: what ClearUpper
// clears and what makes SSE-encoded code (SHA-NI, scalar float code) stall.
// known is false where the processor cannot tell (no XGETBV with ECX = 1,
// no AVX, or not amd64). Tests use it to check that code clears the state.
func UpperInUse() (inUse, known bool) {
	s, ok := avxStateInUse()
	if !ok || !hasAVX {
		return false, false
	}
	return s&(1<<2|1<<6|1<<7) != 0, true
}
