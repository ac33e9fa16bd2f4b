/* http_digest.h - a request body's fingerprint with its "model" value left
 * out, so that a request asked again of another model (a cascade's
 * escalation) has the same one. Keyed by the caller's secret; compared in
 * memory and never stored or sent (docs/security.md). Knows nothing of HTTP
 * framing, BPF, pids or fds. */
#ifndef KPI_HTTP_DIGEST_H
#define KPI_HTTP_DIGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_digest {
	uint64_t h;                     /* FNV-1a over the body's bytes but the model's value */
	uint64_t bytes;                 /* bytes hashed */
	uint8_t state;                  /* where in a "model": "value" it is */
	uint8_t matched;                /* characters of "model" (quotes included) matched */
	bool escape;                    /* the value's last byte was a backslash */
	bool gap;                       /* bytes were not captured: no fingerprint */
};

void http_digest_init(struct http_digest *d, uint64_t key);
/* The body's next captured bytes. */
void http_digest_feed(struct http_digest *d, const uint8_t *p, size_t n);
/* Bytes of the body were not captured. */
void http_digest_gap(struct http_digest *d);
/* The fingerprint: false when the body was empty or not wholly captured. */
bool http_digest_get(const struct http_digest *d, uint64_t *out);

#endif
