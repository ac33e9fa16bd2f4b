/* clickhouse.c - ClickHouse's HTTP interface through one libcurl handle: the
 * connection is kept alive between requests, errors carry the server's words. */
#include "tools/common/clickhouse.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ch_conn {
	struct ch_url u;
	CURL *curl;
	long timeout_ms;
};

bool ch_is_url(const char *s)
{
	return s && (!strncmp(s, "clickhouse://", 13) || !strncmp(s, "http://", 7));
}

int ch_url_parse(const char *s, struct ch_url *u, char *err, size_t errlen)
{
	const char *p = !strncmp(s, "clickhouse://", 13) ? s + 13 : !strncmp(s, "http://", 7) ? s + 7 : NULL;
	memset(u, 0, sizeof(*u));
	if (!p || !*p) {
		snprintf(err, errlen, "'%s': give clickhouse://HOST[:PORT][/DATABASE], e.g. clickhouse://127.0.0.1:8123/kpiscope", s);
		return -1;
	}
	size_t hl = strcspn(p, ":/");
	if (!hl || hl >= sizeof(u->host)) {
		snprintf(err, errlen, "'%s': no host name (clickhouse://HOST[:PORT][/DATABASE])", s);
		return -1;
	}
	memcpy(u->host, p, hl);
	p += hl;
	u->port = CH_DEFAULT_PORT;
	if (*p == ':') {
		char *end;
		long port = strtol(p + 1, &end, 10);
		if (end == p + 1 || port <= 0 || port > 65535 || (*end && *end != '/')) {
			snprintf(err, errlen, "'%s': the port must be a number from 1 to 65535", s);
			return -1;
		}
		u->port = (int)port;
		p = end;
	}
	const char *db = *p == '/' && p[1] ? p + 1 : CH_DEFAULT_DB;
	size_t dl = strlen(db);
	if (dl >= sizeof(u->db) || strspn(db, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != dl) {
		snprintf(err, errlen, "'%s': the database name takes letters, digits and '_' only", s);
		return -1;
	}
	memcpy(u->db, db, dl + 1);
	snprintf(u->text, sizeof(u->text), "clickhouse://%s:%d/%s", u->host, u->port, u->db);
	return 0;
}

int ch_json_str(struct buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	if (buf_append(b, "\"", 1))
		return -1;
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		if (buf_append(b, s + run, i - run))
			return -1;
		char esc[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
		if (c == '"' || c == '\\') {
			esc[1] = (char)c;
			if (buf_append(b, esc, 2))
				return -1;
		} else if (buf_append(b, esc, 6)) {
			return -1;
		}
		run = i + 1;
	}
	if (buf_append(b, s + run, n - run))
		return -1;
	return buf_append(b, "\"", 1);
}

int ch_sql_str(struct buf *b, const char *s)
{
	if (buf_append(b, "'", 1))
		return -1;
	for (; *s; s++)
		if (((*s == '\'' || *s == '\\') && buf_append(b, "\\", 1)) || buf_append(b, s, 1))
			return -1;
	return buf_append(b, "'", 1);
}

char *ch_tsv_field(char *s)
{
	if (s[0] == '\\' && s[1] == 'N' && !s[2])
		return NULL;
	char *w = s;
	for (char *r = s; *r; r++) {
		if (*r != '\\' || !r[1]) {
			*w++ = *r;
			continue;
		}
		r++;
		*w++ = *r == 't' ? '\t' : *r == 'n' ? '\n' : *r == 'r' ? '\r' : *r == '0' ? '\0' :
		       *r == 'b' ? '\b' : *r == 'f' ? '\f' : *r;
	}
	*w = 0;
	return s;
}

int ch_tsv_split(char *line, char **f, int max)
{
	int n = 0;
	for (char *p = line;;) {
		char *tab = strchr(p, '\t');
		if (tab)
			*tab = 0;
		if (n < max)
			f[n] = p;
		n++;
		if (!tab)
			return n;
		p = tab + 1;
	}
}

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
	return buf_append(ctx, p, size * n) ? 0 : size * n;
}

struct ch_conn *ch_open(const struct ch_url *u, long timeout_ms)
{
	static int inited;
	if (!inited) {
		curl_global_init(CURL_GLOBAL_DEFAULT);
		inited = 1;
	}
	struct ch_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->u = *u;
	c->timeout_ms = timeout_ms;
	c->curl = curl_easy_init();
	if (!c->curl) {
		free(c);
		return NULL;
	}
	return c;
}

void ch_set_timeout(struct ch_conn *c, long timeout_ms)
{
	c->timeout_ms = timeout_ms;
}

void ch_close(struct ch_conn *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	free(c);
}

const struct ch_url *ch_url_of(const struct ch_conn *c)
{
	return &c->u;
}

char *ch_escape(struct ch_conn *c, const char *s)
{
	char *e = curl_easy_escape(c->curl, s, 0);
	char *out = e ? strdup(e) : NULL;
	curl_free(e);
	return out;
}

int ch_post(struct ch_conn *c, const char *params, const char *body, size_t len, struct buf *out,
	    bool *unreachable, char *err, size_t errlen)
{
	char url[8192];
	long status = 0;
	*unreachable = false;
	buf_reset(out);
	if (out->p)
		out->p[0] = 0;
	if ((size_t)snprintf(url, sizeof(url), "http://%s:%d/?database=%s&%s", c->u.host, c->u.port, c->u.db,
			     params) >= sizeof(url)) {
		snprintf(err, errlen, "request too long for a URL");
		return -1;
	}
	CURL *h = c->curl;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_POST, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms < 3000 ? c->timeout_ms : 3000);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	CURLcode rc = curl_easy_perform(h);
	if (rc != CURLE_OK) {
		*unreachable = true;
		snprintf(err, errlen, "%s", curl_easy_strerror(rc));
		return -1;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		/* ClickHouse's answer is "Code: 60, e.displayText() = ...": its first line */
		const char *msg = out->p ? out->p : "";
		int l = (int)strcspn(msg, "\n");
		snprintf(err, errlen, "HTTP %ld: %.*s", status, l > 400 ? 400 : l, msg);
		/* 5xx other than a query error: the server is not taking work now */
		*unreachable = status == 502 || status == 503 || status == 504;
		return -1;
	}
	return 0;
}

int ch_query(struct ch_conn *c, const char *sql, struct buf *out, char *err, size_t errlen)
{
	bool unreachable;
	return ch_post(c, "", sql, strlen(sql), out, &unreachable, err, errlen);
}
