/* qmatmul_x86.h - the x86 integer kernels of qmatmul.c, included once per
 * instruction set: QMM_V = 3 (AVX-512 VNNI), 2 (AVX-VNNI) or 1 (AVX2), under the
 * matching #pragma GCC target. A vector holds a whole 16-row panel (AVX-512)
 * or half of one (8 rows); each output row lives in one 32-bit lane. */

#if QMM_V == 3
#define U 16
#define VI __m512i
#define VF __m512
#define SFX(n) n##_avx512vnni
#define vzero_i() _mm512_setzero_si512()
#define vzero_f() _mm512_setzero_ps()
#define vload_i(p) _mm512_loadu_si512((const void *)(p))
#define vset1_i(v) _mm512_set1_epi32(v)
#define vset1_i8(v) _mm512_set1_epi8(v)
#define vset1_f(v) _mm512_set1_ps(v)
#define vand(a, b) _mm512_and_si512(a, b)
#define vsrl16(a, n) _mm512_srli_epi16(a, n)
#define vadd32(a, b) _mm512_add_epi32(a, b)
#define vmullo32(a, b) _mm512_mullo_epi32(a, b)
#define vcvt(a) _mm512_cvtepi32_ps(a)
#define vmul(a, b) _mm512_mul_ps(a, b)
#define vadd_f(a, b) _mm512_add_ps(a, b)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vfnma(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define vcvtph(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define vu8_i32(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define vu8_i16(p) _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(p)))
#define vstore_f(p, v) _mm512_storeu_ps(p, v)
#define vload_f(p) _mm512_loadu_ps(p)
#define vdpbusd(acc, u, s) _mm512_dpbusd_epi32(acc, u, s)
#define vdpwssd(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define NUMAX 4
#define BMAX32 8 /* Q8_0, Q4_0: batch rows per pass of one panel */
#define BMAXK 6  /* Q4_K: two partial sums per batch row */
#else
#define U 8
#define VI __m256i
#define VF __m256
#define vzero_i() _mm256_setzero_si256()
#define vzero_f() _mm256_setzero_ps()
#define vload_i(p) _mm256_loadu_si256((const __m256i *)(p))
#define vset1_i(v) _mm256_set1_epi32(v)
#define vset1_i8(v) _mm256_set1_epi8(v)
#define vset1_f(v) _mm256_set1_ps(v)
#define vand(a, b) _mm256_and_si256(a, b)
#define vsrl16(a, n) _mm256_srli_epi16(a, n)
#define vadd32(a, b) _mm256_add_epi32(a, b)
#define vmullo32(a, b) _mm256_mullo_epi32(a, b)
#define vcvt(a) _mm256_cvtepi32_ps(a)
#define vmul(a, b) _mm256_mul_ps(a, b)
#define vadd_f(a, b) _mm256_add_ps(a, b)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vfnma(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define vcvtph(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define vu8_i32(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define vu8_i16(p) _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p)))
#define vstore_f(p, v) _mm256_storeu_ps(p, v)
#define vload_f(p) _mm256_loadu_ps(p)
#define NUMAX 4
#define BMAX32 4
#define BMAXK 3
#if QMM_V == 2
#define SFX(n) n##_avxvnni
#define vdpbusd(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define vdpwssd(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#else
#define SFX(n) n##_avx2
#define QMM_NO_VNNI 1
/* AVX2 has no 4-way byte dot product: VPMADDUBSW (pairs into int16,
 * saturating) then VPMADDWD. Codes and activations are kept small enough
 * that nothing saturates (see the kernels). */
#define vdpwssd(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#endif
#endif
#define UP (QMM_PANEL / U) /* vectors per panel */

/* Lanes [lo, hi) of v into d (added to d when accumulating). */
static inline __attribute__((always_inline)) void SFX(store_lanes)(float *d, VF v, int lo, int hi,
								    bool accumulate)
{
	lo = lo < 0 ? 0 : lo;
	hi = hi > U ? U : hi;
	if (hi <= lo)
		return;
	if (lo == 0 && hi == U) {
		vstore_f(d, accumulate ? vadd_f(vload_f(d), v) : v);
		return;
	}
	float t[U];
	vstore_f(t, v);
	for (int l = lo; l < hi; l++)
		d[l] = accumulate ? d[l] + t[l] : t[l];
}

/* One unit (vector of rows) of the matrix: its panel's first byte and which
 * vector of the panel it is. */
#define UNIT_SETUP(NU)                                                                  \
	const uint8_t *ub[NUMAX];                                                       \
	int uh[NUMAX];                                                                  \
	for (int u = 0; u < (NU); u++) {                                                \
		ub[u] = (const uint8_t *)w->data + (size_t)((u0 + u) / UP) * pstride;   \
		uh[u] = (u0 + u) % UP;                                                  \
	}

#define SIDE_FETCH()                                                                    \
	if (side && side->i < side->n) {                                                \
		_mm_prefetch(side->ptr[side->i] + side->off, _MM_HINT_T1);               \
		if ((side->off += 64) >= side->len) {                                   \
			side->off = 0;                                                  \
			side->i++;                                                      \
		}                                                                       \
	}

/* Q8_0 (Q4 = 0) and Q4_0 (Q4 = 1): NU units x B batch rows from xb. Per block
 * and output the integer sum of code x activation (Q4_0's codes minus 8,
 * Q8_0's as signed) becomes one float, times d_w * d_x, added with one FMA. */
static inline __attribute__((always_inline)) void
SFX(mk32)(float *y, int ldy, const struct packed_mat *w, const int Q4, const struct qmm_act *x, int xb,
	  int u0, const int NU, const int B, int o0, int o1, bool accumulate, struct fetch_list *side)
{
	const int cols = w->cols, nblk = cols / 32;
	const size_t bb = Q4 ? QMM_Q4_0_BLOCK : QMM_Q8_0_BLOCK, pstride = (size_t)nblk * bb;
	UNIT_SETUP(NU)
	VF acc[NUMAX][8];
	for (int u = 0; u < NU; u++)
		for (int j = 0; j < B; j++)
			acc[u][j] = vzero_f();
	const VI m4 = vset1_i8(0x0F);
#ifdef QMM_NO_VNNI
	const VI ones16 = _mm256_set1_epi16(1), bias = vset1_i8((char)0x80);
#endif
	for (int k = 0; k < nblk; k++) {
		SIDE_FETCH()
		for (int u = 0; u < NU; u++) {
			const uint8_t *blk = ub[u] + (size_t)k * bb;
			const uint8_t *qs = blk + 32 + uh[u] * U * 4;
			for (int l = 0; l < (int)bb; l += 64)
				_mm_prefetch((const char *)blk + QMM_PF + l, _MM_HINT_T0);
			VF dw = vcvtph(blk + uh[u] * U * 2);
			/* wv[g]: inputs 4g..4g+3 of every row of the unit */
			VI wv[8];
			if (Q4) {
				for (int g = 0; g < 4; g++) {
					VI raw = vload_i(qs + 64 * g);
					wv[g] = vand(raw, m4);
					wv[4 + g] = vand(vsrl16(raw, 4), m4);
				}
			} else {
				for (int g = 0; g < 8; g++)
					wv[g] = vload_i(qs + 64 * g);
			}
#ifdef QMM_NO_VNNI
			/* Q8_0: unsigned w + 128 times a code up to 127 overflows
			 * VPMADDUBSW's int16 pairs; |w| times the code with w's
			 * sign moved onto it does not (2 * 128 * 127 < 32768) */
			VI aw[8];
			if (!Q4)
				for (int g = 0; g < 8; g++) {
					wv[g] = _mm256_xor_si256(wv[g], bias);
					aw[g] = _mm256_abs_epi8(wv[g]);
				}
#endif
			for (int j = 0; j < B; j++) {
				const size_t r = (size_t)xb + j;
				const int8_t *xq = x->q0 + r * cols + 32 * k;
				VI s;
#ifdef QMM_NO_VNNI
				if (Q4) {
					/* codes 0..15 x 127: 8 pair sums stay under 32768 */
					VI t = _mm256_maddubs_epi16(wv[0], vset1_i(ld32(xq)));
					for (int g = 1; g < 8; g++)
						t = _mm256_add_epi16(t, _mm256_maddubs_epi16(wv[g], vset1_i(ld32(xq + 4 * g))));
					s = vadd32(vset1_i(x->n8[r * nblk + k]), _mm256_madd_epi16(t, ones16));
				} else {
					s = vzero_i();
					for (int g = 0; g < 8; g++) {
						VI sx = _mm256_sign_epi8(vset1_i(ld32(xq + 4 * g)), wv[g]);
						s = vadd32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(aw[g], sx), ones16));
					}
				}
#else
				s = vset1_i(Q4 ? x->n8[r * nblk + k] : x->n128[r * nblk + k]);
				for (int g = 0; g < 8; g++)
					s = vdpbusd(s, wv[g], vset1_i(ld32(xq + 4 * g)));
#endif
				acc[u][j] = vfma(vcvt(s), vmul(dw, vset1_f(x->d0[r * nblk + k])), acc[u][j]);
			}
		}
	}
	for (int u = 0; u < NU; u++)
		for (int j = 0; j < B; j++) {
			int row0 = (u0 + u) * U;
			SFX(store_lanes)(y + (size_t)j * ldy + row0, acc[u][j], o0 - row0, o1 - row0, accumulate);
		}
}

/* Q4_K: NU units x B batch rows. Per super-block and output: the integer
 * sum over sub-blocks of scale x (codes . activation codes), and of min x
 * (sum of the sub-block's activation codes); then two FMAs, d_w * d_x and
 * dmin_w * d_x. */
static inline __attribute__((always_inline)) void
SFX(mkK)(float *y, int ldy, const struct packed_mat *w, const struct qmm_act *x, int xb, int u0,
	 const int NU, const int B, int o0, int o1, bool accumulate, struct fetch_list *side)
{
	const int cols = w->cols, nsb = cols / 256, n32 = cols / 32;
	const size_t pstride = (size_t)nsb * QMM_Q4_K_BLOCK;
	UNIT_SETUP(NU)
	VF acc[NUMAX][8];
	for (int u = 0; u < NU; u++)
		for (int j = 0; j < B; j++)
			acc[u][j] = vzero_f();
	const VI m4 = vset1_i8(0x0F);
	for (int k = 0; k < nsb; k++) {
		SIDE_FETCH()
		for (int u = 0; u < NU; u++) {
			const uint8_t *blk = ub[u] + (size_t)k * QMM_Q4_K_BLOCK;
			const int h = uh[u];
			VF dv = vcvtph(blk + h * U * 2), mv = vcvtph(blk + 32 + h * U * 2);
			VI sumi[8];
			for (int j = 0; j < B; j++)
				sumi[j] = vzero_i();
			for (int c = 0; c < 4; c++) {
				VI sc0 = vu8_i32(blk + 64 + (2 * c) * 16 + h * U);
				VI sc1 = vu8_i32(blk + 64 + (2 * c + 1) * 16 + h * U);
#ifdef QMM_NO_VNNI
				/* the scale in both int16 halves of its row's lane:
				 * VPMADDWD then scales and adds a row's two pair sums */
				sc0 = _mm256_or_si256(sc0, _mm256_slli_epi32(sc0, 16));
				sc1 = _mm256_or_si256(sc1, _mm256_slli_epi32(sc1, 16));
#endif
				const uint8_t *qs = blk + 320 + c * 8 * 64 + h * U * 4;
				VI a0[8], a1[8];
				for (int j = 0; j < B; j++)
					a0[j] = a1[j] = vzero_i();
				for (int g = 0; g < 8; g++) {
					_mm_prefetch((const char *)qs + 64 * g + QMM_PF, _MM_HINT_T0);
					VI raw = vload_i(qs + 64 * g);
					VI lo = vand(raw, m4), hi = vand(vsrl16(raw, 4), m4);
					for (int j = 0; j < B; j++) {
						const int8_t *xq = x->qk + ((size_t)xb + j) * cols + 256 * k + 64 * c + 4 * g;
#ifdef QMM_NO_VNNI
						/* codes 0..15: 8 groups of pair sums stay in int16 */
						a0[j] = _mm256_add_epi16(a0[j], _mm256_maddubs_epi16(lo, vset1_i(ld32(xq))));
						a1[j] = _mm256_add_epi16(a1[j], _mm256_maddubs_epi16(hi, vset1_i(ld32(xq + 32))));
#else
						a0[j] = vdpbusd(a0[j], lo, vset1_i(ld32(xq)));
						a1[j] = vdpbusd(a1[j], hi, vset1_i(ld32(xq + 32)));
#endif
					}
				}
				for (int j = 0; j < B; j++)
#ifdef QMM_NO_VNNI
					sumi[j] = vadd32(sumi[j], vadd32(_mm256_madd_epi16(a0[j], sc0),
									 _mm256_madd_epi16(a1[j], sc1)));
#else
					sumi[j] = vadd32(sumi[j], vadd32(vmullo32(a0[j], sc0), vmullo32(a1[j], sc1)));
#endif
			}
			VI mz[4];
			for (int p = 0; p < 4; p++)
				mz[p] = vu8_i16(blk + 192 + p * 32 + h * U * 2);
			for (int j = 0; j < B; j++) {
				const size_t r = (size_t)xb + j;
				const int16_t *sk = x->sk + r * n32 + 8 * k;
				VI summ = vzero_i();
				for (int p = 0; p < 4; p++)
					summ = vdpwssd(summ, mz[p], vset1_i(ld32(sk + 2 * p)));
				VF dx = vset1_f(x->dk[r * nsb + k]);
				acc[u][j] = vfma(vcvt(sumi[j]), vmul(dv, dx), acc[u][j]);
				acc[u][j] = vfnma(vcvt(summ), vmul(mv, dx), acc[u][j]);
			}
		}
	}
	for (int u = 0; u < NU; u++)
		for (int j = 0; j < B; j++) {
			int row0 = (u0 + u) * U;
			SFX(store_lanes)(y + (size_t)j * ldy + row0, acc[u][j], o0 - row0, o1 - row0, accumulate);
		}
}

#define QCASE(NU, B)                                                                                  \
	case (NU) * 16 + (B):                                                                         \
		if (type == GGML_Q4_K)                                                                \
			SFX(mkK)(y + (size_t)b * ldy, ldy, w, x, xb + b, u, NU, B, o0, o1, accumulate, side); \
		else if (type == GGML_Q4_0)                                                           \
			SFX(mk32)(y + (size_t)b * ldy, ldy, w, 1, x, xb + b, u, NU, B, o0, o1, accumulate, side); \
		else                                                                                  \
			SFX(mk32)(y + (size_t)b * ldy, ldy, w, 0, x, xb + b, u, NU, B, o0, o1, accumulate, side); \
		break;

static void SFX(qmm_rows)(float *y, int ldy, const struct packed_mat *w, const struct qmm_act *x, int xb,
			  int nb, int o0, int o1, bool accumulate, struct fetch_list *side)
{
	const uint32_t type = w->type;
	const int bmax = type == GGML_Q4_K ? BMAXK : BMAX32;
	/* several units while the batch is too small to give the dot-product
	 * chains independent work, one when the batch rows do */
	const int rr = nb == 1 ? 4 : nb == 2 ? 2 : 1;
	const int u_end = (o1 + U - 1) / U;
	for (int u = o0 / U; u < u_end;) {
		int left = u_end - u, NU = left >= rr ? rr : left >= 2 && rr >= 2 ? 2 : 1;
		int passes = NU > 1 ? 1 : (nb + bmax - 1) / bmax;
		for (int q = 0, b = 0; q < passes; q++) {
			int B = NU > 1 ? nb : (nb - b) / (passes - q);
			switch (NU * 16 + B) {
				QCASE(4, 1)
				QCASE(2, 1) QCASE(2, 2)
				QCASE(1, 1) QCASE(1, 2) QCASE(1, 3)
#if U == 16
				QCASE(1, 4) QCASE(1, 5) QCASE(1, 6) QCASE(1, 7) QCASE(1, 8)
#else
				QCASE(1, 4)
#endif
			}
			b += B;
		}
		u += NU;
	}
}

#undef U
#undef VI
#undef VF
#undef SFX
#undef vzero_i
#undef vzero_f
#undef vload_i
#undef vset1_i
#undef vset1_i8
#undef vset1_f
#undef vand
#undef vsrl16
#undef vadd32
#undef vmullo32
#undef vcvt
#undef vmul
#undef vadd_f
#undef vfma
#undef vfnma
#undef vcvtph
#undef vu8_i32
#undef vu8_i16
#undef vstore_f
#undef vload_f
#undef vdpbusd
#undef vdpwssd
#undef NUMAX
#undef BMAX32
#undef BMAXK
#undef UP
#undef UNIT_SETUP
#undef SIDE_FETCH
#undef QCASE
#undef QMM_NO_VNNI
