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
/* The agent's HTTP-mode targets now: attaches to those that map llama.cpp and
 * are not attached yet (looked for again at every call until they do); hands
 * out what is held of those no longer listed. */
void agent_llama_sync(struct agent_llama *L, const pid_t *pids, int n);
/* Hands out the held records that settled (all when final), joined. */
void agent_llama_flush(struct agent_llama *L, uint64_t now, bool final);
/* One line of totals for the agent's exit message ("" when nothing was attached). */
void agent_llama_summary(struct agent_llama *L, char *buf, size_t len);
void agent_llama_close(struct agent_llama *L);

/* The mapped file of pid that defines llama_decode (a libllama, a Node addon,
 * a statically linked server), as a path this process can open. 0, or -1. */
int llama_lib_path(pid_t pid, char *buf, size_t len);
/* Whether the ELF file at path defines symbol (dynamic or static table). */
bool llama_elf_defines(const char *path, const char *symbol);

#endif
