/* test_server_kv_wire.c - the KV stream reader (daemon/pd/kv_wire.c): a
 * stream fed in any split arrives whole, into a buffer or straight into
 * the engine's blocks; cut anywhere it is never done; every byte flipped
 * fails it with a cause; each kind of mismatch names its cause; the router's
 * policies (route_policy.c) do what they say. */
#include <stddef.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <xxhash.h>

#include "tests/unit/check.h"
#include "abi/kpi_kv_wire.h"
#include "abi/kpi_reasons.h"
#include "daemon/engine.h"
#include "daemon/pd/kv_wire.h"
#include "daemon/pd/route_policy.h"

static const struct kv_model model = {
	.fingerprint = 0x1234567890abcdefull, .name = "tiny", .n_layers = 3, .n_kv_heads = 2,
	.head_dim = 8, .dtype = KPI_KV_WIRE_F16, .block_size = 16, .vocab_size = 259,
	.context_length = 2048,
};

enum { NTOK = 21, ROW = 8 * 2 };

static int cached = 16; /* positions of the first half's frames */

/* The payload byte of (layer, K or V, head, position, byte in the row). */
static unsigned char byte_of(int l, int kv, int h, int p, int b)
{
	return (unsigned char)(l * 31 + kv * 17 + h * 5 + p * 3 + b + 1);
}

/* A valid stream of NTOK positions, the first `cached` in the first half's
 * frames, each frame in chunks of the block size (16) from its first
 * position, the checksum over the header, each chunk's digest and the end
 * frame; *payload_out: its KV as the reader lays it out. */
static size_t make_stream(unsigned char *buf, unsigned char *payload_out)
{
	struct kpi_kv_header h;
	kv_wire_header(&model, NTOK, &h);
	size_t off = 0, half = (size_t)2 * NTOK * ROW;
	memcpy(buf, &h, sizeof(h));
	off += sizeof(h);
	XXH3_state_t *xx = XXH3_createState();
	XXH3_64bits_reset(xx);
	XXH3_64bits_update(xx, &h, sizeof(h));
	const int bs = (int)model.block_size;
	for (int f = 0; f < 6; f++) {
		int l = f % 3, first = f < 3 ? 0 : cached, np = f < 3 ? cached : NTOK - cached;
		struct kpi_kv_layer lf = { KPI_KV_LAYER_MAGIC, (uint32_t)l, (uint32_t)first, (uint32_t)np,
					   (uint64_t)2 * 2 * np * ROW };
		memcpy(buf + off, &lf, sizeof(lf));
		off += sizeof(lf);
		for (int c = first; c < first + np; c += bs) {
			size_t start = off;
			for (int kv = 0; kv < 2; kv++)
				for (int hh = 0; hh < 2; hh++)
					for (int p = c; p < first + np && p < c + bs; p++)
						for (int b = 0; b < ROW; b++) {
							buf[off++] = byte_of(l, kv, hh, p, b);
							payload_out[l * 2 * half + kv * half + hh * NTOK * ROW +
								    p * ROW + b] = byte_of(l, kv, hh, p, b);
						}
			/* the checksum takes each chunk's digest */
			uint64_t d = XXH3_64bits(buf + start, off - start);
			XXH3_64bits_update(xx, &d, sizeof(d));
		}
	}
	struct kpi_kv_end e = { KPI_KV_END_MAGIC, 0, 42, NTOK, 0xfeedull, 0 };
	XXH3_64bits_update(xx, &e, offsetof(struct kpi_kv_end, checksum));
	e.checksum = XXH3_64bits_digest(xx);
	XXH3_freeState(xx);
	memcpy(buf + off, &e, sizeof(e));
	return off + sizeof(e);
}

static unsigned char stream[65536], payload[65536];

static void test_any_split_arrives_whole(void)
{
	for (cached = 0; cached < NTOK; cached += 4) {
	size_t n = make_stream(stream, payload);
	CHECK(n == kpi_kv_stream_bytes(3, kpi_kv_payload_bytes(3, NTOK, 2, 8, KPI_KV_WIRE_F16)), "size %zu", n);
	uint64_t rs = 1;
	for (int trial = 0; trial < 200; trial++) {
		struct kv_reader r;
		kv_reader_init(&r, &model, NTOK);
		size_t off = 0;
		while (off < n) {
			rs = rs * 6364136223846793005ull + 1442695040888963407ull;
			size_t k = 1 + (rs >> 33) % (trial < 100 ? 7 : 3000);
			if (k > n - off)
				k = n - off;
			CHECK(kv_reader_feed(&r, (const char *)stream + off, k) == k, "took less");
			off += k;
		}
		CHECK(r.stage == KVR_DONE, "trial %d: stage %d (%s)", trial, r.stage, r.err);
		CHECK(r.end.first_token == 42 && r.end.sampler_state == 0xfeed, "end frame");
		char *p = kv_reader_take_payload(&r);
		CHECK(p && !memcmp(p, payload, r.hdr.payload_bytes), "payload");
		engine_kv_buffer_free(p);
		kv_reader_free(&r);
	}
	}
	cached = 16;
}

/* Fills what kv_reader_want_iov asks for with the stream's next bytes, k of
 * them at most (a short readv). */
static size_t readv_like(struct kv_reader *r, const unsigned char *in, size_t k, int max)
{
	struct iovec iov[8];
	int n = kv_reader_want_iov(r, iov, max);
	size_t took = 0;
	for (int i = 0; i < n && took < k; i++) {
		size_t c = iov[i].iov_len < k - took ? iov[i].iov_len : k - took;
		memcpy(iov[i].iov_base, in + took, c);
		took += c;
	}
	if (took)
		kv_reader_got(r, took);
	return took;
}

/* Straight into the engine's blocks (kv_reader_into): a pool laid out as the
 * CPU backend's ([block][K, V][head][slot][row]), the prompt's blocks
 * scattered in it, the receiver's block size the sender's or half of it;
 * every split and cached prefix (misaligned ones too) lands every byte
 * where the blocks say, and there is no payload buffer. */
static void test_into_blocks_any_split(void)
{
	enum { NPHYS = 8 };
	static unsigned char pool[3][NPHYS][2][2][16][ROW];
	for (int rbs = 16; rbs >= 8; rbs /= 2)
	for (cached = 0; cached < NTOK; cached += 4) {
		size_t n = make_stream(stream, payload);
		int nb = (NTOK + rbs - 1) / rbs;
		struct engine_kv_in *in = malloc(sizeof(*in) + sizeof(void *) * 3 * nb * 2 * 2);
		*in = (struct engine_kv_in){ 1, NTOK, nb, rbs, 3, 2 };
		for (int l = 0; l < 3; l++)
			for (int b = 0; b < nb; b++)
				for (int kv = 0; kv < 2; kv++)
					for (int h = 0; h < 2; h++) /* block b is pool block 7 - b */
						in->rows[((l * nb + b) * 2 + kv) * 2 + h] =
							pool[l][NPHYS - 1 - b][kv][h][0];
		uint64_t rs = 7;
		for (int trial = 0; trial < 60; trial++) {
			memset(pool, 0, sizeof(pool));
			struct kv_reader r;
			kv_reader_init(&r, &model, NTOK);
			CHECK(kv_reader_into(&r, in), "into before the header");
			size_t off = 0;
			while (off < n && r.stage != KVR_FAILED && r.stage != KVR_DONE) {
				rs = rs * 6364136223846793005ull + 1442695040888963407ull;
				size_t k = 1 + (rs >> 33) % (trial < 30 ? 9 : 3000);
				off += readv_like(&r, stream + off, k < n - off ? k : n - off,
						  1 + (int)((rs >> 20) % 8));
			}
			CHECK(r.stage == KVR_DONE && off == n, "block size %d, cached %d, trial %d: stage "
			      "%d (%s)", rbs, cached, trial, r.stage, r.err);
			CHECK(!kv_reader_take_payload(&r), "no payload when received into blocks");
			int bad = 0;
			for (int l = 0; l < 3; l++)
				for (int kv = 0; kv < 2; kv++)
					for (int h = 0; h < 2; h++)
						for (int p = 0; p < NTOK; p++)
							for (int b = 0; b < ROW; b++)
								bad += pool[l][NPHYS - 1 - p / rbs][kv][h][p % rbs][b] !=
								       byte_of(l, kv, h, p, b);
			CHECK(!bad, "block size %d, cached %d: %d bytes misplaced", rbs, cached, bad);
			kv_reader_free(&r);
		}
		free(in);
	}
	cached = 16;
}

static void test_cut_anywhere_is_never_done(void)
{
	size_t n = make_stream(stream, payload);
	for (size_t cut = 0; cut < n; cut++) {
		struct kv_reader r;
		kv_reader_init(&r, &model, NTOK);
		kv_reader_feed(&r, (const char *)stream, cut);
		CHECK(r.stage != KVR_DONE && r.stage != KVR_FAILED, "cut at %zu: stage %d", cut, r.stage);
		CHECK(!kv_reader_take_payload(&r), "a payload before the end");
		kv_reader_free(&r);
	}
}

/* Every byte is checked: the header's by the checksum when not by a field's
 * own check (the model name, the block size that orders the payload, the
 * reserved fields), the frames' by their checks, the payload's and the end
 * frame's by the checksum. */
static void test_every_flipped_byte_fails(void)
{
	size_t n = make_stream(stream, payload);
	for (size_t at = 0; at < n; at++) {
		stream[at] ^= 0x01;
		struct kv_reader r;
		kv_reader_init(&r, &model, NTOK);
		kv_reader_feed(&r, (const char *)stream, n);
		CHECK(r.stage == KVR_FAILED && r.status > 0 && r.err[0], "byte %zu flipped: stage %d",
		      at, r.stage);
		kv_reader_free(&r);
		stream[at] ^= 0x01;
	}
	printf("     all %zu flipped bytes refused\n", n);
}

static int status_of(void (*mutate)(unsigned char *), uint32_t want_tokens, char *err)
{
	size_t n = make_stream(stream, payload);
	mutate(stream);
	struct kv_reader r;
	kv_reader_init(&r, &model, want_tokens);
	kv_reader_feed(&r, (const char *)stream, n);
	int s = r.stage == KVR_FAILED ? r.status : r.stage == KVR_DONE ? 0 : -1;
	snprintf(err, 256, "%s", r.err);
	kv_reader_free(&r);
	return s;
}

static struct kpi_kv_header *H(unsigned char *b) { return (struct kpi_kv_header *)b; }
static void m_none(unsigned char *b) { (void)b; }
static void m_version(unsigned char *b) { H(b)->version = 1; }
static void m_model(unsigned char *b) { H(b)->fingerprint ^= 1; }
static void m_layers(unsigned char *b) { H(b)->n_layers = 4; }
static void m_dtype(unsigned char *b) { H(b)->dtype = KPI_KV_WIRE_BF16; }
static void m_size(unsigned char *b) { H(b)->payload_bytes += 8; }
static void m_huge(unsigned char *b) { H(b)->payload_bytes = 1ull << 62; }
static void m_frame(unsigned char *b)
{
	((struct kpi_kv_layer *)(b + sizeof(struct kpi_kv_header)))->layer = 1;
}
static void m_cached_all(unsigned char *b)
{
	((struct kpi_kv_layer *)(b + sizeof(struct kpi_kv_header)))->n_pos = NTOK;
}
static void m_status(unsigned char *b)
{
	size_t n = kpi_kv_stream_bytes(3, H(b)->payload_bytes);
	((struct kpi_kv_end *)(b + n - sizeof(struct kpi_kv_end)))->status = KPI_KV_ERR_SIZE;
}

static void test_each_mismatch_names_its_cause(void)
{
	char err[256];
	static const struct {
		void (*m)(unsigned char *);
		uint32_t tokens;
		int status;
		const char *needle;
	} cases[] = {
		{ m_none, NTOK, 0, "" },
		{ m_none, NTOK + 1, KPI_KV_ERR_TOKENS, "the prompt has 22 tokens" },
		{ m_version, NTOK, KPI_KV_ERR_VERSION, "version 1" },
		{ m_model, NTOK, KPI_KV_ERR_MODEL, "another model" },
		{ m_layers, NTOK, KPI_KV_ERR_SHAPE, "4 layers" },
		{ m_dtype, NTOK, KPI_KV_ERR_SHAPE, "dtype 2" },
		{ m_size, NTOK, KPI_KV_ERR_SIZE, "announces" },
		{ m_huge, NTOK, KPI_KV_ERR_SIZE, "announces 4611686018427387904" },
		{ m_frame, NTOK, KPI_KV_ERR_FRAME, "layer 0" },
		{ m_cached_all, NTOK, KPI_KV_ERR_FRAME, "positions 0+0" },
		{ m_status, NTOK, KPI_KV_ERR_UPSTREAM, "status 6 (size)" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int s = status_of(cases[i].m, cases[i].tokens, err);
		CHECK(s == cases[i].status && strstr(err, cases[i].needle), "case %zu: status %d (%s), want %d '%s'",
		      i, s, err, cases[i].status, cases[i].needle);
	}
}

/* ---- route_policy.c ---- */

static void test_route_policies(void)
{
	struct route_worker w[3] = { { "a:1", true, 0, 0, 0 }, { "b:2", true, 0, 0, 0 },
				     { "c:3", true, 0, 0, 0 } };
	unsigned rr = 0;
	int seq[6];
	for (int i = 0; i < 6; i++)
		seq[i] = route_pick(w, 3, KPI_ROUTE_ROUND_ROBIN, NULL, 0, &rr);
	CHECK(seq[0] == 0 && seq[1] == 1 && seq[2] == 2 && seq[3] == 0 && seq[5] == 2, "rr order");
	w[1].up = false;
	for (int i = 0; i < 4; i++)
		CHECK(route_pick(w, 3, KPI_ROUTE_ROUND_ROBIN, NULL, 0, &rr) != 1, "down worker picked");
	w[1].up = true;
	/* least loaded: b reported 5, a and c 2; a got 4 from the router since */
	w[0] = (struct route_worker){ "a:1", true, 2, 4, 0 };
	w[1] = (struct route_worker){ "b:2", true, 5, 0, 0 };
	w[2] = (struct route_worker){ "c:3", true, 2, 1, 1 };
	CHECK(route_load(&w[0]) == 6 && route_load(&w[1]) == 5 && route_load(&w[2]) == 2, "loads");
	CHECK(route_pick(w, 3, KPI_ROUTE_LEAST_LOADED, NULL, 0, &rr) == 2, "least loaded");
	/* the router's own requests finished since the report: never below in flight */
	w[2] = (struct route_worker){ "c:3", true, 0, 7, 9 };
	CHECK(route_load(&w[2]) == 7, "load %d", route_load(&w[2]));
	/* prefix: one prefix one worker; several prefixes spread; a worker down
	 * moves only its own prefixes */
	for (int i = 0; i < 3; i++)
		w[i] = (struct route_worker){ w[i].addr, true, 0, 0, 0 };
	int count[3] = { 0 }, moved = 0, first[64];
	for (int k = 0; k < 64; k++) {
		char pfx[16];
		snprintf(pfx, sizeof(pfx), "prefix-%d", k);
		first[k] = route_pick(w, 3, KPI_ROUTE_PREFIX, pfx, strlen(pfx), &rr);
		CHECK(route_pick(w, 3, KPI_ROUTE_PREFIX, pfx, strlen(pfx), &rr) == first[k], "stable");
		count[first[k]]++;
	}
	CHECK(count[0] > 8 && count[1] > 8 && count[2] > 8, "spread %d %d %d", count[0], count[1], count[2]);
	w[1].up = false;
	for (int k = 0; k < 64; k++) {
		char pfx[16];
		snprintf(pfx, sizeof(pfx), "prefix-%d", k);
		int now = route_pick(w, 3, KPI_ROUTE_PREFIX, pfx, strlen(pfx), &rr);
		CHECK(now != 1, "down worker chosen");
		if (first[k] != 1)
			CHECK(now == first[k], "prefix %d moved off a worker that is up", k);
		moved += now != first[k];
	}
	CHECK(moved == count[1], "moved %d, b had %d", moved, count[1]);
	/* none up: every worker is a candidate again */
	for (int i = 0; i < 3; i++)
		w[i].up = false;
	CHECK(route_pick(w, 3, KPI_ROUTE_ROUND_ROBIN, NULL, 0, &rr) >= 0, "none up");
	CHECK(route_pick(w, 0, KPI_ROUTE_ROUND_ROBIN, NULL, 0, &rr) == -1, "empty");
}

int main(void)
{
	RUN(test_any_split_arrives_whole);
	RUN(test_into_blocks_any_split);
	RUN(test_cut_anywhere_is_never_done);
	RUN(test_every_flipped_byte_fails);
	RUN(test_each_mismatch_names_its_cause);
	RUN(test_route_policies);
	return CHECK_DONE();
}
