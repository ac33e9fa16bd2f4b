/* prom_proto.c - the text exposition read back and written as delimited
 * io.prometheus.client.MetricFamily messages (prom_proto.h). */
#include <stdlib.h>
#include <string.h>
#include "prom_proto.h"

/* ---- the writer ---------------------------------------------------------- */

void pbuf_free(struct pbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void pbuf_bytes(struct pbuf *b, const void *p, size_t n)
{
	if (b->oom || !n)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q) {
			b->oom = true;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

void pbuf_varint(struct pbuf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;

	do {
		tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	pbuf_bytes(b, tmp, n);
}

static void tag(struct pbuf *b, int field, int wire)
{
	pbuf_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

void pbuf_uint(struct pbuf *b, int field, uint64_t v)
{
	tag(b, field, 0);
	pbuf_varint(b, v);
}

void pbuf_sint(struct pbuf *b, int field, int64_t v)
{
	tag(b, field, 0);
	pbuf_varint(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

void pbuf_double(struct pbuf *b, int field, double v)
{
	uint64_t u;
	uint8_t le[8];

	memcpy(&u, &v, sizeof(u));
	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(u >> (8 * i));
	tag(b, field, 1);
	pbuf_bytes(b, le, sizeof(le));
}

void pbuf_string(struct pbuf *b, int field, const char *s, size_t n)
{
	tag(b, field, 2);
	pbuf_varint(b, n);
	pbuf_bytes(b, s, n);
}

void pbuf_message(struct pbuf *b, int field, const struct pbuf *m)
{
	tag(b, field, 2);
	pbuf_varint(b, m->len);
	pbuf_bytes(b, m->p, m->len);
	b->oom |= m->oom;
}

/* ---- metrics.proto ---------------------------------------------------------- */

enum { MF_NAME = 1, MF_HELP = 2, MF_TYPE = 3, MF_METRIC = 4 };
enum { M_LABEL = 1, M_GAUGE = 2, M_COUNTER = 3, M_UNTYPED = 5, M_TIMESTAMP = 6, M_HISTOGRAM = 7 };
enum { LP_NAME = 1, LP_VALUE = 2 };
enum { VALUE = 1 };     /* Gauge, Counter, Untyped */
enum { H_COUNT = 1, H_SUM = 2, H_BUCKET = 3 };
enum { B_CUMULATIVE = 1, B_UPPER = 2 };
enum { T_COUNTER = 0, T_GAUGE = 1, T_SUMMARY = 2, T_UNTYPED = 3, T_HISTOGRAM = 4 };

/* ---- the reader --------------------------------------------------------------- */

#define NAME_MAX_LEN 200

struct family {
	char name[NAME_MAX_LEN];
	char *help;
	int type;
	struct pbuf metrics;            /* the Metric fields, each a message */
	int n_metrics;
};

/* the histogram series being read: its buckets and sum until its _count */
struct series {
	struct pbuf buckets;
	double sum;
};

struct reader {
	struct family f;
	struct series s;
	prom_native_fn native;
	void *ctx;
	FILE *out;
	char *err;
	size_t errlen;
	int line;
};

static int fail(struct reader *r, const char *what)
{
	snprintf(r->err, r->errlen, "line %d of the exposition: %s", r->line, what);
	return -1;
}

/* Forgets the family being read (and its histogram series). */
static void family_reset(struct reader *r)
{
	struct family *f = &r->f;

	free(f->help);
	pbuf_free(&f->metrics);
	memset(f, 0, sizeof(*f));
	f->type = T_UNTYPED;
	pbuf_free(&r->s.buckets);
	memset(&r->s, 0, sizeof(r->s));
}

/* Writes the family being read, if it has a sample, and forgets it. */
static int family_flush(struct reader *r)
{
	struct family *f = &r->f;
	int rc = 0;

	if (f->n_metrics) {
		struct pbuf m = { 0 };
		pbuf_string(&m, MF_NAME, f->name, strlen(f->name));
		if (f->help)
			pbuf_string(&m, MF_HELP, f->help, strlen(f->help));
		pbuf_uint(&m, MF_TYPE, (uint64_t)f->type);
		pbuf_bytes(&m, f->metrics.p, f->metrics.len);
		m.oom |= f->metrics.oom;
		struct pbuf len = { 0 };
		pbuf_varint(&len, m.len);
		if (m.oom || len.oom)
			rc = fail(r, "out of memory");
		else if (fwrite(len.p, 1, len.len, r->out) != len.len || fwrite(m.p, 1, m.len, r->out) != m.len)
			rc = fail(r, "write failed");
		pbuf_free(&m);
		pbuf_free(&len);
	}
	family_reset(r);
	return rc;
}

/* The HELP text unescaped (\\ and \n). */
static char *unescape_help(const char *p, const char *end)
{
	char *s = malloc((size_t)(end - p) + 1), *o = s;

	if (!s)
		return NULL;
	for (; p < end; p++) {
		if (*p == '\\' && p + 1 < end && (p[1] == '\\' || p[1] == 'n')) {
			*o++ = p[1] == 'n' ? '\n' : '\\';
			p++;
		} else {
			*o++ = *p;
		}
	}
	*o = 0;
	return s;
}

static bool name_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
	       (!first && c >= '0' && c <= '9');
}

/* "# HELP name text" and "# TYPE name type"; other comments are skipped. */
static int comment(struct reader *r, const char *p, const char *end)
{
	bool help = end - p > 7 && !strncmp(p, "# HELP ", 7), type = end - p > 7 && !strncmp(p, "# TYPE ", 7);
	if (!help && !type)
		return 0;
	p += 7;
	const char *n = p;
	while (p < end && *p != ' ')
		p++;
	if (p == n || p - n >= NAME_MAX_LEN)
		return fail(r, "a family name that is empty or too long");
	bool same = strlen(r->f.name) == (size_t)(p - n) && !strncmp(r->f.name, n, (size_t)(p - n));
	if (!same) {
		if (family_flush(r))
			return -1;
		memcpy(r->f.name, n, (size_t)(p - n));
	}
	if (p < end)
		p++;
	if (help) {
		free(r->f.help);
		r->f.help = unescape_help(p, end);
		return r->f.help ? 0 : fail(r, "out of memory");
	}
	static const struct { const char *word; int type; } types[] = {
		{ "counter", T_COUNTER }, { "gauge", T_GAUGE }, { "histogram", T_HISTOGRAM },
		{ "summary", T_SUMMARY }, { "untyped", T_UNTYPED },
	};
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if ((size_t)(end - p) == strlen(types[i].word) && !strncmp(p, types[i].word, (size_t)(end - p))) {
			r->f.type = types[i].type;
			if (r->f.type == T_SUMMARY)
				return fail(r, "summaries are not written as protobuf here");
			return 0;
		}
	return fail(r, "an unknown TYPE");
}

/* Reads the label set at p ('{' ... '}') into labels (LabelPair fields),
 * le aside; *raw and *raw_len: the text between the braces. */
static int labels(struct reader *r, const char **pp, const char *end, struct pbuf *lp, char *le, size_t le_len,
		  const char **raw, size_t *raw_len)
{
	const char *p = *pp;

	*raw = p + 1;
	p++;
	while (p < end && *p != '}') {
		const char *n = p;
		while (p < end && name_char(*p, p == n))
			p++;
		size_t nlen = (size_t)(p - n);
		if (!nlen || p + 1 >= end || p[0] != '=' || p[1] != '"')
			return fail(r, "a label that is not name=\"value\"");
		p += 2;
		struct pbuf v = { 0 };
		while (p < end && *p != '"') {
			char c = *p++;
			if (c == '\\' && p < end) {
				c = *p++;
				if (c == 'n')
					c = '\n';
			}
			pbuf_bytes(&v, &c, 1);
		}
		if (p >= end) {
			pbuf_free(&v);
			return fail(r, "an unterminated label value");
		}
		p++;
		if (nlen == 2 && !strncmp(n, "le", 2)) {
			snprintf(le, le_len, "%.*s", (int)v.len, v.p ? (char *)v.p : "");
		} else {
			struct pbuf pair = { 0 };
			pbuf_string(&pair, LP_NAME, n, nlen);
			pbuf_string(&pair, LP_VALUE, v.p ? (char *)v.p : "", v.len);
			pbuf_message(lp, M_LABEL, &pair);
			pbuf_free(&pair);
		}
		pbuf_free(&v);
		if (p < end && *p == ',')
			p++;
	}
	if (p >= end)
		return fail(r, "an unterminated label set");
	*raw_len = (size_t)(p - *raw);
	*pp = p + 1;
	return 0;
}

static bool suffix(const char *name, size_t n, const char *fam, const char *sfx)
{
	size_t f = strlen(fam), s = strlen(sfx);
	return n == f + s && !strncmp(name, fam, f) && !strncmp(name + f, sfx, s);
}

static int sample(struct reader *r, const char *p, const char *end)
{
	const char *n = p;
	while (p < end && name_char(*p, p == n))
		p++;
	size_t nlen = (size_t)(p - n);
	if (!nlen || nlen >= NAME_MAX_LEN)
		return fail(r, "a sample with no metric name");
	struct family *f = &r->f;
	enum { PLAIN, BUCKET, SUM, COUNT } part = PLAIN;
	if (f->type == T_HISTOGRAM) {
		part = suffix(n, nlen, f->name, "_bucket") ? BUCKET : suffix(n, nlen, f->name, "_sum") ? SUM :
		       suffix(n, nlen, f->name, "_count") ? COUNT : PLAIN;
		if (part == PLAIN)
			return fail(r, "a sample of a histogram family that is not _bucket, _sum or _count");
	} else if (strlen(f->name) != nlen || strncmp(f->name, n, nlen)) {
		/* a sample with no family of its own: untyped */
		if (family_flush(r))
			return -1;
		memcpy(f->name, n, nlen);
	}
	struct pbuf lp = { 0 };
	char le[64] = "";
	const char *raw = "";
	size_t raw_len = 0;
	if (p < end && *p == '{' && labels(r, &p, end, &lp, le, sizeof(le), &raw, &raw_len)) {
		pbuf_free(&lp);
		return -1;
	}
	while (p < end && *p == ' ')
		p++;
	char num[64];
	const char *v = p;
	while (p < end && *p != ' ')
		p++;
	snprintf(num, sizeof(num), "%.*s", (int)(p - v), v);
	char *e;
	double val = strtod(num, &e);
	if (!num[0] || *e) {
		pbuf_free(&lp);
		return fail(r, "a sample value that is not a number");
	}
	long long ts = 0;
	bool has_ts = false;
	while (p < end && *p == ' ')
		p++;
	if (p < end) {
		snprintf(num, sizeof(num), "%.*s", (int)(end - p), p);
		ts = strtoll(num, &e, 10);
		has_ts = !*e;
	}

	int rc = 0;
	struct pbuf m = { 0 }, x = { 0 };
	switch (part) {
	case BUCKET: {
		double upper = strtod(le, &e);
		if (!le[0] || *e) {
			rc = fail(r, "a _bucket sample without a numeric le");
			break;
		}
		if (upper != upper || upper > 1e308)   /* +Inf: implied by the count */
			break;
		struct pbuf bk = { 0 };
		pbuf_uint(&bk, B_CUMULATIVE, (uint64_t)val);
		pbuf_double(&bk, B_UPPER, upper);
		pbuf_message(&r->s.buckets, H_BUCKET, &bk);
		pbuf_free(&bk);
		break;
	}
	case SUM:
		r->s.sum = val;
		break;
	case COUNT: {
		pbuf_uint(&x, H_COUNT, (uint64_t)val);
		pbuf_double(&x, H_SUM, r->s.sum);
		pbuf_bytes(&x, r->s.buckets.p, r->s.buckets.len);
		x.oom |= r->s.buckets.oom;
		char *key = strndup(raw, raw_len);
		const struct pbuf *nat = key && r->native ? r->native(r->ctx, f->name, key) : NULL;
		free(key);
		if (nat)
			pbuf_bytes(&x, nat->p, nat->len);
		pbuf_bytes(&m, lp.p, lp.len);
		pbuf_message(&m, M_HISTOGRAM, &x);
		pbuf_free(&r->s.buckets);
		memset(&r->s, 0, sizeof(r->s));
		break;
	}
	case PLAIN:
		pbuf_bytes(&m, lp.p, lp.len);
		pbuf_double(&x, VALUE, val);
		pbuf_message(&m, f->type == T_COUNTER ? M_COUNTER : f->type == T_GAUGE ? M_GAUGE : M_UNTYPED, &x);
		break;
	}
	if (!rc && m.len) {
		if (has_ts)
			pbuf_uint(&m, M_TIMESTAMP, (uint64_t)ts);
		pbuf_message(&f->metrics, MF_METRIC, &m);
		f->n_metrics++;
	}
	m.oom |= lp.oom || x.oom;
	if (!rc && m.oom)
		rc = fail(r, "out of memory");
	pbuf_free(&lp);
	pbuf_free(&m);
	pbuf_free(&x);
	return rc;
}

int prom_proto_from_text(const char *text, size_t len, prom_native_fn native, void *ctx, FILE *out,
			 char *err, size_t errlen)
{
	struct reader r = { .native = native, .ctx = ctx, .out = out, .err = err, .errlen = errlen };
	const char *p = text, *end = text + len;
	int rc = 0;

	r.f.type = T_UNTYPED;
	while (!rc && p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *le = eol ? eol : end;
		r.line++;
		if (le > p && *p == '#')
			rc = comment(&r, p, le);
		else if (le > p)
			rc = sample(&r, p, le);
		p = eol ? eol + 1 : end;
	}
	if (!rc)
		return family_flush(&r);
	family_reset(&r);       /* the line that failed keeps its message */
	return rc;
}
