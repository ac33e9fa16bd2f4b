/* report.h - kpi-report's analysis of a trace (windows, baseline, attribution,
 * findings) and its two renderings, markdown and HTML. */
#ifndef KPI_REPORT_H
#define KPI_REPORT_H

#include "tools/common/timefmt.h"
#include "tools/common/trace.h"
#include "tools/common/trace_agents.h"
#include "tools/common/trace_cost.h"
#include "tools/common/trace_hops.h"
#include "tools/common/trace_queue.h"
#include "tools/common/trace_reuse.h"
#include "tools/common/trace_fleet.h"
#include "tools/common/trace_pods.h"

#include <stdbool.h>
#include <stdio.h>

#define RP_TIMELINE 60
#define RP_SLOWEST 10
#define RP_MAX_FINDINGS 8

struct rp_window {
	int64_t from_ns, to_ns;
	int valid;
	struct trace_window w;
	struct trace_steps steps;
	struct trace_reuse reuse;       /* a llama.cpp engine's prefix cache (requests 0: none) */
	struct trace_queue queue;       /* who waited at once, and for what */
};

/* How a percentile's change splits over phases: the mean phase times of the
 * requests around that percentile, baseline vs incident. */
enum { RP_TTFT_NPH = 4 };          /* net-in, queue, prefill, first write */
struct rp_attr {
	const char *metric;             /* "TTFT" or "e2e" */
	double p;                       /* 50 or 99 */
	double base, inc;               /* the percentile in both windows, ns */
	int nph;
	const char *name[PH_N];         /* each phase's; queue and prefill say where they were inferred */
	double delta[PH_N];             /* per-phase change of the band's means, ns */
	double share[PH_N];             /* delta / sum of deltas */
	int top;                        /* phase with the largest share */
	char words[512];
};

struct rp_finding {
	const char *cause;              /* short cause name */
	const char *phase;              /* the phase it shows in */
	double score;                   /* strength of evidence: findings sort by it */
	int order;                      /* issue order, for ties */
	char title[256];
	char evidence[1024];
	char action[256];
};

#define RP_CASCADES 8

/* Reasoning, agent tasks and cascades of both windows ([0] baseline, [1]
 * incident; schema version 11), agents.c. */
struct rp_agents {
	int have;                       /* the trace has them; why says why not */
	char why[256];
	struct trace_reasoning reason[2];
	struct trace_tasks_window tasks[2];
	struct trace_cascade casc[2][RP_CASCADES];
	int ncasc[2];
};

#define RP_AGG_HOSTS 64
#define RP_AGG_PHASES 3      /* net-in, queue wait (queue or server wait), prefill */

struct report {
	struct trace *t;
	int64_t first_ns, last_ns;
	struct rp_window inc, base;
	int compare;                    /* a baseline was found: 0 = a summary of one window, nothing compared */
	char inc_how[256], base_how[512];
	struct rp_attr attr[4];         /* p99 TTFT, p50 TTFT, p99 e2e, p50 e2e */
	int64_t tl_from, tl_to;
	struct trace_point tl[RP_TIMELINE];
	struct trace_req slow[RP_SLOWEST];
	int nslow;
	struct rp_finding f[RP_MAX_FINDINGS];
	int nf;
	/* cost and energy of both windows (cost.c) */
	double price;                   /* --price-per-hour; < 0: the agent's */
	int have_cost;
	struct trace_cost_window cost_base, cost_inc;
	char cost_source[256], cost_why[512];
	/* disaggregated requests' p99 TTFT change by phase across the router,
	 * prefill and decode workers (disagg.c); "" when the windows have none */
	char pd_words[768];
	struct rp_agents ag;
	/* requests by the weight type that served them, whole trace (weights.c) */
	struct trace_weight weights[TRACE_WEIGHTS_MAX];
	int nweights;
	/* a report across hosts (--db clickhouse://...; fleet.c) */
	struct trace_fleet *fleet;
	char fleet_what[512];           /* what was read: hosts, rows, filter */
	struct trace_rank_group hosts[TRACE_RANK_GROUPS], models[TRACE_RANK_GROUPS], pods[TRACE_RANK_GROUPS];
	int n_hosts, n_models, n_pods;
	/* the same question of the per-minute aggregates (fleet_minutes.c) */
	struct rp_agg_host {
		char name[128];
		int64_t n[2];                   /* requests not refused: baseline, incident */
		uint64_t ttft_n[2];
		double p99[2];                  /* p99 TTFT from the buckets, ns */
		double phase_mean[2][RP_AGG_PHASES];
		int top_phase;
	} agg[RP_AGG_HOSTS];
	int n_agg, agg_minutes[2];
	char agg_note[512];
};

/* A finding to fill in (NULL when the list is full); findings are sorted
 * strongest first once all are in. */
struct rp_finding *rp_add_finding(struct report *r, const char *cause, const char *phase, double score,
				  int order);
void rp_sort_findings(struct report *r);

/* Disaggregated prefill and decode (disagg.c): the words on their TTFT
 * change (pd_words) and the findings only their phases can make, a KV
 * transfer that slowed and a decode side out of slots. */
void report_disagg_findings(struct report *r);
/* Both windows' reasoning, tasks and cascades (r->ag), and the findings they
 * make: "reasoning grew" apart from "the server was slower", "escalations
 * rose" apart from "the escalated model got slower", the task step that grew;
 * the section that shows them. */
void report_agents_analyze(struct report *r);
void report_agents_findings(struct report *r);
void report_agents_render(const struct report *r, FILE *out, int html);

/* Picks the windows (user's or automatic) and computes everything the report
 * shows. have_from/have_to/have_base say which flags were given. Returns 0,
 * or -1 with a message in err. */
int report_analyze(struct report *r, int64_t from, int have_from, int64_t to, int have_to,
		   int64_t base_from, int64_t base_to, int have_base, char *err, size_t errlen);

/* Both windows' cost and energy (docs/cost.md) and the under-utilisation
 * finding; where the trace has none, cost_why says why. */
void report_cost_analyze(struct report *r, double price_per_hour);
void report_cost_render(const struct report *r, FILE *out, int html);

/* The trace's requests by weight type of the model that served them, and
 * their section (none when the trace names no weight type). */
void report_weights_analyze(struct report *r);
void report_weights_render(const struct report *r, FILE *out, int html);
/* What the report reads: the trace's path, or the ClickHouse URL. */
const char *report_source(const struct report *r);
/* Across hosts: hosts and models ranked by their share of the p99 TTFT
 * change (after report_analyze), and their section of the report. */
int report_fleet_analyze(struct report *r);
/* The hosts ranked by p99 TTFT change from request_minutes alone (r->agg;
 * r->agg_note says why not), and its section. */
void report_fleet_minutes(struct report *r);
void report_fleet_minutes_render(const struct report *r, FILE *out, int html);
void report_fleet_render(const struct report *r, FILE *out, int html);
/* One host's trace: its pods ranked by their share of the p99 TTFT change
 * (schema version 13; none outside any pod: no section), and their section. */
void report_pods_analyze(struct report *r);
void report_pods_render(const struct report *r, FILE *out, int html);
/* What fleet.c and pods.c share: the TTFT phases a group's change is named
 * by, whether a request of either window ran in a pod, text escaped for
 * markdown or HTML, and a table of ranked groups headed by what. */
extern const char *const rp_ttft_phase[4];
bool rp_any_pod(const struct report *r);
void rp_esc(FILE *out, const char *s, int html);
void rp_group_table(FILE *out, int html, const char *what, const struct trace_rank_group *g, int n);

void report_markdown(const struct report *r, FILE *out);
/* A two-column table (baseline, incident), or one column (window) when
 * nothing is compared: its head, and one row of it. */
void rp_table_head(FILE *out, int html, int compare);
void rp_row(FILE *out, int html, int compare, const char *name, const char *bv, const char *iv);
void report_html(const struct report *r, FILE *out);

#endif
