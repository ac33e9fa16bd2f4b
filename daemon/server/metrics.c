/* metrics.c - histograms and the Prometheus text rendering of /metrics. The
 * bucket bounds are vLLM's (vllm/v1/metrics/loggers.py) so dashboards built
 * for vLLM read kpi-infer unchanged. */
#include "daemon/server/metrics.h"

#include <stdio.h>
#include <string.h>

static const double ttft_buckets[] = {
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
};
static const double itl_buckets[] = {
	0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
};
static const double latency_buckets[] = {
	0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
	50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
};
/* vLLM's build_1_2_5_buckets up to a 1M-token context */
static const double token_buckets[] = {
	1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
	100000, 200000, 500000, 1000000,
};

/* a transfer is ms-scale on a host, seconds over a slow link */
static const double kv_transfer_buckets[] = {
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
	30.0, 60.0,
};

#define NB(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct {
	const char *name, *help;
	const double *b;
	int n;
} hist_defs[MH__COUNT] = {
	[MH_TTFT] = { "vllm:time_to_first_token_seconds",
		      "Histogram of time to first token in seconds.", ttft_buckets, NB(ttft_buckets) },
	[MH_ITL] = { "vllm:inter_token_latency_seconds",
		     "Histogram of inter-token latency in seconds.", itl_buckets, NB(itl_buckets) },
	[MH_TPOT] = { "vllm:time_per_output_token_seconds",
		      "Histogram of time per output token in seconds (per request mean).",
		      itl_buckets, NB(itl_buckets) },
	[MH_E2E] = { "vllm:e2e_request_latency_seconds",
		     "Histogram of end to end request latency in seconds.", latency_buckets,
		     NB(latency_buckets) },
	[MH_QUEUE] = { "vllm:request_queue_time_seconds",
		       "Histogram of time spent in WAITING phase for request.", latency_buckets,
		       NB(latency_buckets) },
	[MH_PREFILL] = { "vllm:request_prefill_time_seconds",
			 "Histogram of time spent in PREFILL phase for request.", latency_buckets,
			 NB(latency_buckets) },
	[MH_DECODE] = { "vllm:request_decode_time_seconds",
			"Histogram of time spent in DECODE phase for request.", latency_buckets,
			NB(latency_buckets) },
	[MH_INFERENCE] = { "vllm:request_inference_time_seconds",
			   "Histogram of time spent in RUNNING phase for request.",
			   latency_buckets, NB(latency_buckets) },
	[MH_PROMPT_TOKENS] = { "vllm:request_prompt_tokens",
			       "Number of prefill tokens processed.", token_buckets,
			       NB(token_buckets) },
	[MH_GENERATION_TOKENS] = { "vllm:request_generation_tokens",
				   "Number of generation tokens processed.", token_buckets,
				   NB(token_buckets) },
	[MH_KV_TRANSFER] = { "kpi_infer_kv_transfer_seconds",
			     "KV transfers from prefill workers: first stream byte in to the "
			     "last, checked.", kv_transfer_buckets, NB(kv_transfer_buckets) },
};

_Static_assert(sizeof(ttft_buckets) / sizeof(double) <= METRICS_MAX_BUCKETS, "buckets");

void metrics_init(struct metrics *m)
{
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < MH__COUNT; i++) {
		m->h[i].name = hist_defs[i].name;
		m->h[i].help = hist_defs[i].help;
		m->h[i].bounds = hist_defs[i].b;
		m->h[i].nbounds = hist_defs[i].n;
	}
}

void metrics_observe(struct metrics *m, enum metrics_hist which, double v)
{
	struct histogram *h = &m->h[which];
	int i = 0;
	while (i < h->nbounds && v > h->bounds[i])
		i++;
	h->counts[i]++;
	h->count++;
	h->sum += v;
}

static void render_hist(const struct histogram *h, const char *labels, struct sbuf *out)
{
	sbuf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
	uint64_t cum = 0;
	for (int i = 0; i < h->nbounds; i++) {
		cum += h->counts[i];
		sbuf_printf(out, "%s_bucket{%s,le=\"%g\"} %llu\n", h->name, labels,
			    h->bounds[i], (unsigned long long)cum);
	}
	cum += h->counts[h->nbounds];
	sbuf_printf(out, "%s_bucket{%s,le=\"+Inf\"} %llu\n", h->name, labels,
		    (unsigned long long)cum);
	sbuf_printf(out, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", h->name, labels, h->sum,
		    h->name, labels, (unsigned long long)h->count);
}

static void gauge(struct sbuf *out, const char *name, const char *help, const char *type,
		  const char *labels, double v)
{
	sbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.9g\n", name, help, name, type,
		    name, labels, v);
}

void metrics_render(const struct metrics *m, const struct engine_stats *st,
		    const char *model_name, struct sbuf *out)
{
	char labels[128];
	snprintf(labels, sizeof(labels), "model_name=\"%s\"", model_name);
	double usage = st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0;

	gauge(out, "vllm:num_requests_running", "Number of requests in model execution batches.",
	      "gauge", labels, st->running);
	gauge(out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
	      "gauge", labels, st->waiting);
	gauge(out, "vllm:kv_cache_usage_perc",
	      "KV-cache usage. 1 means 100 percent usage.", "gauge", labels, usage);
	gauge(out, "vllm:num_preemptions_total", "Cumulative number of preemptions.", "counter",
	      labels, (double)st->preemptions);
	gauge(out, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter",
	      labels, (double)st->prompt_tokens);
	gauge(out, "vllm:generation_tokens_total", "Number of generation tokens processed.",
	      "counter", labels, (double)st->generation_tokens);

	sbuf_printf(out, "# HELP vllm:request_success_total Count of finished requests by "
		    "finish reason.\n# TYPE vllm:request_success_total counter\n");
	for (int r = KPI_FINISH_STOP; r < KPI_FINISH__COUNT; r++)
		sbuf_printf(out, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n",
			    labels, kpi_finish_reason_wire(r), (unsigned long long)m->success[r]);

	for (int i = 0; i < MH__COUNT; i++)
		if (i != MH_KV_TRANSFER || m->kv_decode)
			render_hist(&m->h[i], labels, out);

	/* kpi-infer's own, outside the vllm: namespace */
	if (st->weight_type) {
		/* what the process serves on, so two runs (Q4_K against F16) can be
		 * told apart and set side by side */
		sbuf_printf(out, "# HELP kpi_infer_model_info The model served: its weight type "
			    "(abi/kpi_ggml_types.h) and the matmul kernels it runs on.\n"
			    "# TYPE kpi_infer_model_info gauge\n"
			    "kpi_infer_model_info{%s,weight_type=\"%s\",kernels=\"%s\"} 1\n", labels,
			    st->weight_type, st->kernels ? st->kernels : "");
		gauge(out, "kpi_infer_model_weight_bytes", "Bytes of the model's weight matrices as served.",
		      "gauge", labels, (double)st->weight_bytes);
	}
	gauge(out, "kpi_infer_kv_blocks_free", "KV cache blocks free now.", "gauge", labels,
	      st->kv_blocks_free);
	gauge(out, "kpi_infer_kv_blocks_total", "KV cache blocks in the pool.", "gauge", labels,
	      st->kv_blocks_total);
	gauge(out, "kpi_infer_steps_total", "Engine batch steps run.", "counter", labels,
	      (double)st->steps);
	gauge(out, "kpi_infer_connections_open", "Open client connections.", "gauge", labels,
	      m->connections_open);
	gauge(out, "kpi_infer_connections_total", "Accepted client connections.", "counter",
	      labels, (double)m->connections_total);
	gauge(out, "kpi_infer_requests_rejected_total",
	      "Requests refused with a 4xx/5xx status before or instead of running.", "counter",
	      labels, (double)m->rejected_total);
	if (st->kv_blocks_cached || st->prefix_queries) {
		gauge(out, "vllm:prefix_cache_queries_total",
		      "Prompt tokens looked up in the prefix cache.", "counter", labels,
		      (double)st->prefix_queries);
		gauge(out, "vllm:prefix_cache_hits_total",
		      "Prompt tokens found in the prefix cache.", "counter", labels,
		      (double)st->prefix_hits);
		gauge(out, "kpi_infer_kv_blocks_cached", "KV blocks holding a prefix-cache key.",
		      "gauge", labels, st->kv_blocks_cached);
	}
	if (m->kv_decode) {
		gauge(out, "kpi_infer_kv_transfers_total", "KV transfers received and checked.",
		      "counter", labels, (double)m->kv_transfers);
		gauge(out, "kpi_infer_kv_transfers_in_place_total", "KV transfers received straight "
		      "into the engine's KV blocks (the others into a buffer, then copied).", "counter",
		      labels, (double)m->kv_received_in_place);
		gauge(out, "kpi_infer_kv_transfer_bytes_total",
		      "KV bytes received in complete transfers.", "counter", labels,
		      (double)m->kv_received_bytes);
		gauge(out, "kpi_infer_kv_fetching", "Requests waiting for their KV now.", "gauge",
		      labels, m->kv_fetching);
		sbuf_printf(out, "# HELP kpi_infer_kv_transfer_errors_total Failed KV transfers, by "
			    "cause.\n# TYPE kpi_infer_kv_transfer_errors_total counter\n");
		for (int s = 1; s < KPI_KV_ERR__COUNT; s++)
			sbuf_printf(out, "kpi_infer_kv_transfer_errors_total{%s,cause=\"%s\"} %llu\n",
				    labels, kpi_kv_status_name(s), (unsigned long long)m->kv_errors[s]);
	}
	if (m->kv_prefill) {
		gauge(out, "kpi_infer_kv_sends_total", "KV streams sent whole to decode workers.",
		      "counter", labels, (double)m->kv_sends);
		gauge(out, "kpi_infer_kv_sent_bytes_total", "KV bytes of the streams sent whole.",
		      "counter", labels, (double)m->kv_sent_bytes);
	}
	sbuf_printf(out, "# HELP kpi_infer_http_responses_total HTTP responses sent, by status "
		    "code.\n# TYPE kpi_infer_http_responses_total counter\n");
	for (int s = 100; s < 600; s++)
		if (m->http_status[s])
			sbuf_printf(out, "kpi_infer_http_responses_total{code=\"%d\"} %llu\n", s,
				    (unsigned long long)m->http_status[s]);
}
