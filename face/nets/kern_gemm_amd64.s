//go:build goexperiment.simd && amd64

#include "textflag.h"

// func kernGemm4x16AVX2(y *float32, ldy int, a *float32, lda int, kc int, panel *float32, acc bool)
//
// The 4×16 block a·panel (see kernGemm4x16): rows of a at a, a+lda, a+2·lda,
// a+3·lda (kc values each), the panel [kc][16], rows of y at stride ldy
// (strides in float32 elements). With acc the block is added to y.
// Y0–Y7 hold the block, Y8–Y9 a panel row, Y10–Y13 the broadcast values.
TEXT ·kernGemm4x16AVX2(SB), NOSPLIT, $0-49
	MOVQ    y+0(FP), DI
	MOVQ    ldy+8(FP), R8
	MOVQ    a+16(FP), SI
	MOVQ    lda+24(FP), R9
	MOVQ    kc+32(FP), CX
	MOVQ    panel+40(FP), DX
	MOVBQZX acc+48(FP), AX
	SHLQ    $2, R8
	SHLQ    $2, R9
	LEAQ    (SI)(R9*1), R10
	LEAQ    (R10)(R9*1), R11
	LEAQ    (R11)(R9*1), R12
	VXORPS  Y0, Y0, Y0
	VXORPS  Y1, Y1, Y1
	VXORPS  Y2, Y2, Y2
	VXORPS  Y3, Y3, Y3
	VXORPS  Y4, Y4, Y4
	VXORPS  Y5, Y5, Y5
	VXORPS  Y6, Y6, Y6
	VXORPS  Y7, Y7, Y7
	XORQ    BX, BX
	TESTQ   CX, CX
	JLE     done

loop:
	VMOVUPS      (DX), Y8
	VMOVUPS      32(DX), Y9
	VBROADCASTSS (SI)(BX*1), Y10
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VBROADCASTSS (R10)(BX*1), Y11
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VBROADCASTSS (R11)(BX*1), Y12
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VBROADCASTSS (R12)(BX*1), Y13
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         $64, DX
	ADDQ         $4, BX
	DECQ         CX
	JNZ          loop

done:
	LEAQ    (DI)(R8*1), R10
	LEAQ    (R10)(R8*1), R11
	LEAQ    (R11)(R8*1), R12
	TESTQ   AX, AX
	JZ      store
	VADDPS  (DI), Y0, Y0
	VADDPS  32(DI), Y1, Y1
	VADDPS  (R10), Y2, Y2
	VADDPS  32(R10), Y3, Y3
	VADDPS  (R11), Y4, Y4
	VADDPS  32(R11), Y5, Y5
	VADDPS  (R12), Y6, Y6
	VADDPS  32(R12), Y7, Y7

store:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (R10)
	VMOVUPS Y3, 32(R10)
	VMOVUPS Y4, (R11)
	VMOVUPS Y5, 32(R11)
	VMOVUPS Y6, (R12)
	VMOVUPS Y7, 32(R12)
	VZEROUPPER
	RET
