package vec

// avxStateInUse returns the processor's XINUSE bitmap (XGETBV with
// ECX = 1): bit 2 is set while the upper halves of the AVX registers
// hold anything (what VZEROUPPER clears), bits 6 and 7 the same for
// AVX-512's upper state. known is false on a processor without that form
// of XGETBV. The tests use it to check that every kernel returns with the
// upper halves clear: otherwise each SSE instruction after it (all
// scalar float code, SHA-NI) waits on the dirty state.
func avxStateInUse() (inUse uint64, known bool)
