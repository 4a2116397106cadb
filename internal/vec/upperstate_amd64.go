package vec

// UpperInUse reports whether the upper halves of AVX registers 0–15 (YMM
// or ZMM, XINUSE bits 2 and 6) hold anything on this thread: what
// ClearUpper clears and what makes SSE-encoded code (SHA-NI, scalar float
// code) stall. Registers 16–31 (bit 7), which SSE code cannot name and
// VZEROUPPER does not clear, are left out.
// known is false where the processor cannot tell (no XGETBV with ECX = 1,
// no AVX, or not amd64). Tests use it to check that code clears the state.
func UpperInUse() (inUse, known bool) {
	s, ok := avxStateInUse()
	if !ok || !hasAVX {
		return false, false
	}
	return s&(1<<2|1<<6) != 0, true
}
