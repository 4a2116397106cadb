package vec

// ClearUpper clears the AVX registers' upper halves (VZEROUPPER) on a
// processor with AVX, and does nothing on one without.
//
// Code that hashes or encrypts with SSE-encoded instructions (SHA-NI,
// AES-NI and carry-less multiplication in crypto/sha256 and AES-GCM) runs
// many times slower while the upper halves are dirty, and Go code cannot
// know whether they are: besides AVX kernels that return without
// VZEROUPPER, Go 1.26's asynchronous preemption restores a preempted
// goroutine's registers on an AVX-512 processor with VMOVDQU64 into
// Z0–Z31 and no VZEROUPPER after (runtime/preempt_amd64.s), which leaves
// them dirty wherever the goroutine was stopped. Measured on this
// project's machine: SHA-256 of a 2.2 MB model took 15–42 ms instead of
// 1.2 ms when started in that state (XINUSE 0xe7). Calling ClearUpper
// before each block of such work bounds the slowdown to the block a
// preemption lands in. It costs about a cycle.
func ClearUpper() {
	if hasAVX {
		vzeroupper()
	}
}

// hasAVX is whether the processor and the OS support AVX (CPUID and
// XGETBV), read once at package initialisation.
var hasAVX = cpuHasAVX()

func vzeroupper()

func cpuHasAVX() bool
