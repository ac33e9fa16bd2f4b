/* test_engine_tokenizer.c - every byte round-trips through the byte
 * vocabulary; SPM merges pick the highest-scoring pair; pieces decode. */
#include "tests/unit/check.h"
#include "tests/unit/test_engine_util.h"
#include "daemon/engine.h"
#include "daemon/engine/model.h"

static char err[512];

static struct model *tiny(void)
{
	static struct model *m;
	if (!m) {
		m = model_load(preset_path("tiny"), err, sizeof(err));
		CHECK(m != NULL, "%s", err);
	}
	return m;
}

static void test_every_byte_round_trips(void)
{
	const struct tokenizer *t = &tiny()->tok;
	for (int b = 0; b < 256; b++) {
		char c = (char)b, out[8];
		int32_t id[4];
		int n = tokenizer_encode(t, &c, 1, id, 4);
		CHECK(n == 1, "byte %d: %d tokens", b, n);
		CHECK(id[0] == 3 + b, "byte %d -> token %d, want %d", b, id[0], 3 + b);
		CHECK(tokenizer_piece(t, id[0], out, sizeof(out)) == 1 && (unsigned char)out[0] == b,
		      "token %d does not decode to byte %d", id[0], b);
	}
}

static void test_all_bytes_string_round_trips(void)
{
	const struct tokenizer *t = &tiny()->tok;
	char text[1024];
	for (int i = 0; i < 1024; i++)
		text[i] = (char)((i * 37 + 11) & 255); /* every byte, invalid UTF-8 included */
	int32_t ids[2048];
	int n = tokenizer_encode(t, text, sizeof(text), ids, 2048);
	CHECK(n == 1024, "%d tokens", n);
	char back[1024];
	int k = 0;
	for (int i = 0; i < n; i++)
		k += tokenizer_piece(t, ids[i], back + k, sizeof(back) - k);
	CHECK(k == 1024 && memcmp(back, text, 1024) == 0, "round trip differs");
	/* UTF-8 text: multi-byte characters fall back to their bytes */
	const char *u = "héllo wörld ✓ 𝄞";
	n = tokenizer_encode(t, u, strlen(u), ids, 2048);
	CHECK(n == (int)strlen(u), "%d tokens for %zu bytes", n, strlen(u));
	k = 0;
	for (int i = 0; i < n; i++)
		k += tokenizer_piece(t, ids[i], back + k, sizeof(back) - k);
	CHECK(k == (int)strlen(u) && memcmp(back, u, k) == 0, "utf-8 round trip");
}

static void test_engine_tokenize_bos_and_sizes(void)
{
	struct engine_config c = { .model_path = preset_path("tiny"), .max_seqs = 2, .max_batched_tokens = 64,
				   .threads = 1 };
	struct engine *e = engine_create(&c, err, sizeof(err));
	CHECK(e != NULL, "%s", err);
	int32_t ids[4];
	int n = engine_tokenize(e, "hello", 5, true, ids, 4);
	CHECK(n == 6, "needs 6 (bos + 5): %d", n);
	CHECK(ids[0] == engine_model(e)->bos_id && ids[1] == 3 + 'h', "bos then bytes");
	char buf[4];
	CHECK(engine_token_piece(e, engine_model(e)->bos_id, buf, 4) == 0, "control tokens print nothing");
	CHECK(engine_token_piece(e, 99999, buf, 4) == -1, "out of range id");
	engine_destroy(e);
}

static void test_spm_merges_by_score(void)
{
	/* vocabulary with space escaping and merges: "▁" "a" "b" "ab" "▁a" "abab" */
	static const char *extra[] = { "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a", "abab", "ba" };
	static const float sc[] = { -1, -2, -2, -0.5f, -0.7f, -0.1f, -0.2f };
	const char *p = tpath("spm.gguf");
	struct mini_opts o = { .extra = extra, .extra_scores = sc, .n_extra = 7 };
	write_mini(p, &o);
	struct model *m = model_load(p, err, sizeof(err));
	CHECK(m != NULL, "%s", err);
	const struct tokenizer *t = &m->tok;
	CHECK(t->escape_spaces, "a vocabulary with U+2581 escapes spaces");
	int32_t ids[16];
	/* "abab a": a b a b ▁ a -> ab ab ▁a (score -0.5 beats ba -0.2? no: ba -0.2 is higher
	 * than ab -0.5, so the first merge is b+a in the middle: a [ba] b ▁ a; then
	 * ▁a (-0.7); a, ba, b have no merges left) */
	int n = tokenizer_encode(t, "abab a", 6, ids, 16);
	int base = 259;
	CHECK(n == 4, "%d tokens", n);
	CHECK(ids[0] == base + 1 && ids[1] == base + 6 && ids[2] == base + 2 && ids[3] == base + 4,
	      "got %d %d %d %d", ids[0], ids[1], ids[2], ids[3]);
	char out[64];
	int k = 0;
	for (int i = 0; i < n; i++)
		k += tokenizer_piece(t, ids[i], out + k, sizeof(out) - k);
	CHECK(k == 6 && memcmp(out, "abab a", 6) == 0, "decodes back with spaces: '%.*s'", k, out);
	/* unknown characters spell as bytes */
	n = tokenizer_encode(t, "z", 1, ids, 16);
	CHECK(n == 1 && ids[0] == 3 + 'z', "byte fallback");
	model_free(m);
}

int main(void)
{
	RUN(test_every_byte_round_trips);
	RUN(test_all_bytes_string_round_trips);
	RUN(test_engine_tokenize_bos_and_sizes);
	RUN(test_spm_merges_by_score);
	return CHECK_DONE();
}
