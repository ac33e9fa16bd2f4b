/* test_engine_gguf.c - broken GGUF files give one clear error line naming
 * the key or tensor at fault, never a crash; a good file loads. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "tests/unit/test_engine_util.h"
#include "daemon/engine/model.h"

static char err[512];

/* Loads path expecting failure; the error is one line containing want. */
static void expect_fail(const char *path, const char *want)
{
	err[0] = 0;
	struct model *m = model_load(path, err, sizeof(err));
	CHECK(m == NULL, "%s loaded but should fail with '%s'", path, want);
	CHECK(err[0] != 0, "no error message");
	CHECK(strchr(err, '\n') == NULL, "error is not one line: %s", err);
	CHECK(strstr(err, want) != NULL, "error '%s' does not name '%s'", err, want);
}

static void test_good_mini_loads(void)
{
	const char *p = tpath("good.gguf");
	struct mini_opts o = { 0 };
	write_mini(p, &o);
	struct model *m = model_load(p, err, sizeof(err));
	CHECK(m != NULL, "%s", err);
	CHECK(m->info.dim == 8 && m->info.n_kv_heads == 1 && m->info.vocab_size == 259, "dims");
	CHECK(m->info.head_dim == 4, "head_dim defaults to dim / heads: %d", m->info.head_dim);
	CHECK(m->output.data == m->tok_embd.data, "no output.weight: tied to token_embd");
	model_free(m);
}

static void test_presets_load(void)
{
	struct model *m = model_load(preset_path("tiny"), err, sizeof(err));
	CHECK(m != NULL, "%s", err);
	const struct model_info *i = &m->info;
	CHECK(i->dim == 256 && i->n_layers == 4 && i->n_heads == 4 && i->n_kv_heads == 2 &&
	      i->head_dim == 64 && i->ffn_dim == 768 && i->context_length == 2048 && i->vocab_size == 259,
	      "tiny preset dims");
	CHECK(m->tok.byte_token[0] == 3 && m->tok.byte_token[255] == 258, "byte tokens");
	CHECK(i->bos_id == 1 && i->eos_id == 2, "bos/eos");
	model_free(m);
}

static void test_make_model_deterministic(void)
{
	char e2[256];
	const char *a = tpath("a.gguf"), *b = tpath("b.gguf"), *c = tpath("c.gguf");
	CHECK(model_make(a, "tiny", 7, e2, sizeof(e2)) == 0, "%s", e2);
	CHECK(model_make(b, "tiny", 7, e2, sizeof(e2)) == 0, "%s", e2);
	CHECK(model_make(c, "tiny", 8, e2, sizeof(e2)) == 0, "%s", e2);
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb"), *fc = fopen(c, "rb");
	int same_ab = 1, same_ac = 1, ca, cb, cc;
	do {
		ca = fgetc(fa), cb = fgetc(fb), cc = fgetc(fc);
		same_ab &= ca == cb;
		same_ac &= ca == cc;
	} while (ca != EOF);
	fclose(fa);
	fclose(fb);
	fclose(fc);
	CHECK(same_ab, "same seed, different bytes");
	CHECK(!same_ac, "different seeds, same bytes");
	CHECK(model_make(a, "huge", 0, e2, sizeof(e2)) == -1 && strstr(e2, "huge"), "unknown preset: %s", e2);
}

static void test_bad_magic(void)
{
	const char *p = tpath("magic.gguf");
	FILE *f = fopen(p, "wb");
	fputs("GGML this is not a gguf file at all", f);
	fclose(f);
	expect_fail(p, "not a GGUF file");
}

static void test_missing_file(void)
{
	expect_fail(tpath("does-not-exist.gguf"), "does-not-exist.gguf");
}

/* Cut a good file at many lengths: every cut is a clean error. */
static void test_truncated(void)
{
	const char *good = tpath("good2.gguf"), *cut = tpath("cut.gguf");
	struct mini_opts o = { 0 };
	write_mini(good, &o);
	struct stat st;
	stat(good, &st);
	FILE *f = fopen(good, "rb");
	char *all = malloc(st.st_size);
	CHECK(fread(all, 1, st.st_size, f) == (size_t)st.st_size, "read");
	fclose(f);
	int cuts = 0;
	for (off_t n = 0; n < st.st_size; n += n < 4096 ? 7 : 301) {
		FILE *g = fopen(cut, "wb");
		fwrite(all, 1, n, g);
		fclose(g);
		err[0] = 0;
		struct model *m = model_load(cut, err, sizeof(err));
		CHECK(m == NULL, "file cut at %lld of %lld loaded", (long long)n, (long long)st.st_size);
		CHECK(strstr(err, "truncated"), "cut at %lld: error does not say truncated: %s", (long long)n, err);
		CHECK(strchr(err, '\n') == NULL, "not one line: %s", err);
		cuts++;
	}
	free(all);
	CHECK(cuts > 50, "only %d cuts", cuts);
}

static void test_truncated_names_tensor(void)
{
	const char *good = tpath("good3.gguf");
	struct mini_opts o = { 0 };
	write_mini(good, &o);
	struct stat st;
	stat(good, &st);
	CHECK(truncate(good, st.st_size - 8) == 0, "truncate");
	expect_fail(good, "blk.0.ffn_down.weight");
}

static void test_missing_keys(void)
{
	static const char *keys[] = {
		"general.architecture", "llama.context_length", "llama.embedding_length",
		"llama.block_count", "llama.feed_forward_length", "llama.attention.head_count",
		"llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model", "tokenizer.ggml.tokens",
		"tokenizer.ggml.scores", "tokenizer.ggml.token_type",
	};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *p = tpath("nokey.gguf");
		struct mini_opts o = { .skip_key = keys[i] };
		write_mini(p, &o);
		expect_fail(p, keys[i]);
	}
}

static void test_unsupported_arch(void)
{
	const char *p = tpath("arch.gguf");
	struct mini_opts o = { .arch = "falcon" };
	write_mini(p, &o);
	expect_fail(p, "falcon");
	expect_fail(p, "general.architecture");
}

static void test_unsupported_tensor_type(void)
{
	const char *p = tpath("q6.gguf");
	struct mini_opts o = { .bad_type_tensor = "blk.0.attn_k.weight" };
	write_mini(p, &o);
	expect_fail(p, "blk.0.attn_k.weight");
	expect_fail(p, "Q6_K");
	expect_fail(p, "Q8_0, Q4_0 and Q4_K");
}

static void test_missing_tensor(void)
{
	const char *p = tpath("notensor.gguf");
	struct mini_opts o = { .skip_tensor = "blk.0.ffn_up.weight" };
	write_mini(p, &o);
	expect_fail(p, "missing tensor 'blk.0.ffn_up.weight'");
}

static void test_garbage_never_crashes(void)
{
	/* random bytes after a valid magic and version: errors, no crash */
	const char *p = tpath("garbage.gguf");
	uint64_t s = 1;
	for (int r = 0; r < 200; r++) {
		FILE *f = fopen(p, "wb");
		fwrite("GGUF\3\0\0\0", 1, 8, f);
		int n = 16 + r * 5;
		for (int i = 0; i < n; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			fputc(r % 3 == 0 && i < 16 ? (i == 0 ? 1 : 0) : (int)(s >> 56), f);
		}
		fclose(f);
		err[0] = 0;
		struct model *m = model_load(p, err, sizeof(err));
		CHECK(m == NULL && err[0], "garbage #%d loaded", r);
	}
}

static void test_default_model_cached(void)
{
	char path[1024], e2[256];
	setenv("XDG_CACHE_HOME", tpath("cache"), 1);
	CHECK(model_default_path(path, sizeof(path), e2, sizeof(e2)) == 0, "%s", e2);
	CHECK(strstr(path, "/cache/kpiscope/tiny-s0.gguf"), "%s", path);
	struct stat a, b;
	CHECK(stat(path, &a) == 0 && a.st_size > 1000000, "written");
	CHECK(model_default_path(path, sizeof(path), e2, sizeof(e2)) == 0, "%s", e2);
	CHECK(stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec,
	      "the second call must reuse the file");
	struct model *m = model_load(path, err, sizeof(err));
	CHECK(m && m->info.dim == 256, "%s", err);
	model_free(m);
	setenv("XDG_CACHE_HOME", "/proc/kpi-no-such-dir", 1);
	CHECK(model_default_path(path, sizeof(path), e2, sizeof(e2)) == -1 && strstr(e2, "--model"), "%s", e2);
	unsetenv("XDG_CACHE_HOME");
}

int main(void)
{
	RUN(test_good_mini_loads);
	RUN(test_presets_load);
	RUN(test_make_model_deterministic);
	RUN(test_bad_magic);
	RUN(test_missing_file);
	RUN(test_truncated);
	RUN(test_truncated_names_tensor);
	RUN(test_missing_keys);
	RUN(test_unsupported_arch);
	RUN(test_unsupported_tensor_type);
	RUN(test_missing_tensor);
	RUN(test_garbage_never_crashes);
	RUN(test_default_model_cached);
	return CHECK_DONE();
}
