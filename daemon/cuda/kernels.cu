/* kernels.cu - device math of the CUDA backend: embedding, RMSNorm, RoPE,
 * KV-cache write, SwiGLU and the paged-attention kernels (plain and
 * 512-token-partitioned with a reduce). fp16/bf16 KV, fp32 accumulation. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "daemon/cuda/kernels.h"

#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define MAX_GROUP KPI_CUDA_MAX_GROUP

static int launched(void)
{
	return (int)cudaGetLastError();
}

/* ---- element helpers ------------------------------------------------------ */

__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x)
{
	return __float2bfloat16_rn(x);
}

/* 8 packed 16-bit values (one 16-byte load) to floats */
__device__ __forceinline__ void unpack8(const uint4 &u, float *f, __half)
{
	const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 t = __half22float2(h[i]);
		f[2 * i] = t.x, f[2 * i + 1] = t.y;
	}
}
__device__ __forceinline__ void unpack8(const uint4 &u, float *f, __nv_bfloat16)
{
	const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 t = __bfloat1622float2(h[i]);
		f[2 * i] = t.x, f[2 * i + 1] = t.y;
	}
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
	for (int o = 16; o; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* ---- embedding, norm, rope, kv write, swiglu ------------------------------ */

__global__ void embed_kernel(float *x, const void *table, int wt, const int32_t *tokens, int dim)
{
	int t = blockIdx.x;
	size_t row = (size_t)tokens[t] * dim;
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		x[(size_t)t * dim + i] = wt == KPI_W_F16 ? __half2float(((const __half *)table)[row + i])
						       : ((const float *)table)[row + i];
}

extern "C" int kpi_cuda_embed(float *x, const void *table, enum kpi_wtype wt, const int32_t *tokens,
			      int T, int dim, kpi_stream_t st)
{
	embed_kernel<<<T, 256, 0, st>>>(x, table, (int)wt, tokens, dim);
	return launched();
}

/* One block per row; the sum of squares in fp32 like the CPU reference. */
__global__ void rmsnorm_kernel(float *out, __half *out16, const float *x, const float *w, int dim,
			       float eps)
{
	__shared__ float part[32];
	const float *xr = x + (size_t)blockIdx.x * dim;
	float ss = 0;
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		ss += xr[i] * xr[i];
	ss = warp_sum(ss);
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x >> 5] = ss;
	__syncthreads();
	if (threadIdx.x < 32) {
		float v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
		v = warp_sum(v);
		if (threadIdx.x == 0)
			part[0] = v;
	}
	__syncthreads();
	float inv = rsqrtf(part[0] / dim + eps);
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float y = xr[i] * inv * w[i];
		if (out)
			out[(size_t)blockIdx.x * dim + i] = y;
		if (out16)
			out16[(size_t)blockIdx.x * dim + i] = __float2half_rn(y);
	}
}

extern "C" int kpi_cuda_rmsnorm(float *out, void *out16, const float *x, const float *w, int T,
				int dim, float eps, kpi_stream_t st)
{
	rmsnorm_kernel<<<T, 256, 0, st>>>(out, (__half *)out16, x, w, dim, eps);
	return launched();
}

__global__ void to_f16_kernel(__half *o, const float *x, long n)
{
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		o[i] = __float2half_rn(x[i]);
}

extern "C" int kpi_cuda_to_f16(void *out16, const float *x, long n, kpi_stream_t st)
{
	long blocks = (n + 255) / 256;
	to_f16_kernel<<<(int)(blocks < 65535 ? blocks : 65535), 256, 0, st>>>((__half *)out16, x, n);
	return launched();
}

/* Adjacent pairs (2i, 2i+1) rotated by the table's angle for (pos, i). */
__global__ void rope_kernel(float *q, float *k, const float *cs, const int32_t *tok_pos,
			    int n_heads, int n_kv, int hd)
{
	int t = blockIdx.x, half = hd / 2;
	const float *c = cs + (size_t)tok_pos[t] * hd;
	int pairs = (n_heads + n_kv) * half;
	for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
		int h = p / half, i = p % half;
		float *v = h < n_heads ? q + ((size_t)t * n_heads + h) * hd
				       : k + ((size_t)t * n_kv + (h - n_heads)) * hd;
		float co = c[2 * i], si = c[2 * i + 1], a = v[2 * i], b = v[2 * i + 1];
		v[2 * i] = a * co - b * si;
		v[2 * i + 1] = a * si + b * co;
	}
}

extern "C" int kpi_cuda_rope(float *q, float *k, const float *cs, const int32_t *tok_pos, int T,
			     int n_heads, int n_kv, int hd, kpi_stream_t st)
{
	rope_kernel<<<T, 128, 0, st>>>(q, k, cs, tok_pos, n_heads, n_kv, hd);
	return launched();
}

template <typename KV>
__global__ void kv_write_kernel(KV *kc, KV *vc, const float *k, const float *v, const int32_t *tok_seq,
				const int32_t *tok_pos, const int32_t *bt, int bt_stride, int n_kv, int hd,
				int bs)
{
	int t = blockIdx.x, pos = tok_pos[t];
	int32_t blk = bt[(size_t)tok_seq[t] * bt_stride + pos / bs];
	for (int e = threadIdx.x; e < n_kv * hd; e += blockDim.x) {
		int g = e / hd, d = e % hd;
		size_t off = (((size_t)blk * n_kv + g) * bs + pos % bs) * hd + d;
		kc[off] = from_f<KV>(k[(size_t)t * n_kv * hd + e]);
		vc[off] = from_f<KV>(v[(size_t)t * n_kv * hd + e]);
	}
}

extern "C" int kpi_cuda_kv_write(const struct kpi_kv_dev *kv, const float *k, const float *v,
				 const struct kpi_step_dev *s, kpi_stream_t st)
{
	if (kv->dtype == KPI_KV_BF16)
		kv_write_kernel<__nv_bfloat16><<<s->n_tokens, 128, 0, st>>>(
			(__nv_bfloat16 *)kv->k, (__nv_bfloat16 *)kv->v, k, v, s->tok_seq, s->tok_pos,
			s->block_tables, s->bt_stride, kv->n_kv, kv->head_dim, kv->block_size);
	else
		kv_write_kernel<__half><<<s->n_tokens, 128, 0, st>>>(
			(__half *)kv->k, (__half *)kv->v, k, v, s->tok_seq, s->tok_pos, s->block_tables,
			s->bt_stride, kv->n_kv, kv->head_dim, kv->block_size);
	return launched();
}

__global__ void swiglu_kernel(float *h1, __half *h16, const float *h3, long n)
{
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		float a = h1[i];
		float y = a / (1.0f + expf(-a)) * h3[i];
		h1[i] = y;
		if (h16)
			h16[i] = __float2half_rn(y);
	}
}

extern "C" int kpi_cuda_swiglu(float *h1, void *h16, const float *h3, long n, kpi_stream_t st)
{
	long blocks = (n + 255) / 256;
	swiglu_kernel<<<(int)(blocks < 65535 ? blocks : 65535), 256, 0, st>>>(h1, (__half *)h16, h3, n);
	return launched();
}

__global__ void gather_rows_kernel(float *rows, const float *x, const int32_t *src, int dim)
{
	const float *s = x + (size_t)src[blockIdx.x] * dim;
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		rows[(size_t)blockIdx.x * dim + i] = s[i];
}

extern "C" int kpi_cuda_gather_rows(float *rows, const float *x, const int32_t *src, int n, int dim,
				    kpi_stream_t st)
{
	gather_rows_kernel<<<n, 256, 0, st>>>(rows, x, src, dim);
	return launched();
}

/* ---- paged attention --------------------------------------------------------
 * One CTA per (KV head g, token, partition). Its 4 warps take the KV blocks of
 * the range in turn; within a warp, 32 / BS lanes share one position (each
 * lane reads 16-byte chunks of the K row, so every 32-byte sector is used
 * whole), and the group's query heads are all scored against that K row: K
 * and V are read once for the whole GQA group. Softmax is online (running
 * max and sum per head, fp32), V is accumulated with each lane owning
 * HD / 32 dimensions (a warp reads a V row as one contiguous stretch), and
 * the warps' partial results are merged through shared memory at the end. */

/* acc[h][e] += p[h][j] * v[e] for the group's heads; v is this lane's DPL
 * elements of one V row, loaded in one 4- or 8-byte access. */
template <typename KV, int DPL, int BS>
__device__ __forceinline__ void accumulate_v_impl(float (*acc)[DPL], const KV *v, const float (*p)[BS],
						  int j, int group)
{
	float vf[DPL];
	if constexpr (DPL == 4) {
		uint2 u = *reinterpret_cast<const uint2 *>(v);
		const KV *e = reinterpret_cast<const KV *>(&u);
#pragma unroll
		for (int i = 0; i < 4; i++)
			vf[i] = to_f(e[i]);
	} else {
		uint32_t u = *reinterpret_cast<const uint32_t *>(v);
		const KV *e = reinterpret_cast<const KV *>(&u);
#pragma unroll
		for (int i = 0; i < DPL; i++)
			vf[i] = to_f(e[i]);
	}
#pragma unroll
	for (int h = 0; h < MAX_GROUP; h++) {
		if (h >= group)
			break;
		const float pj = p[h][j];
#pragma unroll
		for (int e = 0; e < DPL; e++)
			acc[h][e] += pj * vf[e];
	}
}

template <typename KV, int HD, int BS>
__global__ void __launch_bounds__(ATT_THREADS)
paged_attention_kernel(float *out, float *part_out, float *part_m, float *part_l, const float *q,
		       const KV *kc, const KV *vc, const int32_t *tok_list, const int32_t *tok_seq,
		       const int32_t *tok_pos,
		       const int32_t *bt_all, int bt_stride, int n_kv, int n_heads, int max_parts,
		       int partitioned)
{
	constexpr int TG = 32 / BS;          /* lanes per position */
	constexpr int CHUNKS = HD / 8 / TG;  /* 16-byte chunks of a K row per lane */
	constexpr int DPL = HD / 32;         /* V dims per lane */
	__shared__ float q_s[MAX_GROUP][HD];
	__shared__ float p_s[ATT_WARPS][MAX_GROUP][BS];
	__shared__ float w_m[ATT_WARPS][MAX_GROUP], w_l[ATT_WARPS][MAX_GROUP];
	__shared__ float w_acc[ATT_WARPS][MAX_GROUP][HD];

	const int g = blockIdx.x, li = blockIdx.y, t = tok_list[li], part = blockIdx.z;
	const int group = n_heads / n_kv, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int ctx = tok_pos[t] + 1;
	const int lo = partitioned ? part * KPI_CUDA_PARTITION : 0;
	const int hi = partitioned ? min(ctx, lo + KPI_CUDA_PARTITION) : ctx;
	if (lo >= hi)
		return; /* partition past this token's context: the reduce skips it */
	const int32_t *bt = bt_all + (size_t)tok_seq[t] * bt_stride;
	const float scale = rsqrtf((float)HD);

	for (int e = threadIdx.x; e < group * HD; e += ATT_THREADS)
		q_s[e / HD][e % HD] = q[((size_t)t * n_heads + g * group) * HD + e] * scale;
	__syncthreads();

	float m[MAX_GROUP], l[MAX_GROUP], acc[MAX_GROUP][DPL];
#pragma unroll
	for (int h = 0; h < MAX_GROUP; h++) {
		m[h] = -INFINITY, l[h] = 0.f;
#pragma unroll
		for (int e = 0; e < DPL; e++)
			acc[h][e] = 0.f;
	}

	const int p = lane / TG, sub = lane % TG;
	for (int b = lo / BS + warp; b * BS < hi; b += ATT_WARPS) {
		const int32_t phys = bt[b];
		const size_t row0 = (((size_t)phys * n_kv + g) * BS) * HD;
		const int pos = b * BS + p;
		const bool valid = pos >= lo && pos < hi;

		/* scores of this lane's position for every head of the group: one
		 * 16-byte chunk of K at a time, dotted with each head's query */
		float sc[MAX_GROUP];
#pragma unroll
		for (int h = 0; h < MAX_GROUP; h++)
			sc[h] = 0.f;
		const uint4 *krow = reinterpret_cast<const uint4 *>(kc + row0 + (size_t)p * HD);
#pragma unroll
		for (int c = 0; c < CHUNKS; c++) {
			float kf[8];
			unpack8(krow[c * TG + sub], kf, KV());
			const int d0 = (c * TG + sub) * 8;
#pragma unroll
			for (int h = 0; h < MAX_GROUP; h++) {
				if (h >= group)
					break;
#pragma unroll
				for (int i = 0; i < 8; i++)
					sc[h] += q_s[h][d0 + i] * kf[i];
			}
		}
#pragma unroll
		for (int h = 0; h < MAX_GROUP; h++) {
			if (h >= group)
				break;
			float s = sc[h];
#pragma unroll
			for (int o = TG / 2; o; o >>= 1)
				s += __shfl_xor_sync(0xffffffffu, s, o);
			s = valid ? s : -INFINITY;
			float nm = fmaxf(m[h], warp_max(s));
			float pv = valid ? __expf(s - nm) : 0.f;
			float bsum = warp_sum(sub == 0 ? pv : 0.f);
			float r = __expf(m[h] - nm); /* m = -inf at first: r = 0 */
			l[h] = l[h] * r + bsum;
#pragma unroll
			for (int e = 0; e < DPL; e++)
				acc[h][e] *= r;
			m[h] = nm;
			if (sub == 0)
				p_s[warp][h][p] = pv;
		}
		__syncwarp();
		/* V: this warp's valid positions of the block, lane owns DPL dims */
		const int j0 = max(lo - b * BS, 0), j1 = min(hi - b * BS, BS);
		const KV *vblk = vc + row0 + lane * DPL;
		if (j0 == 0 && j1 == BS) {
			/* a full block: unrolled, so the warp has all its V loads in flight */
#pragma unroll
			for (int j = 0; j < BS; j++)
				accumulate_v_impl<KV, DPL, BS>(acc, vblk + (size_t)j * HD, p_s[warp], j, group);
		} else {
			for (int j = j0; j < j1; j++)
				accumulate_v_impl<KV, DPL, BS>(acc, vblk + (size_t)j * HD, p_s[warp], j, group);
		}
		__syncwarp();
	}

	/* merge the warps */
#pragma unroll
	for (int h = 0; h < MAX_GROUP; h++) {
		if (h >= group)
			break;
		if (lane == 0)
			w_m[warp][h] = m[h], w_l[warp][h] = l[h];
#pragma unroll
		for (int e = 0; e < DPL; e++)
			w_acc[warp][h][lane * DPL + e] = acc[h][e];
	}
	__syncthreads();
	for (int e = threadIdx.x; e < group * HD; e += ATT_THREADS) {
		int h = e / HD, d = e % HD;
		float M = -INFINITY;
#pragma unroll
		for (int w = 0; w < ATT_WARPS; w++)
			M = fmaxf(M, w_m[w][h]);
		float L = 0.f, A = 0.f;
#pragma unroll
		for (int w = 0; w < ATT_WARPS; w++) {
			float f = w_m[w][h] == -INFINITY ? 0.f : __expf(w_m[w][h] - M);
			L += w_l[w][h] * f;
			A += w_acc[w][h][d] * f;
		}
		int head = g * group + h;
		if (!partitioned) {
			out[((size_t)t * n_heads + head) * HD + d] = A / L;
		} else {
			size_t pi = ((size_t)li * n_heads + head) * max_parts + part;
			part_out[pi * HD + d] = A / L;
			if (d == 0)
				part_m[pi] = M, part_l[pi] = L;
		}
	}
}

/* Merges a token's partitions: weights l_p * exp(m_p - max m). */
template <int HD>
__global__ void paged_attention_reduce_kernel(float *out, const float *part_out, const float *part_m,
					      const float *part_l, const int32_t *tok_list,
					      const int32_t *tok_pos, int n_heads, int max_parts)
{
	const int head = blockIdx.x, li = blockIdx.y, t = tok_list[li], d = threadIdx.x;
	const int n_parts = (tok_pos[t] + KPI_CUDA_PARTITION) / KPI_CUDA_PARTITION;
	const size_t base = ((size_t)li * n_heads + head) * max_parts;
	float M = -INFINITY;
	for (int p = 0; p < n_parts; p++)
		M = fmaxf(M, part_m[base + p]);
	float W = 0.f, A = 0.f;
	for (int p = 0; p < n_parts; p++) {
		float w = part_l[base + p] * __expf(part_m[base + p] - M);
		W += w;
		A += w * part_out[(base + p) * HD + d];
	}
	out[((size_t)t * n_heads + head) * HD + d] = A / W;
}

/* Prefill (and chunked prefill) attention: one CTA per (KV head, tile of up
 * to 32 / group consecutive query tokens of one sequence), so its 32 query
 * rows (tokens x the group's heads) share every K/V tile read. K/V tiles of 32
 * positions go through shared memory, read through the block table; lane j of
 * a warp scores position j of the tile for each of the warp's 8 rows; causal
 * masking per row (a row sees positions <= its own); online softmax in fp32. */
#define PF_ROWS 32
#define PF_TK 32

template <typename KV, int HD, int BS>
__global__ void __launch_bounds__(ATT_THREADS)
prefill_attention_kernel(float *out, const float *q, const KV *kc, const KV *vc, const int32_t *tiles,
			 const int32_t *tok_seq, const int32_t *tok_pos, const int32_t *bt_all,
			 int bt_stride, int n_kv, int n_heads)
{
	constexpr int RPW = PF_ROWS / ATT_WARPS; /* rows per warp */
	constexpr int DPL = HD / 32;
	__shared__ float q_s[PF_ROWS][HD];
	__shared__ KV k_s[PF_TK][HD + 2];        /* +2: rows an odd number of words apart */
	__shared__ __align__(16) KV v_s[PF_TK][HD];
	__shared__ int row_pos[PF_ROWS];

	const int g = blockIdx.x, tile = blockIdx.y;
	const int t0 = tiles[2 * tile], nt = tiles[2 * tile + 1];
	const int group = n_heads / n_kv, nrows = nt * group;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int32_t *bt = bt_all + (size_t)tok_seq[t0] * bt_stride;
	const int last_pos = tok_pos[t0 + nt - 1];
	const float scale = rsqrtf((float)HD);

	for (int e = threadIdx.x; e < PF_ROWS * HD; e += ATT_THREADS) {
		int r = e / HD, d = e % HD;
		q_s[r][d] = r < nrows ? q[((size_t)(t0 + r / group) * n_heads + g * group + r % group) * HD + d] * scale
				      : 0.f;
	}
	for (int r = threadIdx.x; r < PF_ROWS; r += ATT_THREADS)
		row_pos[r] = r < nrows ? tok_pos[t0 + r / group] : -1;

	float m[RPW], l[RPW], acc[RPW][DPL];
#pragma unroll
	for (int i = 0; i < RPW; i++) {
		m[i] = -INFINITY, l[i] = 0.f;
#pragma unroll
		for (int e = 0; e < DPL; e++)
			acc[i][e] = 0.f;
	}

	for (int kt = 0; kt <= last_pos; kt += PF_TK) {
		__syncthreads(); /* q_s/row_pos ready; previous tile consumed */
		for (int e = threadIdx.x; e < PF_TK * (HD / 8); e += ATT_THREADS) {
			int j = e / (HD / 8), c = e % (HD / 8), pos = kt + j;
			if (pos > last_pos)
				continue;
			size_t src = (((size_t)bt[pos / BS] * n_kv + g) * BS + pos % BS) * HD + c * 8;
			uint4 kk = *reinterpret_cast<const uint4 *>(kc + src);
			const uint32_t *kw = reinterpret_cast<const uint32_t *>(&kk);
			uint32_t *kd = reinterpret_cast<uint32_t *>(&k_s[j][c * 8]);
#pragma unroll
			for (int w = 0; w < 4; w++)
				kd[w] = kw[w];
			*reinterpret_cast<uint4 *>(&v_s[j][c * 8]) = *reinterpret_cast<const uint4 *>(vc + src);
		}
		__syncthreads();
		const int kpos = kt + lane;
#pragma unroll
		for (int i = 0; i < RPW; i++) {
			const int r = warp * RPW + i, rp = row_pos[r];
			float s = -INFINITY;
			if (rp >= 0 && kpos <= rp) {
				s = 0.f;
#pragma unroll 16
				for (int d = 0; d < HD; d++)
					s += q_s[r][d] * to_f(k_s[lane][d]);
			}
			const float nm = fmaxf(m[i], warp_max(s));
			if (nm == -INFINITY)
				continue; /* no visible position yet (warp-uniform) */
			const float p = s == -INFINITY ? 0.f : __expf(s - nm);
			const float rsc = __expf(m[i] - nm);
			l[i] = l[i] * rsc + warp_sum(p);
			m[i] = nm;
#pragma unroll
			for (int e = 0; e < DPL; e++)
				acc[i][e] *= rsc;
			for (int j = 0; j < PF_TK; j++) {
				const float pj = __shfl_sync(0xffffffffu, p, j);
				if (pj == 0.f)
					continue; /* masked (v_s may hold garbage there) */
#pragma unroll
				for (int e = 0; e < DPL; e++)
					acc[i][e] += pj * to_f(v_s[j][lane + 32 * e]);
			}
		}
	}
#pragma unroll
	for (int i = 0; i < RPW; i++) {
		const int r = warp * RPW + i;
		if (row_pos[r] < 0)
			continue;
		float *o = out + ((size_t)(t0 + r / group) * n_heads + g * group + r % group) * HD;
#pragma unroll
		for (int e = 0; e < DPL; e++)
			o[lane + 32 * e] = acc[i][e] / l[i];
	}
}

extern "C" long kpi_cuda_attn_scratch_floats(int T, int n_heads, int hd, int ctx)
{
	long parts = (ctx + KPI_CUDA_PARTITION - 1) / KPI_CUDA_PARTITION;
	return (long)T * n_heads * parts * (hd + 2);
}

struct attn_args {
	float *out;
	const float *q;
	const struct kpi_kv_dev *kv;
	const struct kpi_step_dev *s;
	int n_heads, max_ctx, n_sm;
	const int32_t *decode_tok, *prefill_tiles;
	int n_decode, n_tiles;
	float *scratch;
	kpi_stream_t st;
};

template <typename KV, int HD, int BS>
static int attention_launch(const struct attn_args *a)
{
	const struct kpi_kv_dev *kv = a->kv;
	const struct kpi_step_dev *s = a->s;
	const KV *kc = (const KV *)kv->k, *vc = (const KV *)kv->v;
	if (a->n_tiles)
		prefill_attention_kernel<KV, HD, BS><<<dim3(kv->n_kv, a->n_tiles), ATT_THREADS, 0, a->st>>>(
			a->out, a->q, kc, vc, a->prefill_tiles, s->tok_seq, s->tok_pos, s->block_tables,
			s->bt_stride, kv->n_kv, a->n_heads);
	if (a->n_decode) {
		const int max_parts = (a->max_ctx + KPI_CUDA_PARTITION - 1) / KPI_CUDA_PARTITION;
		const int partitioned = kpi_cuda_attn_use_partitions(a->n_decode, kv->n_kv, a->max_ctx, a->n_sm);
		float *part_out = a->scratch;
		float *part_m = part_out + (size_t)a->n_decode * a->n_heads * max_parts * HD;
		float *part_l = part_m + (size_t)a->n_decode * a->n_heads * max_parts;
		dim3 grid(kv->n_kv, a->n_decode, partitioned ? max_parts : 1);
		paged_attention_kernel<KV, HD, BS><<<grid, ATT_THREADS, 0, a->st>>>(
			a->out, part_out, part_m, part_l, a->q, kc, vc, a->decode_tok, s->tok_seq, s->tok_pos,
			s->block_tables, s->bt_stride, kv->n_kv, a->n_heads, max_parts, partitioned);
		if (partitioned)
			paged_attention_reduce_kernel<HD><<<dim3(a->n_heads, a->n_decode), HD, 0, a->st>>>(
				a->out, part_out, part_m, part_l, a->decode_tok, s->tok_pos, a->n_heads, max_parts);
	}
	return launched();
}

template <typename KV, int HD>
static int attention_bs(const struct attn_args *a)
{
	switch (a->kv->block_size) {
	case 8: return attention_launch<KV, HD, 8>(a);
	case 16: return attention_launch<KV, HD, 16>(a);
	case 32: return attention_launch<KV, HD, 32>(a);
	}
	return -1;
}

template <typename KV>
static int attention_hd(const struct attn_args *a)
{
	if (a->kv->head_dim == 64)
		return attention_bs<KV, 64>(a);
	if (a->kv->head_dim == 128)
		return attention_bs<KV, 128>(a);
	return -1;
}

extern "C" int kpi_cuda_attention(float *out, const float *q, const struct kpi_kv_dev *kv,
				  const struct kpi_step_dev *s, int n_heads, int max_ctx,
				  const int32_t *decode_tok, int n_decode, const int32_t *prefill_tiles,
				  int n_tiles, float *part_scratch, int n_sm, kpi_stream_t st)
{
	if (n_heads % kv->n_kv || !kpi_cuda_attn_supported(kv->head_dim, kv->block_size, n_heads / kv->n_kv))
		return -1;
	struct attn_args a = { out, q, kv, s, n_heads, max_ctx, n_sm, decode_tok, prefill_tiles,
			       n_decode, n_tiles, part_scratch, st };
	if (kv->dtype == KPI_KV_BF16)
		return attention_hd<__nv_bfloat16>(&a);
	return attention_hd<__half>(&a);
}

/* ---- naive reference (tests) --------------------------------------------- */

template <typename KV>
__global__ void naive_attention_kernel(float *out, const float *q, const KV *kc, const KV *vc,
				       const int32_t *tok_seq, const int32_t *tok_pos, const int32_t *bt_all,
				       int bt_stride, int n_kv, int n_heads, int hd, int bs, int T)
{
	int idx = blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= T * n_heads)
		return;
	int t = idx / n_heads, h = idx % n_heads, g = h / (n_heads / n_kv), n = tok_pos[t] + 1;
	const int32_t *bt = bt_all + (size_t)tok_seq[t] * bt_stride;
	const float *qh = q + (size_t)idx * hd;
	float scale = 1.0f / sqrtf((float)hd), mx = -INFINITY, sum = 0;
	for (int j = 0; j < n; j++) {
		const KV *k = kc + (((size_t)bt[j / bs] * n_kv + g) * bs + j % bs) * hd;
		float s = 0;
		for (int d = 0; d < hd; d++)
			s += qh[d] * to_f(k[d]);
		mx = fmaxf(mx, s * scale);
	}
	float *o = out + (size_t)idx * hd;
	for (int d = 0; d < hd; d++)
		o[d] = 0;
	for (int j = 0; j < n; j++) {
		size_t row = (((size_t)bt[j / bs] * n_kv + g) * bs + j % bs) * hd;
		float s = 0;
		for (int d = 0; d < hd; d++)
			s += qh[d] * to_f(kc[row + d]);
		float p = expf(s * scale - mx);
		sum += p;
		for (int d = 0; d < hd; d++)
			o[d] += p * to_f(vc[row + d]);
	}
	for (int d = 0; d < hd; d++)
		o[d] /= sum;
}

extern "C" int kpi_cuda_attention_naive(float *out, const float *q, const struct kpi_kv_dev *kv,
					const struct kpi_step_dev *s, int n_heads, kpi_stream_t st)
{
	int n = s->n_tokens * n_heads;
	if (kv->dtype == KPI_KV_BF16)
		naive_attention_kernel<__nv_bfloat16><<<(n + 63) / 64, 64, 0, st>>>(
			out, q, (const __nv_bfloat16 *)kv->k, (const __nv_bfloat16 *)kv->v, s->tok_seq,
			s->tok_pos, s->block_tables, s->bt_stride, kv->n_kv, n_heads, kv->head_dim,
			kv->block_size, s->n_tokens);
	else
		naive_attention_kernel<__half><<<(n + 63) / 64, 64, 0, st>>>(
			out, q, (const __half *)kv->k, (const __half *)kv->v, s->tok_seq, s->tok_pos,
			s->block_tables, s->bt_stride, kv->n_kv, n_heads, kv->head_dim, kv->block_size,
			s->n_tokens);
	return launched();
}

/* ---- test helpers --------------------------------------------------------- */

__device__ __forceinline__ uint32_t mix32(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return (uint32_t)x;
}

template <typename T>
__global__ void fill_random_kernel(T *p, long n, uint64_t seed, float amp)
{
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		p[i] = from_f<T>(((float)mix32(seed * 0x9e3779b97f4a7c15ull + i) * 2.3283064e-10f * 2.f - 1.f) * amp);
}
template <>
__global__ void fill_random_kernel<float>(float *p, long n, uint64_t seed, float amp)
{
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		p[i] = ((float)mix32(seed * 0x9e3779b97f4a7c15ull + i) * 2.3283064e-10f * 2.f - 1.f) * amp;
}

extern "C" int kpi_cuda_fill_random(void *p, long n, int kind, uint64_t seed, float amp, kpi_stream_t st)
{
	long blocks = (n + 255) / 256;
	int g = (int)(blocks < 65535 ? blocks : 65535);
	if (kind == 2)
		fill_random_kernel<float><<<g, 256, 0, st>>>((float *)p, n, seed, amp);
	else if (kind == KPI_KV_BF16)
		fill_random_kernel<__nv_bfloat16><<<g, 256, 0, st>>>((__nv_bfloat16 *)p, n, seed, amp);
	else
		fill_random_kernel<__half><<<g, 256, 0, st>>>((__half *)p, n, seed, amp);
	return launched();
}
