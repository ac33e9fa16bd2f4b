/* llama.h - kpi-agent's llama.cpp side: in HTTP-mode targets that map a
 * llama.cpp library exporting llama_decode, a uprobe pair on it gives 'libllama'
 * steps and the requests' engine split (source 'http+libllama'). */
#ifndef KPI_AGENT_LLAMA_H
#define KPI_AGENT_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ring_buffer;
struct bus;
struct side;
struct agent_llama;

/* Loads bpf/kpi_llama.bpf.c: before privileges drop. Returns NULL with the
 * reason in err. */
struct agent_llama *agent_llama_open(char *err, size_t errlen);
/* Adds its ring buffer to the agent's, so one poll drains both, publishes
 * its steps and joined requests on bus, and holds the HTTP records there
 * (bus_set_hold) of the processes it attaches to. 0, or -1 with the reason
 * in err. */
int agent_llama_connect(struct agent_llama *L, struct bus *bus, struct ring_buffer *rb,
			char *err, size_t errlen);
/* Its targets follow the agent's (loader.h): the HTTP-mode ones that map
 * llama.cpp get the uprobe pair (one that does not yet is looked at again at
 * every sync); what is held of one no longer listed is handed out. */
struct side *agent_llama_side(struct agent_llama *L);
/* Hands out the held records that settled (all when final), joined. */
void agent_llama_flush(struct agent_llama *L, uint64_t now, bool final);
/* One line of totals for the agent's exit message ("" when nothing was attached). */
void agent_llama_summary(struct agent_llama *L, char *buf, size_t len);
void agent_llama_close(struct agent_llama *L);

/* The mapped file of pid that defines llama_decode (a libllama, a Node addon,
 * a statically linked server), as a path this process can open. 0, or -1. */
int llama_lib_path(pid_t pid, char *buf, size_t len);

#endif
