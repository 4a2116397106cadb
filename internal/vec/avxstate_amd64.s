#include "textflag.h"

// func avxStateInUse() (inUse uint64, known bool)
TEXT ·avxStateInUse(SB), NOSPLIT, $0-9
	// CPUID leaf 0xD, sub-leaf 1: EAX bit 2 says XGETBV takes ECX = 1.
	MOVL $0xd, AX
	MOVL $1, CX
	CPUID
	TESTL $4, AX
	JZ unknown
	MOVL $1, CX
	XGETBV
	SHLQ $32, DX
	ORQ DX, AX
	MOVQ AX, inUse+0(FP)
	MOVB $1, known+8(FP)
	RET
unknown:
	MOVQ $0, inUse+0(FP)
	MOVB $0, known+8(FP)
	RET
