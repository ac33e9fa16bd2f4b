/* split_infer.h - queue and prefill of a streamed request of a server without
 * engine probes, inferred from the times the server wrote the tokens of all its
 * streams: a continuous-batching engine hands every running stream its token at
 * the end of each step, so the other streams' writes mark the step boundaries
 * (docs/agent.md, "The inferred split"). Pure user space: no BPF, no SQLite.
 *
 * The caller (agent/track/http_path.c) says when a request of a process is
 * read, when each of its token events is written, and hands over each finished
 * record; a record waits here until the streams around its first token are
 * known (SPLIT_SETTLE_NS past that token), then goes out with queue_ns,
 * prefill_ns, the inferred t_sched / t_first, split_rule and step_ns, or with
 * split_rule NULL where no rule's preconditions hold (the split stays unknown). */
#ifndef KPI_SPLIT_INFER_H
#define KPI_SPLIT_INFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "agent/record.h"

/* A record waits at most this long past its first token event (the ring is
 * drained every --flush-ms; the emissions after it must be in by then). */
#define SPLIT_SETTLE_NS (500ULL * 1000000ULL)
/* Emissions and ended streams are kept this long (a request's wait for its
 * first token longer than SPLIT_MAX_WAIT_NS is not looked back on). */
#define SPLIT_KEEP_NS (40ULL * 1000000000ULL)
#define SPLIT_MAX_WAIT_NS (30ULL * 1000000000ULL)
/* Records held at most per process; beyond, the oldest go out undecided. */
#define SPLIT_MAX_HELD 4096

enum split_rule {
	SPLIT_NONE,             /* no rule applies: the split stays unknown */
	SPLIT_IDLE,             /* nothing else in flight: queue 0 */
	SPLIT_STEP,             /* one step, found from the other streams' writes */
	SPLIT_CHUNKED,          /* several lengthened steps (chunked prefill) */
	SPLIT_SHARED,           /* one step that gave other streams their first
				 * token too: their prompts ran together in it */
	SPLIT_RULE__COUNT
};

/* Why a streamed request got no split. */
enum split_decline {
	SPLIT_D_NO_READ,        /* the request's read is unknown (framing lost) */
	SPLIT_D_BUFFERED,       /* a stream wrote several token events in one write */
	SPLIT_D_MULTI_TOKEN,    /* its events carry several tokens (speculative decoding) */
	SPLIT_D_FEW,            /* too few writes around it to find steps */
	SPLIT_D_PACE,           /* streams write slower than the steps: not one engine
				 * stepping them together (replicas, one sequence a step) */
	SPLIT_D_PARTICIPATION,  /* most writes of a step are missing from it */
	SPLIT_D_SPREAD,         /* the writes of a step around it spread too wide or
				 * run into the next step's */
	SPLIT_D_UNSEEN,         /* no stream was decoding when it was read and other
				 * prompts were pending: the steps before its first
				 * token left no writes to find them by */
	SPLIT_D_WAIT,           /* it waited through steps that ran no prompt while no
				 * slot freed: another engine, or a scheduler that
				 * does not start a prompt when it can */
	SPLIT_D_TOO_LONG,       /* its wait for the first token is beyond SPLIT_MAX_WAIT_NS */
	SPLIT_D_CHUNKS,         /* a lengthened step before its first token's gave no
				 * stream a first token, and the window shows no full
				 * chunk step: its own chunk, or a step the machine
				 * lengthened, cannot be told */
	SPLIT_D__COUNT
};

struct split_stats {
	uint64_t rules[SPLIT_RULE__COUNT];      /* [SPLIT_NONE]: declined */
	uint64_t declined[SPLIT_D__COUNT];
	uint64_t passed;                        /* records with no token event (not streamed) */
	uint64_t overflow;                      /* records let go undecided (SPLIT_MAX_HELD) */
};

struct split_infer;

struct split_infer *split_infer_new(void);
void split_infer_free(struct split_infer *s);

/* A request of pid was read (its head): stream key is in flight from t.
 * model_call: it may run on the engine (a POST); only those make the engine
 * busy. */
void split_infer_open(struct split_infer *s, uint32_t pid, uint64_t key, uint64_t t,
		      bool model_call);
/* A token event of stream key (its generated text, or a token with none) was
 * written at ts; t_read: the read that completed its request, when known by
 * then (0: not), from which on it is in flight. */
void split_infer_token(struct split_infer *s, uint32_t pid, uint64_t key, uint64_t ts,
		       uint64_t t_read);
/* Stream key's exchange ended with rec (copied, held until its split is
 * decided: split_infer_release). */
void split_infer_done(struct split_infer *s, uint32_t pid, uint64_t key,
		      const struct kpi_request_record *rec);
/* Hands out the held records whose first token event is SPLIT_SETTLE_NS old
 * (every one when final), with their split; forgets what no record needs. */
void split_infer_release(struct split_infer *s, uint64_t now, bool final,
			 void (*out)(void *ctx, const struct kpi_request_record *rec), void *ctx);
/* The process exited: its held records go out (decided on what is known), its
 * streams are forgotten. */
void split_infer_forget_pid(struct split_infer *s, uint32_t pid,
			    void (*out)(void *ctx, const struct kpi_request_record *rec), void *ctx);

const struct split_stats *split_infer_stats(const struct split_infer *s);
/* Whether a record is held until its split is decided. */
bool split_infer_holding(const struct split_infer *s);
/* The exit line: "split: N streamed requests of HTTP-mode targets, M inferred
 * (a idle, b step, c shared, d chunked), K declined (x spread, ...)"; "" when none. */
void split_infer_summary(const struct split_stats *st, char *buf, size_t len);
const char *split_rule_name(enum split_rule r);          /* NULL for SPLIT_NONE */
const char *split_decline_name(enum split_decline d);

#endif
