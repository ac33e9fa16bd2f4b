/* http_digest.c - FNV-1a over a request body, the string value of every
 * "model" key skipped, with the whitespace around its ':' (a key: the quoted
 * name, then ':'; the same name as a string value is hashed like any text). */
#include "http_digest.h"

enum { D_TEXT, D_KEY, D_VALUE_START, D_VALUE };

static const char model_key[] = "\"model\"";

void http_digest_init(struct http_digest *d, uint64_t key)
{
	*d = (struct http_digest){ .h = 0xcbf29ce484222325ULL ^ key };
}

static void hash(struct http_digest *d, uint8_t c)
{
	d->h = (d->h ^ c) * 0x100000001b3ULL;
	d->bytes++;
}

void http_digest_feed(struct http_digest *d, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];
		bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
		switch (d->state) {
		case D_VALUE:                   /* the model's name: not hashed */
			if (d->escape)
				d->escape = false;
			else if (c == '\\')
				d->escape = true;
			else if (c == '"')
				d->state = D_TEXT;
			continue;
		case D_VALUE_START:             /* after "model" : (whitespace there is not hashed) */
			if (ws)
				continue;
			if (c == '"') {
				d->state = D_VALUE;
				continue;
			}
			d->state = D_TEXT;      /* not a string: hashed as it is */
			break;
		case D_KEY:                     /* after "model": a key only if ':' follows */
			if (ws)
				continue;
			d->state = c == ':' ? D_VALUE_START : D_TEXT;
			break;
		}
		if (d->state == D_TEXT) {
			d->matched = c == (uint8_t)model_key[d->matched] ? d->matched + 1 : c == '"';
			if (d->matched == sizeof(model_key) - 1) {
				d->state = D_KEY;
				d->matched = 0;
			}
		}
		hash(d, c);
	}
}

void http_digest_gap(struct http_digest *d)
{
	d->gap = true;
}

bool http_digest_get(const struct http_digest *d, uint64_t *out)
{
	*out = d->h;
	return !d->gap && d->bytes > 0;
}
