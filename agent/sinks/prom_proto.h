/* prom_proto.h - the Prometheus protobuf exposition
 * (io.prometheus.client.MetricFamily, length-delimited), the only form in
 * which Prometheus 2.42 scrapes native histograms: the agent's text
 * exposition read back family by family and written as protobuf, each
 * histogram series with the native buckets its exporter kept (prom_native.h).
 * docs/fleet.md, "Native histograms". */
#ifndef KPI_PROM_PROTO_H
#define KPI_PROM_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What a scraper asks for with Accept, and the Content-Type of the answer. */
#define PROM_PROTO_ACCEPT "application/vnd.google.protobuf"
#define PROM_PROTO_TYPE \
	"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"

/* A growable protobuf message under construction. */
struct pbuf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
};

void pbuf_free(struct pbuf *b);
void pbuf_bytes(struct pbuf *b, const void *p, size_t n);
void pbuf_varint(struct pbuf *b, uint64_t v);
/* field of wire type 0 (varint), 1 (64-bit) or 2 (length-delimited) */
void pbuf_uint(struct pbuf *b, int field, uint64_t v);
void pbuf_sint(struct pbuf *b, int field, int64_t v);          /* zigzag */
void pbuf_double(struct pbuf *b, int field, double v);
void pbuf_string(struct pbuf *b, int field, const char *s, size_t n);
/* a nested message: its bytes as a length-delimited field */
void pbuf_message(struct pbuf *b, int field, const struct pbuf *m);

/* The native part of one histogram series: the Histogram message's fields
 * from schema on (prom_native_encode), looked up by the series' family name
 * and the exact text of its labels (between the braces of its _count line). */
typedef const struct pbuf *(*prom_native_fn)(void *ctx, const char *family, const char *labels);

/* Writes text (a text-format 0.0.4 exposition) to out as delimited
 * MetricFamily messages; a histogram series for which native() gives bytes
 * carries them beside its classic buckets. Families with no sample are left
 * out (Prometheus reads a family's kind from its first metric). Returns 0,
 * or -1 with the reason in err (a line it cannot read, out of memory). */
int prom_proto_from_text(const char *text, size_t len, prom_native_fn native, void *ctx, FILE *out,
			 char *err, size_t errlen);

#endif
