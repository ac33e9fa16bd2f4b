/* fuzz_gguf.c - libFuzzer target for the model loader: the GGUF reader
 * (daemon/engine/gguf.c) and everything model_load checks on top of it
 * (hyperparameters, tokenizer arrays, tensor shapes). The input is the whole
 * file, served from a memfd so the loader maps it exactly as it maps a model
 * on disk. A file that loads must also tokenize and spell back text. */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/model.h"

static int memfd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	memfd = memfd_create("kpi-fuzz-gguf", MFD_CLOEXEC);
	if (memfd < 0) {
		perror("fuzz_gguf: memfd_create");
		abort();
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	return 0;
}

static void write_all(const uint8_t *data, size_t size)
{
	if (ftruncate(memfd, 0) < 0 || pwrite(memfd, data, size, 0) != (ssize_t)size) {
		perror("fuzz_gguf: writing the memfd");
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	write_all(data, size);
	char err[512];
	err[0] = 0;
	struct model *m = model_load(path, err, sizeof(err));
	if (!m) {
		assert(err[0] && strlen(err) < sizeof(err));
		return 0;
	}
	const struct model_info *mi = &m->info;
	assert(mi->vocab_size == m->tok.n_vocab && mi->vocab_size > 0);
	assert(mi->bos_id >= 0 && mi->bos_id < mi->vocab_size);
	assert(mi->eos_id >= 0 && mi->eos_id < mi->vocab_size);
	assert(mi->dim == mi->n_heads * mi->head_dim);

	/* every tensor view lies inside the mapping */
	const struct gguf *g = m->gguf;
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const struct gguf_tensor *t = &g->tensors[i];
		if (t->data)
			assert((const uint8_t *)t->data >= g->map &&
			       (const uint8_t *)t->data + t->nbytes <= g->map + g->size);
	}

	static const char text[] = "Hello, w\xc3\xb6rld! \xe2\x96\x81 <s> \xff\xfe";
	int32_t ids[256];
	int n = tokenizer_encode(&m->tok, text, sizeof(text) - 1, ids, 256);
	assert(n >= 0);
	for (int i = 0; i < n && i < 256; i++) {
		assert(ids[i] >= 0 && ids[i] < m->tok.n_vocab);
		char piece[64];
		int pl = tokenizer_piece(&m->tok, ids[i], piece, sizeof(piece));
		assert(pl >= 0);
	}
	for (int32_t id = 0; id < m->tok.n_vocab && id < 4096; id++) {
		char piece[64];
		(void)tokenizer_piece(&m->tok, id, piece, sizeof(piece));
	}
	assert(tokenizer_piece(&m->tok, -1, ids == NULL ? NULL : (char *)ids, 4) < 0);
	assert(tokenizer_piece(&m->tok, m->tok.n_vocab, (char *)ids, 4) < 0);
	model_free(m);
	return 0;
}
