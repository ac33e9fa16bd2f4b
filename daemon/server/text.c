/* text.c - UTF-8 repair, stop strings and JSON escaping (see text.h). */
#include "daemon/server/text.h"

#include <string.h>

static const char REPLACEMENT[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

/* Length of the sequence a lead byte starts, 0 when it cannot lead. */
static int utf8_lead_len(unsigned char c)
{
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return 2;
	if (c >= 0xE0 && c <= 0xEF)
		return 3;
	if (c >= 0xF0 && c <= 0xF4)
		return 4;
	return 0;
}

/* Whether c may be the k-th byte (k >= 1) of a sequence led by lead
 * (Unicode Table 3-7: no overlongs, surrogates or code points > U+10FFFF). */
static bool utf8_cont_ok(unsigned char lead, int k, unsigned char c)
{
	if (k == 1) {
		switch (lead) {
		case 0xE0: return c >= 0xA0 && c <= 0xBF;
		case 0xED: return c >= 0x80 && c <= 0x9F;
		case 0xF0: return c >= 0x90 && c <= 0xBF;
		case 0xF4: return c >= 0x80 && c <= 0x8F;
		}
	}
	return c >= 0x80 && c <= 0xBF;
}

/* Decodes bytes from a pending prefix plus input, one byte at a time. */
void utf8_stream_feed(struct utf8_stream *s, const char *in, size_t n, struct sbuf *out)
{
	sbuf_reserve(out, n * 3 + 12);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		if (s->npending) {
			unsigned char lead = s->pending[0];
			int need = utf8_lead_len(lead);
			if (utf8_cont_ok(lead, s->npending, c)) {
				s->pending[s->npending++] = c;
				if (s->npending == need) {
					sbuf_add(out, s->pending, (size_t)need);
					s->npending = 0;
				}
				continue;
			}
			/* maximal valid prefix becomes one U+FFFD; c starts afresh */
			sbuf_add(out, REPLACEMENT, 3);
			s->npending = 0;
		}
		int len = utf8_lead_len(c);
		if (len == 1) {
			sbuf_add(out, &c, 1);
		} else if (len == 0) {
			sbuf_add(out, REPLACEMENT, 3);
		} else {
			s->pending[0] = c;
			s->npending = 1;
		}
	}
}

void utf8_stream_flush(struct utf8_stream *s, struct sbuf *out)
{
	if (s->npending)
		sbuf_add(out, REPLACEMENT, 3);
	s->npending = 0;
}

bool stop_scan(const char *text, size_t n, char *const *stops, int nstops, size_t *emit)
{
	size_t best = n;
	bool found = false;
	for (int k = 0; k < nstops; k++) {
		size_t sl = strlen(stops[k]);
		if (!sl || sl > n)
			continue;
		const char *m = memmem(text, n, stops[k], sl);
		if (m && (size_t)(m - text) < best) {
			best = (size_t)(m - text);
			found = true;
		}
	}
	if (found) {
		*emit = best;
		return true;
	}
	/* hold back the longest tail that is a proper prefix of a stop string */
	size_t hold = 0;
	for (int k = 0; k < nstops; k++) {
		size_t sl = strlen(stops[k]);
		size_t maxl = sl - (sl > 0);
		if (maxl > n)
			maxl = n;
		for (size_t l = maxl; l > hold; l--) {
			if (memcmp(text + n - l, stops[k], l) == 0) {
				hold = l;
				break;
			}
		}
	}
	*emit = n - hold;
	return false;
}

void json_escape(struct sbuf *out, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	sbuf_reserve(out, n + 16);
	size_t run = 0; /* bytes copied as they are, flushed in one go */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f)
			continue;
		sbuf_add(out, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': sbuf_add(out, "\\\"", 2); break;
		case '\\': sbuf_add(out, "\\\\", 2); break;
		case '\n': sbuf_add(out, "\\n", 2); break;
		case '\r': sbuf_add(out, "\\r", 2); break;
		case '\t': sbuf_add(out, "\\t", 2); break;
		default: {
			char u[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
			sbuf_add(out, u, 6);
		}
		}
	}
	sbuf_add(out, s + run, n - run);
}
