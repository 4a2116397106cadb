//go:build goexperiment.simd && amd64

#include "textflag.h"

// func kernGemm6x16AVX2(y *float32, ldy int, a *float32, lda int, kc int, panel *float32, acc bool)
//
// The 6×16 block a·panel (see kernGemmBlock): rows of a at a + r·lda for
// r = 0..5 (kc values each), the panel [kc][16], rows of y at stride ldy
// (strides in float32 elements). With acc the block is added to y.
// Y0–Y11 hold the block (twelve independent chains cover the fused
// multiply-add latency), Y12–Y13 a panel row, Y14–Y15 broadcast values.
TEXT ·kernGemm6x16AVX2(SB), NOSPLIT, $0-49
	MOVQ   y+0(FP), DI
	MOVQ   ldy+8(FP), R8
	MOVQ   a+16(FP), SI
	MOVQ   lda+24(FP), R9
	MOVQ   kc+32(FP), CX
	MOVQ   panel+40(FP), DX
	SHLQ   $2, R8
	SHLQ   $2, R9
	LEAQ   (SI)(R9*1), R10
	LEAQ   (R10)(R9*1), R11
	LEAQ   (R11)(R9*1), R12
	LEAQ   (R12)(R9*1), R13
	LEAQ   (R13)(R9*1), AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ   BX, BX
	TESTQ  CX, CX
	JLE    done

loop:
	VMOVUPS      (DX), Y12
	VMOVUPS      32(DX), Y13
	VBROADCASTSS (SI)(BX*1), Y14
	VBROADCASTSS (R10)(BX*1), Y15
	VFMADD231PS  Y12, Y14, Y0
	VFMADD231PS  Y13, Y14, Y1
	VFMADD231PS  Y12, Y15, Y2
	VFMADD231PS  Y13, Y15, Y3
	VBROADCASTSS (R11)(BX*1), Y14
	VBROADCASTSS (R12)(BX*1), Y15
	VFMADD231PS  Y12, Y14, Y4
	VFMADD231PS  Y13, Y14, Y5
	VFMADD231PS  Y12, Y15, Y6
	VFMADD231PS  Y13, Y15, Y7
	VBROADCASTSS (R13)(BX*1), Y14
	VBROADCASTSS (AX)(BX*1), Y15
	VFMADD231PS  Y12, Y14, Y8
	VFMADD231PS  Y13, Y14, Y9
	VFMADD231PS  Y12, Y15, Y10
	VFMADD231PS  Y13, Y15, Y11
	ADDQ         $64, DX
	ADDQ         $4, BX
	DECQ         CX
	JNZ          loop

done:
	LEAQ    (DI)(R8*1), R10
	LEAQ    (R10)(R8*1), R11
	LEAQ    (R11)(R8*1), R12
	LEAQ    (R12)(R8*1), R13
	LEAQ    (R13)(R8*1), AX
	MOVBQZX acc+48(FP), CX
	TESTQ   CX, CX
	JZ      store
	VADDPS  (DI), Y0, Y0
	VADDPS  32(DI), Y1, Y1
	VADDPS  (R10), Y2, Y2
	VADDPS  32(R10), Y3, Y3
	VADDPS  (R11), Y4, Y4
	VADDPS  32(R11), Y5, Y5
	VADDPS  (R12), Y6, Y6
	VADDPS  32(R12), Y7, Y7
	VADDPS  (R13), Y8, Y8
	VADDPS  32(R13), Y9, Y9
	VADDPS  (AX), Y10, Y10
	VADDPS  32(AX), Y11, Y11

store:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (R10)
	VMOVUPS Y3, 32(R10)
	VMOVUPS Y4, (R11)
	VMOVUPS Y5, 32(R11)
	VMOVUPS Y6, (R12)
	VMOVUPS Y7, 32(R12)
	VMOVUPS Y8, (R13)
	VMOVUPS Y9, 32(R13)
	VMOVUPS Y10, (AX)
	VMOVUPS Y11, 32(AX)
	VZEROUPPER
	RET
