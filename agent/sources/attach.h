/* attach.h - which BPF programs kpi-agent loads and which processes they
 * follow: program choice before load, the global attach, per-target USDT. */
#ifndef KPI_ATTACH_H
#define KPI_ATTACH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kpi_bpf;
struct host_features;
struct ring_buffer;
struct assembler;
struct side;
struct container_sel;

#define ATTACH_MAX_SIDES 4

/* What to trace: the --pid list and the processes on the --port list, else
 * every process running exe (NULL: any file named kpi-infer).  One without
 * kpi probes (or any, with http_only) is followed in HTTP mode. */
struct attach_want {
	const pid_t *pids;
	int n_pids;
	const char *exe;
	const uint16_t *ports;  /* --port: the processes listening on these */
	int n_ports;
	bool http_only;         /* --http-only: the HTTP path even where USDT probes are */
	bool verbose;           /* -v: say which program flavours were chosen */
	bool exec_hold;         /* stop a process at the exec of a file not attached yet,
				 * until its probes are (docs/agent.md, Targets) */
	const struct container_sel *sel;  /* --container / --pod: of the above, only the
					   * processes in these (NULL: all) */
};

struct attach;

/* Between kpi_bpf__open and the first attach_rescan; skel and feat stay the
 * caller's and must outlive the attach state. */
struct attach *attach_new(struct kpi_bpf *skel, const struct host_features *feat,
			  const struct attach_want *want);
/* Before load: the program flavours this kernel takes (bpf_program__set_autoload)
 * and the maps only they use. */
void attach_choose_programs(struct attach *at);
/* After the privilege drop, before any other thread: a thread that continues
 * any process the exec hold has kept stopped for over 250 ms, whatever the
 * main loop is doing, and the guard that continues them after a kill of the
 * agent (hold.h). */
void attach_watchdog_start(struct attach *at);
/* The agent is ending: its programs stop no process any more, and every
 * process they stopped runs on (hold_end).  Called as the loop ends, before
 * the final flush; attach_free does it too. */
void attach_hold_end(struct attach *at);
/* After load: every loaded program that is not a USDT one.  -1 with a message
 * on stderr when one cannot be attached. */
int attach_global(struct attach *at);
/* Where a target's exit sends what is left of it: rb is drained before its
 * map entries go, asm_ is told. */
void attach_set_consumers(struct attach *at, struct ring_buffer *rb, struct assembler *asm_);
/* A side object (loader.h; NULL: ignored) that follows the targets: told the
 * live ones after every rescan (recheck) and every exec or exit handled. */
void attach_add_side(struct attach *at, struct side *s);
/* The /proc scan, at start-up and every RESCAN_NS: detaches targets that
 * exited, refreshes the ports and threads of the others, attaches to new ones
 * (prints 'attached to pid N' / 'detached from pid N'); with --exe, attaches
 * that file's probes for every process before one runs. Then the side
 * objects follow. */
void attach_rescan(struct attach *at);
/* A ring-buffer record: true when it is an EXEC or EXIT record, which is
 * kept for attach_pending (called from the ring's callback, which must not
 * drain the ring as a detach does); false for the assembler's records. */
bool attach_event(struct attach *at, const void *rec, size_t size);
/* Acts on the EXEC / EXIT records kept: attaches to a process that exec'd a
 * traced executable (the exec program put it in `targets` already),
 * detaches from one that exited.  After every drain of the ring. */
void attach_pending(struct attach *at);
/* Processes known, traced or not (one whose attach failed is kept so that it
 * is not retried). */
int attach_count(const struct attach *at);
/* The traced ones' pids, at most max. */
int attach_live_pids(const struct attach *at, uint32_t *pids, int max);
/* Ends every hold (attach_hold_end), then destroys every link (targets' and
 * global). */
void attach_free(struct attach *at);

#endif
