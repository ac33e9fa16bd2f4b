/* fuzz_chat.c - libFuzzer target for the prompt path of a chat request: the
 * chat template (chat_template_render), the tokenizer of the built-in tiny
 * model, and the way back to the wire (token pieces -> UTF-8 repair ->
 * stop-string scan -> JSON escaping, daemon/server/text.c).
 *
 * Input: a list of messages, each [role byte][len byte][len bytes content],
 * then the rest as one more user message. */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/model.h"
#include "daemon/engine/model_make.h"
#include "daemon/server/api.h"
#include "daemon/server/text.h"

#define MAX_MSGS 64

static struct model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char dir[] = "/tmp/kpi-fuzz-chat-XXXXXX", path[64], err[256];
	if (!mkdtemp(dir)) {
		perror("fuzz_chat: mkdtemp");
		abort();
	}
	snprintf(path, sizeof(path), "%s/tiny.gguf", dir);
	if (model_make(path, "tiny", 0, err, sizeof(err)) || !(model = model_load(path, err, sizeof(err)))) {
		fprintf(stderr, "fuzz_chat: cannot build the tiny model: %s\n", err);
		abort();
	}
	/* the mapping stays valid after the file is gone */
	unlink(path);
	rmdir(dir);
	return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t k;
		unsigned cp, min;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			k = 1; cp = c & 0x1f; min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2; cp = c & 0x0f; min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			k = 3; cp = c & 0x07; min = 0x10000;
		} else {
			return false;
		}
		for (size_t j = 1; j <= k; j++) {
			if (i + j >= n || (s[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

static const char *const roles[] = { "system", "user", "assistant" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct chat_msg msgs[MAX_MSGS];
	int n = 0;
	size_t off = 0;
	while (n < MAX_MSGS - 1 && size - off >= 2) {
		size_t len = data[off + 1];
		if (len > size - off - 2)
			break;
		msgs[n].role = roles[data[off] % 3];
		msgs[n].content = (const char *)data + off + 2;
		msgs[n].content_len = len;
		n++;
		off += 2 + len;
	}
	msgs[n].role = "user";
	msgs[n].content = (const char *)data + off;
	msgs[n].content_len = size - off;
	n++;

	/* the template is exactly its documented text */
	struct sbuf text = { 0 }, want = { 0 };
	chat_template_render(msgs, n, &text);
	for (int i = 0; i < n; i++) {
		sbuf_printf(&want, "<|%s|>\n", msgs[i].role);
		sbuf_add(&want, msgs[i].content, msgs[i].content_len);
		sbuf_adds(&want, "</s>\n");
	}
	sbuf_adds(&want, "<|assistant|>\n");
	assert(text.len == want.len && memcmp(text.data, want.data, text.len) == 0);

	/* tokenize: every id in the vocabulary, and a byte vocabulary spells the
	 * prompt back exactly */
	const struct tokenizer *tok = &model->tok;
	int cap = (int)text.len * 3 + 8;
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
	int nt = tokenizer_encode(tok, text.data, text.len, ids, cap);
	assert(nt >= 0 && nt <= cap);
	/* a short output buffer gets the same count and no overflow */
	int32_t few[4];
	assert(tokenizer_encode(tok, text.data, text.len, few, 4) == nt);

	struct sbuf back = { 0 }, wire = { 0 }, json = { 0 };
	struct utf8_stream us = { 0 };
	for (int i = 0; i < nt; i++) {
		assert(ids[i] >= 0 && ids[i] < tok->n_vocab);
		char piece[256];
		int pl = tokenizer_piece(tok, ids[i], piece, sizeof(piece));
		assert(pl >= 0 && (size_t)pl <= sizeof(piece));
		sbuf_add(&back, piece, (size_t)pl);
		utf8_stream_feed(&us, piece, (size_t)pl, &wire);
	}
	utf8_stream_flush(&us, &wire);
	if (!tok->escape_spaces)
		assert(back.len == text.len && (!back.len || memcmp(back.data, text.data, back.len) == 0));
	assert(utf8_valid((const unsigned char *)wire.data, wire.len));

	/* stop strings taken from the first message: the scan never points past
	 * the text, and a match really is there */
	char *stops[2];
	int nstops = 0;
	if (n > 1 && msgs[0].content_len > 0 && !memchr(msgs[0].content, 0, msgs[0].content_len))
		stops[nstops++] = strndup(msgs[0].content, msgs[0].content_len);
	size_t emit = 0;
	bool hit = stop_scan(wire.data ? wire.data : "", wire.len, stops, nstops, &emit);
	assert(emit <= wire.len);
	if (hit)
		assert(memcmp(wire.data + emit, stops[0], strlen(stops[0])) == 0);

	/* JSON escaping: no raw control characters, quotes or lone backslashes */
	json_escape(&json, wire.data ? wire.data : "", wire.len);
	for (size_t i = 0; i < json.len; i++) {
		unsigned char c = (unsigned char)json.data[i];
		assert(c >= 0x20);
		if (c == '\\') {
			assert(i + 1 < json.len);
			i++;
		} else {
			assert(c != '"');
		}
	}
	for (int i = 0; i < nstops; i++)
		free(stops[i]);
	free(ids);
	sbuf_free(&text);
	sbuf_free(&want);
	sbuf_free(&back);
	sbuf_free(&wire);
	sbuf_free(&json);
	return 0;
}
