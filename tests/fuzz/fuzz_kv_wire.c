/* fuzz_kv_wire.c - libFuzzer target for the decode worker's KV stream reader
 * (daemon/pd/kv_wire.c), fed in pieces whose sizes the input chooses, as
 * readv() would fill them, into a payload buffer or into held blocks each
 * its own allocation: whatever arrives, the reader never writes outside
 * what it asked for, is done only with every check passed, and a failure
 * always names a cause. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "daemon/engine.h"
#include "daemon/pd/kv_wire.h"

static const struct kv_model model = {
	.fingerprint = 0x1234567890abcdefull, .name = "tiny", .n_layers = 3, .n_kv_heads = 2,
	.head_dim = 8, .dtype = KPI_KV_WIRE_F16, .block_size = 16, .vocab_size = 259,
	.context_length = 2048,
};

enum { ROW = 8 * 2 };

/* Blocks held for the KV (kv_reader_into), each run of rows its own
 * allocation, so a byte written outside them is a sanitizer report. */
static struct engine_kv_in *held_blocks(uint32_t tokens, int bs)
{
	int nb = ((int)tokens + bs - 1) / bs, n = 3 * nb * 2 * 2;
	struct engine_kv_in *in = malloc(sizeof(*in) + sizeof(void *) * (size_t)n);
	*in = (struct engine_kv_in){ 1, (int)tokens, nb, bs, 3, 2 };
	for (int i = 0; i < n; i++)
		in->rows[i] = malloc((size_t)bs * ROW);
	return in;
}

static void held_free(struct engine_kv_in *in)
{
	if (!in)
		return;
	for (int i = 0; i < 3 * in->n_blocks * 2 * 2; i++)
		free(in->rows[i]);
	free(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	/* first byte: the prompt length the decode worker expects; second: the
	 * split, and (its top bits) into held blocks of 16 or 8 positions */
	uint32_t tokens = 1 + data[0] % 40;
	size_t step = 1 + data[1] % 61;
	struct engine_kv_in *in = data[1] & 0x80 ? held_blocks(tokens, data[1] & 0x40 ? 8 : 16) : NULL;
	data += 2;
	size -= 2;
	struct kv_reader r;
	kv_reader_init(&r, &model, tokens);
	if (in)
		assert(kv_reader_into(&r, in));
	size_t off = 0;
	while (off < size) {
		/* as readv would: what kv_reader_want_iov offers, filled in order */
		struct iovec iov[4];
		int n = kv_reader_want_iov(&r, iov, 1 + (int)(step % 4));
		if (!n)
			break;
		size_t k = size - off < step ? size - off : step, took = 0;
		for (int i = 0; i < n && took < k; i++) {
			size_t c = iov[i].iov_len < k - took ? iov[i].iov_len : k - took;
			memcpy(iov[i].iov_base, data + off + took, c);
			took += c;
		}
		off += took;
		enum kv_reader_stage st = kv_reader_got(&r, took);
		assert(st == r.stage);
	}
	if (r.stage == KVR_FAILED)
		assert(r.status > 0 && r.status < KPI_KV_ERR__COUNT && r.err[0]);
	if (r.stage == KVR_DONE) {
		assert(r.hdr.n_tokens == tokens && r.received == r.hdr.payload_bytes);
		void *pl = kv_reader_take_payload(&r);
		assert(in ? !pl : pl != NULL);
		engine_kv_buffer_free(pl);
	}
	kv_reader_free(&r);
	held_free(in);
	return 0;
}
