/* fuzz_json.c - libFuzzer target for the request-body decoder
 * (api_request_parse in daemon/server/api.c, on jansson): any byte string as a
 * completion body and as a chat body. A decoded request must be internally
 * consistent, and an error must be one NUL-terminated sentence. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "daemon/server/api.h"

static void decode(const char *buf, size_t len, bool chat)
{
	struct api_request req;
	bool bad_json;
	char err[256];
	err[0] = 0;
	int rc = api_request_parse(buf, len, chat, &req, &bad_json, err, sizeof(err));
	if (rc < 0) {
		assert(err[0] && strlen(err) < sizeof(err));
	} else {
		assert(rc == 0);
		assert(req.chat == chat);
		assert(req.prompt || req.prompt_ids);
		if (req.prompt)
			assert(req.prompt[req.prompt_len] == 0);
		if (req.prompt_ids) {
			assert(req.n_prompt_ids > 0);
			for (int i = 0; i < req.n_prompt_ids; i++)
				assert(req.prompt_ids[i] >= 0);
		}
		assert(req.max_tokens == -1 || (req.max_tokens >= 1 && req.max_tokens <= 1000000000));
		assert(req.temperature >= 0 && req.temperature <= 2);
		assert(req.top_p > 0 && req.top_p <= 1);
		assert(req.n_stop >= 0 && req.n_stop <= API_MAX_STOP);
		for (int i = 0; i < req.n_stop; i++)
			assert(req.stop[i] && strlen(req.stop[i]) >= 1 &&
			       strlen(req.stop[i]) <= API_MAX_STOP_LEN);
	}
	api_request_free(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	decode((const char *)data, size, false);
	decode((const char *)data, size, true);
	return 0;
}
