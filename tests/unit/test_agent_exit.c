/* test_agent_exit.c - requests in flight when their target exits
 * (assemble_forget_pid): finished and written out -> a row with t_done = the
 * last write and no status; cut off -> counted, and a row with end_reason
 * target_exit when the engine saw it (its marks until then), else none. */
#include "tests/unit/check.h"
#include "agent/track/assemble.h"
#include "agent/track/bus.h"
#include "tests/unit/event_util.h"

#define MAXREC 8
static struct kpi_request_record got[MAXREC];
static int n_got;

static void on_req(void *ctx, const struct kpi_request_record *r)
{
	if (n_got < MAXREC)
		got[n_got++] = *r;
}

static void ev(struct assembler *a, int type, uint64_t ts, uint64_t id, int fd, int x, int y,
	       const char *rid)
{
	union kpi_event e = mkev(7, type, ts, id, fd, x, y, rid);
	assemble_ev(a, e);
}

static void exit_cases(void)
{
	struct bus *bus = bus_new();
	struct assembler *a = assemble_new(bus);
	struct kpi_sink s = { .request = on_req };
	struct assemble_stats st;

	bus_add(bus, &s);
	/* fd 5: finished, response written, killed before response__end */
	ev(a, KPI_EV_ARRIVE, 100, 0, 5, 0, 0, NULL);
	ev(a, KPI_EV_ADMIT, 110, 1, 5, 8, 16, "done-1");
	ev(a, KPI_EV_SCHED, 120, 1, -1, 0, 0, NULL);
	ev(a, KPI_EV_FIRST, 150, 1, -1, 0, 0, NULL);
	ev(a, KPI_EV_FINISH, 300, 1, -1, 4, 1, NULL);
	ev(a, KPI_EV_WRITE, 320, 0, 5, 0, 0, NULL);
	/* fd 6: streamed tokens written, not finished: cut off by the exit */
	ev(a, KPI_EV_ARRIVE, 200, 0, 6, 0, 0, NULL);
	ev(a, KPI_EV_ADMIT, 210, 2, 6, 8, 16, "cut-2");
	ev(a, KPI_EV_SCHED, 220, 2, -1, 0, 0, NULL);
	ev(a, KPI_EV_FIRST, 250, 2, -1, 0, 0, NULL);
	ev(a, KPI_EV_WRITE, 260, 0, 6, 0, 0, NULL);
	/* fd 8: finished, nothing written after it: the client got nothing whole */
	ev(a, KPI_EV_ARRIVE, 400, 0, 8, 0, 0, NULL);
	ev(a, KPI_EV_ADMIT, 410, 3, 8, 8, 16, "unwritten-3");
	ev(a, KPI_EV_FINISH, 500, 3, -1, 4, 1, NULL);
	/* fd 9: rejected, error response written */
	ev(a, KPI_EV_ARRIVE, 600, 0, 9, 0, 0, NULL);
	ev(a, KPI_EV_REJECT, 610, 0, 9, 429, 1, "rej-4");
	ev(a, KPI_EV_WRITE, 620, 0, 9, 0, 0, NULL);
	CHECK(n_got == 0, "nothing complete before the exit, got %d", n_got);

	/* fd 10: arrived, never reached the engine: no row (as at a close) */
	ev(a, KPI_EV_ARRIVE, 700, 0, 10, 0, 0, NULL);
	CHECK(n_got == 0, "nothing complete before the exit, got %d", n_got);

	assemble_forget_pid(a, 7);
	assemble_stats(a, &st);
	CHECK(n_got == 4, "4 rows at exit, got %d", n_got);
	CHECK(st.exit_completed == 2 && st.exit_cut == 3, "completed %llu cut %llu",
	      (unsigned long long)st.exit_completed, (unsigned long long)st.exit_cut);
	for (int i = 0; i < n_got; i++) {
		struct kpi_request_record *r = &got[i];
		if (!strcmp(r->request_id, "done-1")) {
			CHECK(r->t_done == 320 && r->e2e == 220, "done-1 t_done %lld e2e %lld",
			      (long long)r->t_done, (long long)r->e2e);
			CHECK(r->http_status == KPI_NULL, "no response__end: status unknown");
			CHECK(r->output_tokens == 4, "output_tokens %lld", (long long)r->output_tokens);
			CHECK(!r->end_reason, "done-1 end_reason %s", r->end_reason);
		} else if (!strcmp(r->request_id, "cut-2")) {
			/* kept: its marks until the exit, its end the last write, marked */
			CHECK(r->end_reason && !strcmp(r->end_reason, "target_exit"), "cut-2 end_reason");
			CHECK(r->t_done == 260 && r->e2e == 60 && r->ttft == 60, "cut-2 t_done %lld e2e %lld ttft %lld",
			      (long long)r->t_done, (long long)r->e2e, (long long)r->ttft);
			CHECK(r->net_in == 10 && r->queue == 10 && r->prefill == 30 && r->decode == 10 &&
			      r->net_out == KPI_NULL, "cut-2 phases %lld %lld %lld %lld %lld", (long long)r->net_in,
			      (long long)r->queue, (long long)r->prefill, (long long)r->decode, (long long)r->net_out);
			CHECK(!r->finish_reason && r->http_status == KPI_NULL, "cut-2 not finished");
		} else if (!strcmp(r->request_id, "unwritten-3")) {
			/* nothing written: it ends at its last mark, the phase to it unknown */
			CHECK(r->end_reason && !strcmp(r->end_reason, "target_exit"), "unwritten-3 end_reason");
			CHECK(r->t_done == 500 && r->e2e == 100 && r->ttft == KPI_NULL, "unwritten-3 t_done %lld e2e %lld",
			      (long long)r->t_done, (long long)r->e2e);
			CHECK(r->net_in == 10 && r->queue == 90 && r->net_out == KPI_NULL,
			      "unwritten-3 phases %lld %lld %lld", (long long)r->net_in, (long long)r->queue,
			      (long long)r->net_out);
		} else {
			CHECK(!strcmp(r->request_id, "rej-4") && r->http_status == 429,
			      "unexpected row %s status %lld", r->request_id, (long long)r->http_status);
		}
	}
	assemble_free(a);
	bus_free(bus);
}

int main(void)
{
	RUN(exit_cases);
	return CHECK_DONE();
}
