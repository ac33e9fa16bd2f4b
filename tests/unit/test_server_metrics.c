/* test_server_metrics.c - histogram bucketing and the Prometheus text of
 * /metrics (names, cumulative buckets, +Inf, sums). */
#include <math.h>
#include <string.h>

#include "tests/unit/check.h"
#include "daemon/server/metrics.h"

static void test_buckets(void)
{
	struct metrics m;
	metrics_init(&m);
	metrics_observe(&m, MH_TTFT, 0.001);  /* on a bound: le is inclusive */
	metrics_observe(&m, MH_TTFT, 0.003);
	metrics_observe(&m, MH_TTFT, 1e9);    /* beyond every bound */
	CHECK(m.h[MH_TTFT].counts[0] == 1 && m.h[MH_TTFT].counts[1] == 1, "low buckets");
	CHECK(m.h[MH_TTFT].counts[m.h[MH_TTFT].nbounds] == 1, "+Inf bucket");
	CHECK(m.h[MH_TTFT].count == 3, "count");
	CHECK_NEAR(m.h[MH_TTFT].sum, 1e9 + 0.004, 1e-3);
}

static void test_render(void)
{
	struct metrics m;
	metrics_init(&m);
	metrics_observe(&m, MH_E2E, 0.4);
	m.success[KPI_FINISH_LENGTH] = 3;
	m.http_status[429] = 2;
	struct engine_stats st = { .running = 2, .waiting = 1, .kv_blocks_total = 100,
				   .kv_blocks_used = 25, .kv_blocks_free = 75, .preemptions = 4 };
	struct sbuf out = { 0 };
	metrics_render(&m, &st, "tiny", &out);
	const char *want[] = {
		"vllm:num_requests_running{model_name=\"tiny\"} 2\n",
		"vllm:num_requests_waiting{model_name=\"tiny\"} 1\n",
		"vllm:kv_cache_usage_perc{model_name=\"tiny\"} 0.25\n",
		"vllm:num_preemptions_total{model_name=\"tiny\"} 4\n",
		"vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 3\n",
		"vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"0.3\"} 0\n",
		"vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"0.5\"} 1\n",
		"vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 1\n",
		"vllm:e2e_request_latency_seconds_count{model_name=\"tiny\"} 1\n",
		"# TYPE vllm:time_to_first_token_seconds histogram\n",
		"# TYPE vllm:inter_token_latency_seconds histogram\n",
		"# TYPE vllm:request_queue_time_seconds histogram\n",
		"# TYPE vllm:request_prefill_time_seconds histogram\n",
		"# TYPE vllm:request_decode_time_seconds histogram\n",
		"kpi_infer_kv_blocks_free{model_name=\"tiny\"} 75\n",
		"kpi_infer_http_responses_total{code=\"429\"} 2\n",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		CHECK(strstr(out.data, want[i]), "missing: %s", want[i]);
	sbuf_free(&out);
}

int main(void)
{
	RUN(test_buckets);
	RUN(test_render);
	return CHECK_DONE();
}
