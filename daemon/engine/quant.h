/* quant.h - llama.cpp's block formats Q8_0, Q4_0 and Q4_K, bit for bit as
 * ggml-common.h lays them out: their dequantization (the embedding lookup,
 * the tests' cross-check) and the quantizers --make-model writes files with. */
#ifndef KPI_ENGINE_QUANT_H
#define KPI_ENGINE_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* Q8_0: 32 values x[i] = d * qs[i]. */
#define QK8_0 32
struct block_q8_0 {
	uint16_t d; /* fp16 */
	int8_t qs[QK8_0];
};

/* Q4_0: 32 values; byte j holds value j in its low nibble and value j + 16
 * in its high one, each q in 0..15 meaning (q - 8) * d. */
#define QK4_0 32
struct block_q4_0 {
	uint16_t d; /* fp16 */
	uint8_t qs[QK4_0 / 2];
};

/* Q4_K: a 256-value super-block of 8 sub-blocks of 32, sub-block j with a
 * 6-bit scale sc_j and min m_j (packed into scales[12], see
 * q4k_scale_min): value = d * sc_j * q - dmin * m_j, q in 0..15. The
 * nibbles come in 4 chunks of 32 bytes: chunk c holds sub-block 2c in its
 * low nibbles and sub-block 2c + 1 in its high ones. */
#define QK_K 256
#define K_SCALE_SIZE 12
struct block_q4_K {
	uint16_t d;    /* fp16 scale of the scales */
	uint16_t dmin; /* fp16 scale of the mins */
	uint8_t scales[K_SCALE_SIZE];
	uint8_t qs[QK_K / 2];
};

_Static_assert(sizeof(struct block_q8_0) == 34, "block_q8_0 is llama.cpp's 34 bytes");
_Static_assert(sizeof(struct block_q4_0) == 18, "block_q4_0 is llama.cpp's 18 bytes");
_Static_assert(sizeof(struct block_q4_K) == 144, "block_q4_K is llama.cpp's 144 bytes");

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block:
 * sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins),
 * sub-blocks 4-7 in the nibbles of bytes 8-11 with their top 2 bits in the
 * top bits of bytes 0-3 (scales) and 4-7 (mins). */
static inline void q4k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
		*m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
	}
}

/* n values (a whole number of the type's blocks) of a row of type (F32,
 * F16, Q8_0, Q4_0, Q4_K) into floats. */
void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* n floats into a row of type (same types; n a whole number of blocks).
 * Deterministic, portable C: the same input gives the same bytes on every
 * machine. Q8_0 and Q4_0 round as llama.cpp's reference quantizers do; Q4_K
 * fits each sub-block's scale and min by weighted least squares over a
 * small grid of candidate scales, as llama.cpp's make_qkx2_quants does. */
void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif
