/* test_engine_transfer.c - the engine's half of disaggregation on the tiny
 * preset: a prefill-only request's KV, taken layer by layer from kv_layer
 * and imported by another engine with its first token and sampler state,
 * decodes to exactly the tokens one engine gives (greedy and seeded, chunked
 * prefills, a decode side preempting and recomputing); the prefix cache
 * gives the same tokens while computing only what it must, and keeps its
 * accounting under eviction. */
#include <errno.h>
#include <xxhash.h>

#include "tests/unit/check.h"
#include "tests/unit/test_engine_util.h"
#include "abi/kpi_kv_wire.h"
#include "daemon/engine.h"

static char err[512];

enum { MAXOUT = 40, NREQ = 12 };

static struct engine *open_tiny_copy(int max_tokens, int kv_blocks, bool prefix_cache, bool kv_copy)
{
	struct engine_config c = { .model_path = preset_path("tiny"), .max_seqs = 16,
				   .max_batched_tokens = max_tokens, .kv_blocks = kv_blocks, .threads = 2,
				   .prefix_cache = prefix_cache, .fingerprint = true, .kv_out_copy = kv_copy,
				   .kv_digests = prefix_cache }; /* the prefill side keeps digests */
	struct engine *e = engine_create(&c, err, sizeof(err));
	CHECK(e != NULL, "%s", err);
	return e;
}

static struct engine *open_tiny(int max_tokens, int kv_blocks, bool prefix_cache)
{
	return open_tiny_copy(max_tokens, kv_blocks, prefix_cache, false);
}

static int prompt_of(int r, int32_t *p)
{
	int n = 1 + (r * 97) % 300;
	for (int i = 0; i < n; i++)
		p[i] = 3 + (i * 13 + (i >= 64 ? r * 7 : 0)) % 256; /* the first 64 shared by all */
	return n;
}

static struct sampling_params params_of(int r)
{
	return (struct sampling_params){ .temperature = r % 3 ? 0.8f : 0, .top_p = 0.95f,
					 .seed = 500 + r, .max_tokens = 20 + r % 20, .ignore_eos = true };
}

/* One step, collecting tokens by id. */
static void step_once(struct engine *e, int32_t out[][MAXOUT], int *n_out, int n_ids)
{
	struct engine_event ev[1024];
	int k = engine_step(e, ev, 1024);
	for (int i = 0; i < k; i++) {
		CHECK(ev[i].id < (uint64_t)n_ids, "event for id %llu", (unsigned long long)ev[i].id);
		if (ev[i].kind == ENGINE_EV_TOKEN) {
			CHECK(n_out[ev[i].id] < MAXOUT, "too many tokens");
			out[ev[i].id][n_out[ev[i].id]++] = ev[i].token;
		}
	}
}

/* Runs every queued request to the end, collecting tokens by id. */
static void drain(struct engine *e, int32_t out[][MAXOUT], int *n_out, int n_ids)
{
	while (engine_has_work(e))
		step_once(e, out, n_out, n_ids);
}

/* ---- the prefill side's kv_layer callback: layers collected per request ---- */

enum { NL = 4, NKV = 2, ROW = 64 * 2, BS = 16 }; /* tiny: layers, KV heads, bytes of one head's position; block size */

static struct {
	char *data[NREQ];     /* all layers of request r: [layer][K, V][head][n][head_dim] */
	int n[NREQ];          /* its prompt length */
	int covered[NREQ][NL];/* positions received per layer, in order */
	int cached[NREQ];     /* positions the admission-time frames carried */
	int calls, in_place, copied;
	struct engine_kv_pin *pins[NREQ * NL * 8]; /* held until the "socket" took them */
	int n_pins;
} got;

/* A layer's bytes, from the pool's runs or the copied buffer, as one K then V. */
static const char *layer_bytes(const struct engine_kv_out *o, char *flat)
{
	if (!o->iov)
		return o->data;
	size_t at = 0;
	for (int i = 0; i < o->n_iov; i++) {
		memcpy(flat + at, o->iov[i].iov_base, o->iov[i].iov_len);
		at += o->iov[i].iov_len;
	}
	return at == o->len ? flat : NULL;
}

static void on_layer(void *ctx, struct engine_kv_out *o)
{
	got.calls++;
	uint64_t id = o->id;
	int layer = o->layer, first = o->first_pos, n_pos = o->n_pos;
	int n = id < NREQ ? got.n[id] : 0;
	static char flat[2 * NKV * 400 * ROW];
	const char *data = o->len <= sizeof(flat) ? layer_bytes(o, flat) : NULL;
	got.in_place += o->iov != NULL;
	got.copied += o->data != NULL;
	if (o->pin) {
		CHECK(got.n_pins < (int)(sizeof(got.pins) / sizeof(got.pins[0])), "too many pins");
		got.pins[got.n_pins++] = o->pin;
	}
	free(o->iov);
	if (!n || !data || layer < 0 || layer >= NL || first != got.covered[id][layer] ||
	    first + n_pos > n || o->len != (size_t)2 * NKV * n_pos * ROW) {
		got.covered[id < NREQ ? id : 0][0] = -100000; /* checked below */
		engine_kv_buffer_free(o->data);
		free(o->digests);
		return;
	}
	if (first == 0 && n_pos < n)
		got.cached[id] = n_pos;
	/* the stream's order: block by block (16 positions), K then V, head by
	 * head; each block's digest that of its bytes */
	size_t half = (size_t)NKV * n * ROW;
	int chunk = 0;
	for (int c = first; c < first + n_pos; c += BS, chunk++) {
		int slots = first + n_pos - c < BS ? first + n_pos - c : BS;
		CHECK(o->digests && chunk < o->n_chunks &&
		      o->digests[chunk] == XXH3_64bits(data, (size_t)2 * NKV * slots * ROW),
		      "request %llu layer %d: block %d's digest", (unsigned long long)id, layer, chunk);
		for (int kv = 0; kv < 2; kv++)
			for (int h = 0; h < NKV; h++) {
				memcpy(got.data[id] + (size_t)layer * 2 * half + kv * half +
					       (size_t)h * n * ROW + (size_t)c * ROW,
				       data, (size_t)slots * ROW);
				data += (size_t)slots * ROW;
			}
	}
	got.covered[id][layer] += n_pos;
	engine_kv_buffer_free(o->data);
	free(o->digests);
}

/* kv_copy: the prefill side copies every layer out (config.kv_out_copy), as
 * a backend whose pool is not in host memory does, and the decode side takes
 * the KV in blocks it held for it (engine_kv_reserve); else the prefill side
 * hands out the pool's runs, pinned, and the decode side copies the KV in. */
static void prefill_then_decode(bool kv_copy)
{
	int32_t want[NREQ][MAXOUT], out[NREQ][MAXOUT], first[NREQ][MAXOUT];
	int n_want[NREQ] = { 0 }, n_out[NREQ] = { 0 }, n_first[NREQ] = { 0 };
	int32_t prompt[400];

	/* one engine, everything */
	struct engine *ref = open_tiny(2048, 0, false);
	for (int r = 0; r < NREQ; r++) {
		struct sampling_params sp = params_of(r);
		CHECK(engine_submit(ref, r, prompt, prompt_of(r, prompt), &sp, err, sizeof(err)) == 0, "%s", err);
	}
	drain(ref, want, n_want, NREQ);
	engine_destroy(ref);

	/* prefill side: 64-token steps, so long prompts prefill in chunks; a
	 * prefix cache, so the later requests reuse the first 64 tokens */
	memset(&got, 0, sizeof(got));
	struct engine *p = open_tiny_copy(64, 0, true, kv_copy);
	engine_set_kv_layer(p, on_layer, NULL);
	struct engine_kv_layout pl;
	engine_kv_layout(p, &pl);
	CHECK(pl.n_layers == 4 && pl.n_kv_heads == 2 && pl.head_dim == 64 && pl.dtype == KPI_KV_WIRE_F16 &&
	      pl.dtype_bytes == 2 && pl.fingerprint != 0, "layout");
	uint64_t sampler[NREQ], want_hits = 0;
	struct engine_event ev[1024];
	/* request 1 (98 tokens) first, alone; then the others find its 64 shared tokens */
	for (int wave = 0; wave < 2; wave++) {
	for (int r = 0; r < NREQ; r++) {
		if ((r == 1) != (wave == 0))
			continue;
		struct sampling_params sp = params_of(r);
		int n = prompt_of(r, prompt);
		got.n[r] = n;
		got.data[r] = engine_kv_buffer((size_t)NL * 2 * NKV * n * ROW);
		if (wave)
			want_hits += 16 * (uint64_t)((n - 1) / 16 < 4 ? (n - 1) / 16 : 4);
		CHECK(engine_submit_prefill(p, r, prompt, n, &sp, err, sizeof(err)) == 0, "%s", err);
	}
	while (engine_has_work(p)) {
		int k = engine_step(p, ev, 1024);
		for (int i = 0; i < k; i++) {
			int id = (int)ev[i].id;
			if (ev[i].kind == ENGINE_EV_TOKEN) {
				for (int l = 0; l < NL; l++)
					CHECK(ev[i].first && got.covered[id][l] == got.n[id],
					      "request %d: token with layer %d at %d of %d positions", id, l,
					      got.covered[id][l], got.n[id]);
				first[id][n_first[id]++] = ev[i].token;
				sampler[id] = ev[i].sampler_state;
			}
			if (ev[i].kind == ENGINE_EV_FINISHED)
				CHECK(ev[i].reason == KPI_FINISH_LENGTH && ev[i].n_output == 1, "one token, length");
		}
	}
	}
	struct engine_stats ps;
	engine_stats(p, &ps);
	CHECK(kv_copy ? got.copied == got.calls && !got.n_pins :
	      got.in_place == got.calls && got.n_pins == got.calls,
	      "%d layers: %d copied, %d in place, %d pins", got.calls, got.copied, got.in_place,
	      got.n_pins);
	if (!kv_copy) {
		/* every request finished, but the pinned blocks are not the pool's yet */
		CHECK(ps.kv_blocks_used > 0, "pinned blocks were given back before their unpin");
		for (int i = 0; i < got.n_pins; i++)
			engine_kv_unpin(p, got.pins[i]);
		engine_stats(p, &ps);
	}
	CHECK(ps.prefix_hits == want_hits, "prefix hits %llu, want %llu", (unsigned long long)ps.prefix_hits,
	      (unsigned long long)want_hits);
	CHECK(ps.kv_blocks_used == 0 && ps.kv_blocks_cached > 0, "nothing held, cache kept: used %d cached %d",
	      ps.kv_blocks_used, ps.kv_blocks_cached);
	engine_destroy(p);

	/* decode side: a pool of 21 blocks for 12 requests, so it preempts and
	 * recomputes imported prompts */
	struct engine *d = open_tiny(2048, 21, false);
	for (int r = 0; r < NREQ; r++) {
		int n = prompt_of(r, prompt);
		CHECK(n_first[r] == 1 && first[r][0] == want[r][0], "request %d: first token %d, want %d", r,
		      first[r][0], want[r][0]);
		/* what the cache held went out at admission: the 64 shared tokens' whole blocks */
		int want_cached = r == 1 ? 0 : 16 * ((n - 1) / 16 < 4 ? (n - 1) / 16 : 4);
		CHECK(got.cached[r] == want_cached, "request %d: %d positions sent from the cache, want %d",
		      r, got.cached[r], want_cached);
		struct engine_kv_import kv = { n, first[r][0], sampler[r], got.data[r] };
		if (kv_copy) {
			/* the other way in: straight into blocks the engine holds for it, as a
			 * decode worker receives when its engine answers first */
			struct engine_kv_in *in;
			while (!(in = engine_kv_reserve(d, r, n, err, sizeof(err)))) {
				CHECK(strstr(err, "free") && engine_has_work(d), "%s", err);
				step_once(d, out, n_out, NREQ); /* blocks free up as others finish */
			}
			CHECK(in->n_blocks == (n + BS - 1) / BS && in->block_size == BS, "%d blocks of %d",
			      in->n_blocks, in->block_size);
			size_t half = (size_t)NKV * n * ROW;
			for (int l = 0; l < NL; l++)
				for (int kv2 = 0; kv2 < 2; kv2++)
					for (int h = 0; h < NKV; h++)
						for (int p = 0; p < n; p++)
							memcpy((char *)in->rows[((l * in->n_blocks + p / BS) * 2 + kv2) *
										NKV + h] + (size_t)(p % BS) * ROW,
							       got.data[r] + (size_t)l * 2 * half + kv2 * half +
								       (size_t)h * n * ROW + (size_t)p * ROW, ROW);
			free(in);
			engine_kv_buffer_free(got.data[r]);
			kv.data = NULL;
		}
		struct sampling_params sp = params_of(r);
		CHECK(engine_submit_decode(d, r, prompt, n, &sp, &kv, err, sizeof(err)) == 0, "%s", err);
		CHECK(kv.data == NULL, "the engine takes the data");
	}
	drain(d, out, n_out, NREQ);
	struct engine_stats ds;
	engine_stats(d, &ds);
	CHECK(ds.preemptions > 0, "the small pool should have preempted");
	CHECK(ds.kv_blocks_free == ds.kv_blocks_total, "leak: %d of %d free", ds.kv_blocks_free,
	      ds.kv_blocks_total);
	for (int r = 0; r < NREQ; r++) {
		CHECK(n_out[r] == n_want[r], "request %d: %d tokens, want %d", r, n_out[r], n_want[r]);
		CHECK(!memcmp(out[r], want[r], sizeof(int32_t) * n_out[r]), "request %d: tokens differ", r);
	}
	printf("     %d requests (KV %s), %llu preemptions on the decode side, %llu prefix-hit "
	       "tokens\n", NREQ, kv_copy ? "copied out, received into held blocks" :
	       "sent from the pool, copied in",
	       (unsigned long long)ds.preemptions, (unsigned long long)ps.prefix_hits);
	engine_destroy(d);
}

static void test_prefill_then_decode_equals_one_engine(void)
{
	prefill_then_decode(false);
}

static void test_prefill_then_decode_copied_out(void)
{
	prefill_then_decode(true);
}

static void test_submit_errors(void)
{
	struct engine *e = open_tiny(2048, 0, false);
	int32_t prompt[4] = { 5, 6, 7, 8 };
	struct sampling_params sp = { .max_tokens = 4 };
	CHECK(engine_submit_prefill(e, 1, prompt, 4, &sp, err, sizeof(err)) == -ENOTSUP &&
	      strstr(err, "kv_layer"), "no callback: %s", err);
	struct engine_kv_import kv = { 3, 5, 0, engine_kv_buffer(16) };
	CHECK(engine_submit_decode(e, 2, prompt, 4, &sp, &kv, err, sizeof(err)) == -EINVAL &&
	      strstr(err, "3 tokens for a prompt of 4"), "%s", err);
	kv.n_tokens = 4;
	kv.first_token = 99999;
	CHECK(engine_submit_decode(e, 3, prompt, 4, &sp, &kv, err, sizeof(err)) == -EINVAL, "%s", err);
	engine_kv_buffer_free(kv.data);
	CHECK(!engine_has_work(e), "nothing queued");
	engine_destroy(e);
}

/* Same prompts twice: the second round hits the cache for every full block
 * but the last token's, and gives the same tokens; under a small pool the
 * cache evicts and the accounting holds. */
static void test_prefix_cache_same_tokens(void)
{
	for (int pool = 0; pool < 2; pool++) {
		struct engine *c = open_tiny(2048, pool ? 48 : 0, true);
		int32_t o1[NREQ][MAXOUT], o2[NREQ][MAXOUT], prompt[400];
		int n1[NREQ] = { 0 }, n2[NREQ] = { 0 };
		uint64_t expect = 0;
		for (int round = 0; round < 2; round++) {
			for (int r = 0; r < NREQ; r++) {
				struct sampling_params sp = params_of(r);
				int n = prompt_of(r, prompt);
				if (round)
					expect += (uint64_t)(n - 1) / 16 * 16;
				CHECK(engine_submit(c, r, prompt, n, &sp, err, sizeof(err)) == 0, "%s", err);
				/* one at a time: each finds what the ones before left */
				drain(c, round ? o2 : o1, round ? n2 : n1, NREQ);
			}
		}
		struct engine_stats st;
		engine_stats(c, &st);
		for (int r = 0; r < NREQ; r++)
			CHECK(n1[r] == n2[r] && !memcmp(o1[r], o2[r], sizeof(int32_t) * n1[r]),
			      "pool %d request %d: tokens differ with the cache", pool, r);
		CHECK(st.kv_blocks_free == st.kv_blocks_total, "leak");
		if (!pool)
			CHECK(st.prefix_hits >= expect, "hits %llu, the repeats alone give %llu",
			      (unsigned long long)st.prefix_hits, (unsigned long long)expect);
		printf("     pool %s: %llu of %llu prompt tokens from the cache\n", pool ? "48 blocks" : "default",
		       (unsigned long long)st.prefix_hits, (unsigned long long)st.prefix_queries);
		engine_destroy(c);
	}
}

int main(void)
{
	RUN(test_prefill_then_decode_equals_one_engine);
	RUN(test_prefill_then_decode_copied_out);
	RUN(test_submit_errors);
	RUN(test_prefix_cache_same_tokens);
	return CHECK_DONE();
}
