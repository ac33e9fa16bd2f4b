/* tls.h - kpi-agent's TLS side: SSL_read/SSL_write uprobes (bpf/kpi_tls.bpf.c)
 * in the libssl each HTTP-mode target maps, and which targets' TLS cannot be read. */
#ifndef KPI_AGENT_TLS_H
#define KPI_AGENT_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TLS_LIB_NAME "libssl.so"        /* OpenSSL's, any version (Debian: libssl.so.3) */

struct kpi_bpf;
struct side;
struct agent_tls;

/* Loads bpf/kpi_tls.bpf.c on the loaded main object's events, counters,
 * targets and tls_calls maps: before privileges drop.  NULL with the reason
 * in err. */
struct agent_tls *agent_tls_open(struct kpi_bpf *main_skel, bool verbose, char *err, size_t errlen);
/* Its targets follow the agent's (loader.h): the HTTP-mode ones that map
 * libssl get the uprobes (prints 'TLS: pid N: ...'); at the rescan's sync
 * those that had none are looked at again (a library opened since, as
 * Python's ssl module does at its import). */
struct side *agent_tls_side(struct agent_tls *t);
/* Whether pid's TLS is read (its libssl is probed).  The first no for a pid
 * prints why ('pid N (comm): TLS not readable: ...').  For http_path's
 * query (ctx: the struct agent_tls; NULL: no TLS side, nothing readable). */
bool agent_tls_readable(void *ctx, uint32_t pid);
/* Processes attached, and those reported not readable, so far. */
void agent_tls_summary(const struct agent_tls *t, char *buf, size_t len);
void agent_tls_close(struct agent_tls *t);

#endif
