/* qmatmul.h - Y = X W^T over llama.cpp's quantized weights (Q8_0, Q4_0,
 * Q4_K) with integer dot products, the activations quantized as llama.cpp
 * quantizes them for the same weights (q8_0 for Q8_0 and Q4_0, q8_K for
 * Q4_K). Kernels for AVX-512 VNNI, AVX-VNNI, AVX2 and plain C, chosen at run
 * time from cpuid; all four compute every output with the same integer sums
 * and the same float operations in the same order, so they agree bit for bit
 * with each other and whatever the batch size, row range or thread. */
#ifndef KPI_ENGINE_QMATMUL_H
#define KPI_ENGINE_QMATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/engine/kernels.h"

/* Weights are repacked at load into panels of QMM_PANEL consecutive rows.
 * Each block (32 values; 256 for Q4_K) of a panel holds the 16 rows' fp16
 * scales, then their codes 4 bytes of a row at a time: one 64-byte load
 * holds 4 inputs of all 16 rows, the shape of a VPDPBUSD against 4
 * activation bytes broadcast. Sizes match the file's (Q4_K: +3%).
 *   Q8_0 (544 bytes a block): d[16]; codes [8 groups][16 rows][4] as
 *        unsigned bytes w + 128.
 *   Q4_0 (288): d[16]; the file's nibble bytes [4 groups][16 rows][4]:
 *        a byte's low nibble is input 4g + i, its high one 16 + 4g + i.
 *   Q4_K (2368 a super-block): d[16], dmin[16], scales [8 sub-blocks][16
 *        rows], mins [4 pairs][16 rows][2], nibble bytes [4 chunks][8
 *        groups][16 rows][4]: chunk c's low nibbles are sub-block 2c, its
 *        high ones 2c + 1. */
#define QMM_PANEL 16
#define QMM_Q8_0_BLOCK 544
#define QMM_Q4_0_BLOCK 288
#define QMM_Q4_K_BLOCK 2368

enum qmm_isa { QMM_SCALAR = 0, QMM_AVX2, QMM_AVXVNNI, QMM_AVX512VNNI, QMM_ISA_COUNT };

/* The best kernel set this CPU runs (cpuid), the one in use (the best
 * unless set), and choosing one: -1 with a message in err when this CPU
 * cannot run it. Not thread-safe: set before any matmul runs. */
enum qmm_isa qmm_isa_best(void);
enum qmm_isa qmm_isa_get(void);
int qmm_isa_set(enum qmm_isa isa, char *err, size_t errlen);
bool qmm_isa_supported(enum qmm_isa isa);
/* "avx512-vnni", "avx-vnni", "avx2", "scalar"; parse returns -1 if unknown. */
const char *qmm_isa_name(enum qmm_isa isa);
int qmm_isa_parse(const char *name);

/* Bytes qmm_pack writes for a (rows, cols) matrix of a quantized type. */
size_t qmm_pack_bytes(uint32_t type, int rows, int cols);
/* Repacks W (rows of the file's blocks) into dst and describes it in p. */
void qmm_pack(struct packed_mat *p, void *dst, const void *w, uint32_t type, int rows, int cols);

/* Activation rows quantized for the kernels. Row r of the q8_0 form: cols
 * int8 codes at q0 + r * cols; per block of 32, its scale (amax / 127,
 * rounded to fp16 as llama.cpp's block_q8_0 stores it) and -8 and -128
 * times the sum of its codes (what Q4_0's and Q8_0's unsigned codes add).
 * Row r of the q8_K form: codes at qk + r * cols; per 256, the scale; per
 * 32, the sum of the codes. */
struct qmm_act {
	int nb, cols;
	int8_t *q0;
	float *d0;
	int32_t *n8, *n128;
	int8_t *qk;
	float *dk;
	int16_t *sk;
};

enum { QMM_FORM_Q8_0 = 1, QMM_FORM_Q8_K = 2 };
/* The activation form a weight type's kernel reads (0: not a quantized type). */
unsigned qmm_form(uint32_t type);

/* Scratch for both forms of up to nb rows of up to cols values (cols a
 * multiple of 256). */
size_t qmm_act_bytes(int nb, int cols);
void qmm_act_init(struct qmm_act *a, void *buf, int nb, int cols);
/* Quantizes rows [r0, r1) of x (row stride ldx, a->cols values) into the
 * forms asked; set a->nb and a->cols first. Rows are independent: split
 * them over threads freely. */
void qmm_act_quantize(struct qmm_act *a, unsigned forms, const float *x, int ldx, int r0, int r1);

/* Y[b][o] (+)= sum_i W[o][i] * X[xb + b][i] for rows o in [o0, o1) and the
 * nb activation rows from xb; Y is (nb, ldy). Row ranges should start and
 * end on panel boundaries (the whole panel is computed either way); side's
 * lines are fetched into L2 as it goes (NULL: none). */
void qmm_rows(float *y, int ldy, const struct packed_mat *w, const struct qmm_act *x, int xb, int nb,
	      int o0, int o1, bool accumulate, struct fetch_list *side);

#endif
