/* fuzz_kv_wire.c - libFuzzer target for the decode worker's KV stream reader
 * (daemon/pd/kv_wire.c), fed in pieces whose sizes the input chooses, as
 * recv() would split it: whatever arrives, the reader never writes outside
 * what it asked for, is done only with every check passed, and a failure
 * always names a cause. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine.h"
#include "daemon/pd/kv_wire.h"

static const struct kv_model model = {
	.fingerprint = 0x1234567890abcdefull, .name = "tiny", .n_layers = 3, .n_kv_heads = 2,
	.head_dim = 8, .dtype = KPI_KV_WIRE_F16, .block_size = 16, .vocab_size = 259,
	.context_length = 2048,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	/* first byte: the prompt length the decode worker expects; second: the split */
	uint32_t tokens = 1 + data[0] % 40;
	size_t step = 1 + data[1] % 97;
	data += 2;
	size -= 2;
	struct kv_reader r;
	kv_reader_init(&r, &model, tokens);
	size_t off = 0;
	while (off < size) {
		char *p;
		size_t want;
		kv_reader_want(&r, &p, &want);
		if (!want)
			break;
		size_t k = size - off < step ? size - off : step;
		k = k < want ? k : want;
		memcpy(p, data + off, k);
		off += k;
		enum kv_reader_stage st = kv_reader_got(&r, k);
		assert(st == r.stage);
	}
	if (r.stage == KVR_FAILED)
		assert(r.status > 0 && r.status < KPI_KV_ERR__COUNT && r.err[0]);
	if (r.stage == KVR_DONE) {
		assert(r.hdr.n_tokens == tokens && r.received == r.hdr.payload_bytes);
		void *pl = kv_reader_take_payload(&r);
		assert(pl);
		engine_kv_buffer_free(pl);
	}
	kv_reader_free(&r);
	return 0;
}
