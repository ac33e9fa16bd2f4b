/* test_agent_http_track.c - the HTTP/1.1 + SSE stream tracker (agent/track/http/http_track.c)
 * on the shapes real servers write: vLLM/OpenAI chat and completions streams,
 * the Responses API, keep-alive, pipelining, errors, disconnects, 100-continue,
 * truncated captures, close-delimited bodies; fed whole, packed, split, bytewise. */
#include <inttypes.h>
#include <stdarg.h>
#include "tests/unit/check.h"
#include "agent/track/http/http_track.h"

/* ---- what the callback saw -------------------------------------------------- */

#define MAXX 16
#define MAXW 256
struct got {
	int n;
	struct http_exchange x[MAXX];
	uint64_t w[MAXX][MAXW];
};

static void on_x(void *ctx, const struct http_exchange *x)
{
	struct got *g = ctx;
	if (g->n >= MAXX)
		return;
	g->x[g->n] = *x;
	for (size_t i = 0; i < x->n_content_writes && i < MAXW; i++)
		g->w[g->n][i] = x->content_writes[i];
	g->x[g->n].content_writes = g->w[g->n];
	g->n++;
}

static struct http_track_stats totals;

static struct http_track *mk(struct got *g)
{
	memset(g, 0, sizeof(*g));
	struct http_track_cfg cfg = { .on_exchange = on_x, .ctx = g, .totals = &totals };
	struct http_track *t = http_track_new(&cfg);
	CHECK(t, "http_track_new failed");
	return t;
}

static void in(struct http_track *t, const char *s, uint64_t ts)
{
	http_track_feed(t, HTTP_IN, (const uint8_t *)s, strlen(s), strlen(s), ts);
}

static void out(struct http_track *t, const char *s, uint64_t ts)
{
	http_track_feed(t, HTTP_OUT, (const uint8_t *)s, strlen(s), strlen(s), ts);
}

/* s as a chunk of a chunked body, in a static ring of buffers */
static const char *chunk(const char *s)
{
	static char bufs[8][4096];
	static int k;
	char *b = bufs[k++ % 8];
	snprintf(b, sizeof(bufs[0]), "%zx\r\n%s\r\n", strlen(s), s);
	return b;
}

static void post(struct http_track *t, const char *path, const char *hdrs, const char *body,
		 uint64_t ts)
{
	char req[4096];
	snprintf(req, sizeof(req), "POST %s HTTP/1.1\r\nContent-Type: application/json\r\n%s"
		 "Content-Length: %zu\r\n\r\n%s", path, hdrs, strlen(body), body);
	in(t, req, ts);
}

static char *cat(char *dst, size_t cap, int n, ...)
{
	va_list ap;
	va_start(ap, n);
	dst[0] = 0;
	for (int i = 0; i < n; i++)
		strncat(dst, va_arg(ap, const char *), cap - strlen(dst) - 1);
	va_end(ap);
	return dst;
}

/* ---- a vLLM/OpenAI chat stream ------------------------------------------------ */

/* the prompt before the model, and a "model" key inside the prompt's text */
#define CHAT_BODY "{\"messages\":[{\"role\":\"user\",\"content\":\"Say \\\"model\\\": \\\"x\\\"\"}]," \
	"\"model\":\"llama-3-8b\",\"stream\":true,\"max_tokens\":32}"
#define CHAT_REQ "POST /v1/chat/completions?api-key=secret HTTP/1.1\r\nHost: x\r\n" \
	"Content-Type: application/json\r\nX-Request-Id: req-abc\r\nContent-Length: %zu\r\n\r\n%s"
#define SSE_HEAD "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n" \
	"Transfer-Encoding: chunked\r\nx-request-id: resp-1\r\n\r\n"
#define PRE "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"llama-3-8b\","

static const char *const chat_events[] = {
	PRE "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
	PRE "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
	PRE "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
	PRE "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"},\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}]}\n\n",
	PRE "\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":15,\"completion_tokens\":3}}\n\n",
	"data: [DONE]\n\n",
};
#define N_CHAT 6

static void chat_request(struct http_track *t, uint64_t ts)
{
	char req[1024];
	snprintf(req, sizeof(req), CHAT_REQ, strlen(CHAT_BODY), CHAT_BODY);
	in(t, req, ts);
}

static void check_chat_fields(const struct http_exchange *x)
{
	CHECK(x->end == HTTP_END_COMPLETE, "end %s", http_end_name(x->end));
	CHECK(x->status == 200, "status %d", x->status);
	CHECK(!strcmp(x->method, "POST") && !strcmp(x->path, "/v1/chat/completions"),
	      "%s %s (the query is never kept)", x->method, x->path);
	CHECK(!strcmp(x->model, "llama-3-8b"), "model '%s'", x->model);
	CHECK(x->stream == 1 && x->max_tokens == 32, "stream %d max_tokens %" PRId64,
	      x->stream, x->max_tokens);
	CHECK(x->prompt_tokens == 12 && x->completion_tokens == 3, "usage %" PRId64 "/%" PRId64,
	      x->prompt_tokens, x->completion_tokens);
	CHECK(!strcmp(x->finish_reason, "stop"), "finish '%s'", x->finish_reason);
	CHECK(!strcmp(x->request_id, "req-abc") && x->id_src == HTTP_ID_REQUEST, "id '%s' src %d",
	      x->request_id, x->id_src);
	CHECK(x->flags & HTTP_X_SSE && x->flags & HTTP_X_CHUNKED, "flags %#x", x->flags);
	CHECK(x->content_events == 3 && x->other_events == 3 && x->unknown_events == 0,
	      "events %u content, %u other, %u unknown", x->content_events, x->other_events,
	      x->unknown_events);
	CHECK(x->n_content_writes == 3, "%zu writes", x->n_content_writes);
	CHECK(x->content_writes[0] == x->t_first_content && x->content_writes[2] == x->t_last_content,
	      "writes vs first/last");
}

/* (a) one write per event, each its own chunk */
static void test_chat_stream_one_write_per_event(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	chat_request(t, 100);
	out(t, SSE_HEAD, 200);
	for (int i = 0; i < N_CHAT; i++)
		out(t, chunk(chat_events[i]), 300 + 10 * (uint64_t)i);
	CHECK(g.n == 0, "delivered before the terminator");
	out(t, "0\r\n\r\n", 400);
	CHECK(g.n == 1, "%d exchanges", g.n);
	const struct http_exchange *x = &g.x[0];
	check_chat_fields(x);
	CHECK(x->t_arrive == 100 && x->t_req_read == 100 && x->t_resp_start == 200, "head times");
	CHECK(x->t_first_content == 310 && x->t_last_content == 330 && x->t_done == 400,
	      "first %" PRIu64 " last %" PRIu64 " done %" PRIu64, x->t_first_content,
	      x->t_last_content, x->t_done);
	CHECK(x->content_writes[1] == 320, "second write %" PRIu64, x->content_writes[1]);
	CHECK(http_track_in_flight(t) == 0 && http_track_synced(t), "left in flight");
	http_track_free(t);
}

/* (b) several events per write, head and first events in one write */
static void test_chat_stream_packed_writes(void)
{
	struct got g;
	char a[4096], b[4096], w1[8192];
	struct http_track *t = mk(&g);
	chat_request(t, 100);
	cat(a, sizeof(a), 3, chat_events[0], chat_events[1], chat_events[2]);
	cat(b, sizeof(b), 3, chat_events[3], chat_events[4], chat_events[5]);
	cat(w1, sizeof(w1), 2, SSE_HEAD, chunk(a));
	out(t, w1, 200);
	cat(w1, sizeof(w1), 2, chunk(b), "0\r\n\r\n");
	out(t, w1, 300);
	CHECK(g.n == 1, "%d exchanges", g.n);
	check_chat_fields(&g.x[0]);
	CHECK(g.x[0].content_writes[0] == 200 && g.x[0].content_writes[1] == 200 &&
	      g.x[0].content_writes[2] == 300 && g.x[0].t_done == 300, "write times");
	http_track_free(t);
}

/* (c) one event split across two writes takes the second write's time; the
 * chunk boundary falls inside the event too */
static void test_chat_stream_event_split(void)
{
	struct got g;
	char first[512];
	struct http_track *t = mk(&g);
	chat_request(t, 100);
	out(t, SSE_HEAD, 200);
	out(t, chunk(chat_events[0]), 300);
	size_t half = strlen(chat_events[1]) / 2;
	snprintf(first, sizeof(first), "%.*s", (int)half, chat_events[1]);
	out(t, chunk(first), 310);
	out(t, chunk(chat_events[1] + half), 350);
	out(t, chunk(chat_events[2]), 360);
	/* the blank line itself split: "\n" | "\n" */
	snprintf(first, sizeof(first), "%.*s", (int)strlen(chat_events[3]) - 1, chat_events[3]);
	out(t, chunk(first), 370);
	out(t, chunk("\n"), 380);
	out(t, chunk(chat_events[4]), 390);
	out(t, chunk(chat_events[5]), 395);
	out(t, "0\r\n\r\n", 400);
	CHECK(g.n == 1, "%d exchanges", g.n);
	check_chat_fields(&g.x[0]);
	CHECK(g.x[0].content_writes[0] == 350 && g.x[0].content_writes[1] == 360 &&
	      g.x[0].content_writes[2] == 380, "writes %" PRIu64 " %" PRIu64 " %" PRIu64,
	      g.x[0].content_writes[0], g.x[0].content_writes[1], g.x[0].content_writes[2]);
	http_track_free(t);
}

/* (d) request and response in 1-byte pieces, each its own ts: every content
 * event is timed by the byte that completes it (the blank line's LF) */
static void test_chat_stream_bytewise(void)
{
	struct got g;
	static char resp[16384], req[1024];
	struct http_track *t = mk(&g);
	snprintf(req, sizeof(req), CHAT_REQ, strlen(CHAT_BODY), CHAT_BODY);
	for (size_t i = 0; req[i]; i++)
		http_track_feed(t, HTTP_IN, (const uint8_t *)req + i, 1, 1, 1000 + i);
	strcpy(resp, SSE_HEAD);
	size_t ends[N_CHAT];
	for (int i = 0; i < N_CHAT; i++) {
		strcat(resp, chunk(chat_events[i]));
		ends[i] = strlen(resp) - 3;     /* the event's last LF, before the chunk's CRLF */
	}
	strcat(resp, "0\r\n\r\n");
	for (size_t i = 0; resp[i]; i++)
		http_track_feed(t, HTTP_OUT, (const uint8_t *)resp + i, 1, 1, 100000 + i);
	CHECK(g.n == 1, "%d exchanges", g.n);
	const struct http_exchange *x = &g.x[0];
	check_chat_fields(x);
	CHECK(x->t_arrive == 1000 && x->t_req_read == 1000 + strlen(req) - 1, "request times");
	CHECK(x->t_resp_start == 100000 && x->t_done == 100000 + strlen(resp) - 1, "response times");
	for (int i = 0; i < 3; i++)
		CHECK(x->content_writes[i] == 100000 + ends[i + 1], "event %d at %" PRIu64 " not %zu",
		      i, x->content_writes[i], 100000 + ends[i + 1]);
	http_track_free(t);
}

/* ---- other stream shapes ------------------------------------------------------ */

static void test_completions_stream(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	const char *body = "{\"prompt\":\"Once upon\",\"max_completion_tokens\":5,\"model\":\"tiny\",\"stream\":true}";
	char req[512];
	snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.1\r\nContent-Length: %zu\r\n"
		 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n%s",
		 strlen(body), body);
	in(t, req, 10);
	out(t, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", 20);
	out(t, chunk("data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"text\":\" a\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}]}\n\n"), 30);
	out(t, chunk(": keep-alive comment\n\n"), 35);
	out(t, chunk("data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"\",\"index\":0,\"finish_reason\":null}]}\n\n"), 38);
	out(t, chunk("data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\" time\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}\n\n"), 40);
	out(t, chunk("data: [DONE]\n\n"), 50);
	out(t, "0\r\n\r\n", 60);
	CHECK(g.n == 1, "%d exchanges", g.n);
	const struct http_exchange *x = &g.x[0];
	CHECK(x->content_events == 2 && x->other_events == 3, "%u content %u other",
	      x->content_events, x->other_events);
	CHECK(x->t_first_content == 30 && x->t_last_content == 40, "content times");
	CHECK(!strcmp(x->finish_reason, "length") && x->completion_tokens == 5 &&
	      x->prompt_tokens == 3, "usage");
	CHECK(x->max_tokens == 5 && !strcmp(x->model, "tiny") && x->stream == 1, "request fields");
	CHECK(x->id_src == HTTP_ID_TRACEPARENT &&
	      !strcmp(x->request_id, "4bf92f3577b34da6a3ce929d0e0e4736"), "id %s", x->request_id);
	http_track_free(t);
}

/* The token events a stream's split is inferred from (on_token): every event
 * that carries a token, its text or an empty one, at its write's time; not
 * a chat stream's role-only first chunk, comments, the finish-only chunk,
 * usage or [DONE]. */
struct tok_seen {
	int n;
	uint64_t ts[16];
	uint64_t arrive;
};

static void on_tok(void *ctx, const struct http_exchange *x, uint64_t ts)
{
	struct tok_seen *s = ctx;
	if (s->n < 16)
		s->ts[s->n++] = ts;
	s->arrive = x->t_arrive;
}

static void test_token_events(void)
{
	struct tok_seen seen = { 0 };
	struct http_track *t = http_track_new(&(struct http_track_cfg){ .on_token = on_tok, .ctx = &seen });

	CHECK(t, "http_track_new failed");
	post(t, "/v1/chat/completions", "", "{\"stream\":true}", 10);
	out(t, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", 20);
	out(t, chunk("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"), 30);
	out(t, chunk("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"), 40);
	out(t, chunk(": ping\n\n"), 45);
	out(t, chunk("data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\n\n"), 50);
	out(t, chunk("data: {\"choices\":[{\"delta\":{\"content\":null}}]}\n\n"), 55);
	out(t, chunk("data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n"), 60);
	out(t, chunk("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"), 70);
	out(t, chunk("data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n"), 80);
	out(t, "0\r\n\r\n", 90);
	CHECK(seen.n == 3 && seen.ts[0] == 40 && seen.ts[1] == 50 && seen.ts[2] == 60,
	      "%d token events (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")", seen.n, seen.ts[0], seen.ts[1],
	      seen.ts[2]);
	CHECK(seen.arrive == 10, "the exchange in progress: arrive %" PRIu64, seen.arrive);
	http_track_free(t);
}

/* Reasoning, tool-call arguments and a vLLM chunk whose logprobs carry a
 * "content" array: only non-empty generated strings count. */
static void test_chat_reasoning_and_tools(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	in(t, "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 1);
	out(t, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", 2);   /* close-delimited */
	out(t, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hmm\"}}]}\r\n\r\n", 3);
	out(t, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\r\n\r\n", 4);
	out(t, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\"\"}}]}}]}\r\n\r\n", 5);
	out(t, "data: {\"choices\":[{\"delta\":{},\"logprobs\":{\"content\":[{\"token\":\"x\"}]},\"finish_reason\":\"tool_calls\"}]}\r\n\r\n", 6);
	http_track_close(t, 9, HTTP_BY_SERVER);
	CHECK(g.n == 1 && g.x[0].end == HTTP_END_COMPLETE, "close-delimited SSE completes at the close");
	CHECK(g.x[0].content_events == 2 && g.x[0].other_events == 2, "%u content %u other",
	      g.x[0].content_events, g.x[0].other_events);
	CHECK(g.x[0].t_first_content == 3 && g.x[0].t_last_content == 5 && g.x[0].t_done == 9, "times");
	CHECK(!strcmp(g.x[0].finish_reason, "tool_calls"), "finish %s", g.x[0].finish_reason);
	http_track_free(t);
}

static void test_responses_api(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	post(t, "/v1/responses", "", "{\"model\":\"gpt-x\",\"input\":\"hi\",\"stream\":true}", 1);
	out(t, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", 2);
	out(t, chunk("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\",\"status\":\"in_progress\"}}\n\n"), 3);
	out(t, chunk("event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"part\":{\"type\":\"output_text\",\"text\":\"\"}}\n\n"), 4);
	out(t, chunk("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"m1\",\"delta\":\"Hi\"}\n\n"), 5);
	out(t, chunk("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\" there\"}\n\n"), 6);
	/* the JSON type alone, no event: line */
	out(t, chunk("data: {\"type\":\"response.output_text.delta\",\"delta\":\"!\"}\n\n"), 7);
	out(t, chunk("event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"text\":\"Hi there!\"}\n\n"), 8);
	out(t, chunk("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"content\":[{\"type\":\"output_text\",\"text\":\"Hi there!\"}]}],\"usage\":{\"input_tokens\":4,\"output_tokens\":3}}}\n\n"), 9);
	out(t, "0\r\n\r\n", 10);
	CHECK(g.n == 1, "%d exchanges", g.n);
	const struct http_exchange *x = &g.x[0];
	CHECK(x->content_events == 3 && x->other_events == 4, "%u content %u other",
	      x->content_events, x->other_events);
	CHECK(x->t_first_content == 5 && x->t_last_content == 7, "content times");
	CHECK(x->prompt_tokens == 4 && x->completion_tokens == 3, "usage %" PRId64 "/%" PRId64,
	      x->prompt_tokens, x->completion_tokens);
	CHECK(!strcmp(x->model, "gpt-x"), "model %s", x->model);
	http_track_free(t);
}

/* ---- connections ---------------------------------------------------------------- */

static void test_keep_alive_three_requests(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	for (int i = 0; i < 3; i++) {
		uint64_t b = 1000 * (uint64_t)(i + 1);
		char req[256];
		snprintf(req, sizeof(req), "GET /v1/models HTTP/1.1\r\nX-Request-Id: k%d\r\n\r\n", i);
		in(t, req, b);
		out(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n", b + 10);
		out(t, "{\"data\":[]}", b + 20);
	}
	CHECK(g.n == 3, "%d exchanges", g.n);
	for (int i = 0; i < 3; i++) {
		char id[8];
		snprintf(id, sizeof(id), "k%d", i);
		uint64_t b = 1000 * (uint64_t)(i + 1);
		CHECK(!strcmp(g.x[i].request_id, id) && g.x[i].t_arrive == b &&
		      g.x[i].t_req_read == b && g.x[i].t_resp_start == b + 10 &&
		      g.x[i].t_done == b + 20 && g.x[i].status == 200, "exchange %d", i);
		CHECK(g.x[i].content_events == 0 && g.x[i].t_first_content == 0, "no content events");
	}
	http_track_free(t);
}

static void test_pipelined(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	in(t, "POST /a HTTP/1.1\r\nContent-Length: 3\r\nX-Request-Id: p1\r\n\r\nabcGET /b HTTP/1.1\r\n"
	      "X-Request-Id: p2\r\n\r\nHEAD /c HTTP/1.1\r\nX-Request-Id: p3\r\n\r\n", 10);
	CHECK(http_track_in_flight(t) == 3, "%u in flight", http_track_in_flight(t));
	out(t, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", 20);
	/* a HEAD response has no body, whatever its Content-Length says */
	out(t, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", 30);
	CHECK(g.n == 3, "%d exchanges", g.n);
	CHECK(!strcmp(g.x[0].request_id, "p1") && g.x[0].status == 201 && !strcmp(g.x[0].path, "/a"), "first");
	CHECK(!strcmp(g.x[1].request_id, "p2") && g.x[1].status == 404 && g.x[1].t_done == 30, "second");
	CHECK(!strcmp(g.x[2].request_id, "p3") && g.x[2].status == 200 && !strcmp(g.x[2].method, "HEAD"), "third");
	CHECK(http_track_synced(t), "lost sync");
	http_track_free(t);
}

/* A non-streamed completion: usage and finish_reason from a Content-Length
 * JSON body written in three pieces, a key cut at each boundary. */
static void test_json_response_with_usage(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	const char *body = "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,"
		"\"message\":{\"role\":\"assistant\",\"content\":\"The \\\"finish_reason\\\": no\"},"
		"\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":7,\"total_tokens\":17,"
		"\"completion_tokens\":10}}";
	char head[256];
	post(t, "/v1/chat/completions", "", "{\"model\":\"m\",\"stream\":false,\"max_tokens\":10}", 5);
	snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", strlen(body));
	out(t, head, 50);
	const char *cuts[] = { strstr(body, "_reason\":\"len"), strstr(body, "tion_tokens") };
	http_track_feed(t, HTTP_OUT, (const uint8_t *)body, (size_t)(cuts[0] - body), (size_t)(cuts[0] - body), 60);
	http_track_feed(t, HTTP_OUT, (const uint8_t *)cuts[0], (size_t)(cuts[1] - cuts[0]), (size_t)(cuts[1] - cuts[0]), 70);
	CHECK(g.n == 0, "done early");
	out(t, cuts[1], 80);
	CHECK(g.n == 1, "%d exchanges", g.n);
	const struct http_exchange *x = &g.x[0];
	CHECK(x->stream == 0 && x->max_tokens == 10 && !strcmp(x->model, "m"), "request fields");
	CHECK(x->t_req_read == 5, "t_req_read %" PRIu64, x->t_req_read);
	CHECK(x->prompt_tokens == 7 && x->completion_tokens == 10 && !strcmp(x->finish_reason, "length"),
	      "usage %" PRId64 "/%" PRId64 " %s", x->prompt_tokens, x->completion_tokens, x->finish_reason);
	CHECK(x->t_resp_start == 50 && x->t_done == 80 && x->content_events == 0 && !(x->flags & HTTP_X_SSE), "times");
	http_track_free(t);
}

static void test_error_responses(void)
{
	static const int codes[] = { 404, 429, 500 };
	struct got g;
	struct http_track *t = mk(&g);
	for (int i = 0; i < 3; i++) {
		char resp[256];
		uint64_t b = 100 * (uint64_t)(i + 1);
		in(t, "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		      "b\r\n{\"model\":1}\r\n0\r\n\r\n", b);
		const char *body = "{\"error\":{\"message\":\"no\"}}";
		snprintf(resp, sizeof(resp), "HTTP/1.1 %d Oops\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nx-request-id: e%d\r\n\r\n%s", codes[i], strlen(body), i, body);
		out(t, resp, b + 1);
	}
	CHECK(g.n == 3, "%d exchanges", g.n);
	for (int i = 0; i < 3; i++) {
		CHECK(g.x[i].status == codes[i] && g.x[i].end == HTTP_END_COMPLETE, "status %d", g.x[i].status);
		CHECK(g.x[i].id_src == HTTP_ID_RESPONSE && g.x[i].request_id[0] == 'e', "the response's id");
		CHECK(g.x[i].model[0] == 0 && g.x[i].t_req_read == 100 * (uint64_t)(i + 1), "a number is no model");
	}
	http_track_free(t);
}

static void test_client_disconnects_mid_stream(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	chat_request(t, 100);
	out(t, SSE_HEAD, 200);
	out(t, chunk(chat_events[0]), 300);
	out(t, chunk(chat_events[1]), 310);
	http_track_close(t, 320, HTTP_BY_CLIENT);
	CHECK(g.n == 1 && g.x[0].end == HTTP_END_CLIENT_CLOSED, "end %s", http_end_name(g.x[0].end));
	CHECK(g.x[0].content_events == 1 && g.x[0].t_first_content == 310 && g.x[0].t_done == 320, "partial");
	/* the tracker serves the next connection */
	chat_request(t, 400);
	out(t, "HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n", 410);
	CHECK(g.n == 2 && g.x[1].status == 503 && g.x[1].t_arrive == 400, "after the close");
	/* a request the server never answered */
	chat_request(t, 500);
	http_track_close(t, 600, HTTP_BY_SERVER);
	CHECK(g.n == 3 && g.x[2].end == HTTP_END_SERVER_CLOSED && g.x[2].status == 0, "unanswered");
	http_track_free(t);
}

static void test_expect_100_continue(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	in(t, "POST /v1/completions HTTP/1.1\r\nContent-Length: 16\r\nExpect: 100-continue\r\n\r\n", 10);
	out(t, "HTTP/1.1 100 Continue\r\n\r\n", 20);
	CHECK(g.n == 0, "100 Continue is not the response");
	in(t, "{\"max_tokens\":7}", 30);
	out(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 40);
	CHECK(g.n == 1, "%d", g.n);
	const struct http_exchange *x = &g.x[0];
	CHECK(x->t_arrive == 10 && x->t_continue == 20 && x->t_req_read == 30 &&
	      x->t_resp_start == 40 && x->status == 200 && x->max_tokens == 7, "times");
	CHECK(x->flags & HTTP_X_CONTINUE, "flags %#x", x->flags);
	http_track_free(t);
}

/* ---- truncated captures -------------------------------------------------------- */

/* Bodies with uncaptured bytes keep their framing: a 2 KiB request body of
 * which 512 bytes were copied, a response body by sendfile (nothing copied),
 * and an SSE stream whose events lost their tails. */
static void test_gaps_in_bodies_keep_framing(void)
{
	struct got g;
	static char req[4096];
	struct http_track *t = mk(&g);
	int head = snprintf(req, sizeof(req), "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2000\r\n\r\n");
	int n = head + snprintf(req + head, sizeof(req) - (size_t)head, "{\"model\":\"big\",\"messages\":[{\"content\":\"");
	memset(req + n, 'x', (size_t)(head + 1996 - n));
	http_track_feed(t, HTTP_IN, (const uint8_t *)req, 512, (size_t)head + 1996, 10);
	in(t, "\"}]}", 20);
	CHECK(http_track_in_flight(t) == 1, "request lost");
	/* a body of 50000 bytes moved by sendfile */
	out(t, "HTTP/1.1 200 OK\r\nContent-Length: 50000\r\n\r\n", 30);
	http_track_feed(t, HTTP_OUT, NULL, 0, 50000, 40);
	CHECK(g.n == 1 && g.x[0].t_done == 40 && g.x[0].end == HTTP_END_COMPLETE, "sendfile body");
	CHECK(!strcmp(g.x[0].model, "big") && g.x[0].t_req_read == 20, "model %s", g.x[0].model);
	CHECK(g.x[0].flags & HTTP_X_BODY_GAP, "gap flag");
	/* an SSE stream: event 1's tail in a gap (its content prefix seen: content),
	 * event 2 captured whole, event 3 cut before its content (unknown) */
	chat_request(t, 100);
	out(t, SSE_HEAD, 110);
	const char *e1 = chunk(chat_events[1]);
	const char *cut = strstr(e1, "\"content\":\"") + 11;
	http_track_feed(t, HTTP_OUT, (const uint8_t *)e1, (size_t)(cut - e1), strlen(e1), 120);
	out(t, chunk(chat_events[2]), 130);
	const char *e3 = chunk(chat_events[3]);
	http_track_feed(t, HTTP_OUT, (const uint8_t *)e3, 40, strlen(e3), 140);
	out(t, chunk(chat_events[0]), 150);
	out(t, "0\r\n\r\n", 160);
	CHECK(g.n == 2 && g.x[1].end == HTTP_END_COMPLETE, "%d", g.n);
	const struct http_exchange *x = &g.x[1];
	/* event 1 ends within its gap: the next blank line seen (event 2's) ends
	 * both: one content event at 130; event 3 + role chunk likewise: unknown */
	CHECK(x->content_events == 1 && x->unknown_events == 1 && x->t_first_content == 130,
	      "%u content %u unknown, first %" PRIu64, x->content_events, x->unknown_events,
	      x->t_first_content);
	CHECK(http_track_stats(t)->gaps == 4 && http_track_stats(t)->unsynced == 0 &&
	      http_track_stats(t)->gap_bytes_lost == 0, "stats");
	http_track_free(t);
}

/* A chunk-size line in a gap: the response is handed over unsynced, counted,
 * and the tracker resynchronises at the next request and its response. */
static void test_gap_in_chunk_size_line(void)
{
	struct got g;
	char w[4096];
	struct http_track *t = mk(&g);
	chat_request(t, 100);
	out(t, SSE_HEAD, 110);
	out(t, chunk(chat_events[0]), 120);
	out(t, chunk(chat_events[1]), 130);
	/* event 2's chunk ends the captured bytes of a write; the next chunk's size line is lost */
	cat(w, sizeof(w), 2, chunk(chat_events[2]), chunk(chat_events[3]));
	http_track_feed(t, HTTP_OUT, (const uint8_t *)w, strlen(chunk(chat_events[2])) + 1, strlen(w), 140);
	CHECK(g.n == 1 && g.x[0].end == HTTP_END_UNSYNCED, "n %d", g.n);
	CHECK(g.x[0].content_events == 2 && g.x[0].t_done == 140, "kept until then");
	CHECK(!http_track_synced(t) && http_track_stats(t)->unsynced == 1, "unsynced");
	out(t, chunk(chat_events[4]), 150);       /* the rest of the lost response */
	out(t, "0\r\n\r\n", 160);
	chat_request(t, 200);
	out(t, SSE_HEAD, 210);
	for (int i = 0; i < N_CHAT; i++)
		out(t, chunk(chat_events[i]), 220 + (uint64_t)i);
	out(t, "0\r\n\r\n", 230);
	CHECK(g.n == 2, "%d", g.n);
	check_chat_fields(&g.x[1]);
	CHECK(g.x[1].t_arrive == 200 && g.x[1].t_first_content == 221, "after the resync");
	CHECK(http_track_synced(t) && http_track_stats(t)->resynced == 1, "resynced");
	http_track_free(t);
}

/* A request head in a gap: the response finds no request (an orphan) and
 * the next request is followed again. */
static void test_gap_hides_request_head(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	http_track_feed(t, HTTP_IN, (const uint8_t *)"POST", 0, 200, 10);
	out(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 20);
	CHECK(g.n == 0 && http_track_stats(t)->orphan_responses == 1, "orphan");
	in(t, "GET /health HTTP/1.1\r\n\r\n", 30);
	out(t, "HTTP/1.1 204 No Content\r\n\r\n", 40);
	CHECK(g.n == 1 && g.x[0].status == 204 && !strcmp(g.x[0].path, "/health"), "%d", g.n);
	http_track_free(t);
}

static void test_connection_close_response(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	in(t, "GET /v1/models HTTP/1.0\r\n\r\n", 10);
	out(t, "HTTP/1.0 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n\r\n", 20);
	out(t, "{\"usage\":{\"prompt_tokens\":1}}", 30);
	CHECK(g.n == 0, "ended before the close");
	http_track_close(t, 40, HTTP_BY_SERVER);
	CHECK(g.n == 1 && g.x[0].end == HTTP_END_COMPLETE && g.x[0].t_done == 40 &&
	      g.x[0].prompt_tokens == 1 && g.x[0].flags & HTTP_X_CLOSE, "end %s", http_end_name(g.x[0].end));
	/* the client half-closed after its request: the server's close still
	 * ends a close-delimited body, complete */
	in(t, "GET /v1/models HTTP/1.0\r\n\r\n", 50);
	out(t, "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\n{}", 60);
	http_track_close(t, 70, HTTP_BY_SERVER_AFTER_CLIENT);
	CHECK(g.n == 2 && g.x[1].end == HTTP_END_COMPLETE && g.x[1].t_done == 70, "end %s",
	      http_end_name(g.x[1].end));
	/* ... but a framed stream the server gave up on after the client left
	 * (nginx closes on EPOLLRDHUP, no read or write fails) is the client's */
	chat_request(t, 100);
	out(t, SSE_HEAD, 200);
	out(t, chunk(chat_events[1]), 310);
	http_track_close(t, 320, HTTP_BY_SERVER_AFTER_CLIENT);
	CHECK(g.n == 3 && g.x[2].end == HTTP_END_CLIENT_CLOSED && g.x[2].content_events == 1, "end %s",
	      http_end_name(g.x[2].end));
	http_track_free(t);
}

/* The server's FIN (shutdown SHUT_WR) ends a close-delimited body there,
 * complete; the close() that follows ends nothing more. A framed response
 * in progress is not ended by it (its end is its framing's, or the close). */
static void test_shutdown_ends_close_delimited_body(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	in(t, "GET /v1/models HTTP/1.0\r\n\r\n", 10);
	out(t, "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\n{\"usage\":{\"prompt_tokens\":2}}", 20);
	http_track_shut(t, 25);
	CHECK(g.n == 1 && g.x[0].end == HTTP_END_COMPLETE && g.x[0].t_done == 25 && g.x[0].prompt_tokens == 2,
	      "%d exchanges, end %s at %llu", g.n, http_end_name(g.x[0].end), (unsigned long long)g.x[0].t_done);
	http_track_close(t, 900, HTTP_BY_SERVER);
	CHECK(g.n == 1, "the close after the FIN made %d exchanges", g.n);
	http_track_free(t);

	t = mk(&g);
	chat_request(t, 100);
	out(t, SSE_HEAD, 200);
	out(t, chunk(chat_events[1]), 310);
	http_track_shut(t, 320);
	CHECK(g.n == 0, "a chunked stream ended by a FIN in its middle");
	http_track_close(t, 330, HTTP_BY_SERVER);
	CHECK(g.n == 1 && g.x[0].end == HTTP_END_SERVER_CLOSED && g.x[0].t_done == 330, "end %s",
	      http_end_name(g.x[0].end));
	http_track_free(t);
}

/* Attached mid-exchange, garbage, an HTTP/2 preface, a timeout and a late
 * response: counted, never matched to the wrong request. */
static void test_midstream_garbage_and_expiry(void)
{
	struct got g;
	memset(&g, 0, sizeof(g));
	struct http_track_cfg cfg = { .on_exchange = on_x, .ctx = &g, .midstream = true };
	struct http_track *t = http_track_new(&cfg);
	out(t, "\"content\":\"x\"}}]}\n\n", 5);
	in(t, "ages\":[]}GET /x HTTP/1.1\r\n\r\n", 6);       /* no message start: skipped */
	in(t, "POST /a HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 10);
	CHECK(http_track_in_flight(t) == 1 && http_track_stats(t)->unsynced == 0, "resync at a piece start");
	http_track_expire(t, 50);
	CHECK(g.n == 1 && g.x[0].end == HTTP_END_TIMEOUT && g.x[0].t_done == 50, "expired");
	in(t, "GET /b HTTP/1.1\r\n\r\n", 60);
	out(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 70);   /* /a's late answer */
	CHECK(g.n == 1 && http_track_stats(t)->orphan_responses == 1, "late answer matched");
	out(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 80);
	CHECK(g.n == 2 && !strcmp(g.x[1].path, "/b") && g.x[1].t_resp_start == 80, "/b");
	in(t, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 90);
	CHECK(http_track_stats(t)->malformed == 1 && !http_track_synced(t), "HTTP/2 preface");
	out(t, "\x16\x03\x01garbage", 95);
	CHECK(http_track_stats(t)->malformed == 2 && g.n == 2, "output garbage: malformed, no exchange");
	in(t, "GET /c HTTP/1.1\r\n\r\n", 100);
	out(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 110);
	CHECK(g.n == 3 && !strcmp(g.x[2].path, "/c"), "after the preface");
	http_track_stats(t);
	http_track_free(t);
}

/* Timestamps that go back are raised (and counted); an upgrade ends tracking. */
static void test_clamp_and_upgrade(void)
{
	struct got g;
	struct http_track *t = mk(&g);
	in(t, "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 100);
	out(t, "HTTP/1.1 101 Switching Protocols\r\n\r\n\x81\x05hello", 90);
	CHECK(g.n == 1 && g.x[0].status == 101 && g.x[0].t_resp_start == 100, "upgrade");
	CHECK(http_track_stats(t)->clamped == 1, "clamped");
	in(t, "\x81\x85garbage GET / HTTP/1.1\r\n\r\n", 110);
	CHECK(http_track_in_flight(t) == 0 && http_track_stats(t)->malformed == 0, "ignored after the upgrade");
	/* a status line begun (in feed order) before its request: raised to the
	 * request's arrival; a negative count is no count (found by the fuzzer) */
	http_track_close(t, 120, HTTP_BY_SERVER);
	out(t, "HTTP/1.1 2", 130);
	in(t, "GET /late HTTP/1.1\r\n\r\n", 140);
	out(t, "00 OK\r\nContent-Length: 30\r\n\r\n{\"usage\":{\"prompt_tokens\":-5}}", 150);
	CHECK(g.n == 2 && g.x[1].t_resp_start == 140 && g.x[1].prompt_tokens == -1, "resp %" PRIu64
	      " prompt %" PRId64, g.x[1].t_resp_start, g.x[1].prompt_tokens);
	CHECK(http_track_stats(t)->clamped == 2, "clamped %" PRIu64, http_track_stats(t)->clamped);
	http_track_free(t);
}

static void test_totals_and_names(void)
{
	CHECK(totals.exchanges > 20 && totals.unsynced >= 1 && totals.unknown_events >= 1, "totals");
	CHECK(!strcmp(http_end_name(HTTP_END_CLIENT_CLOSED), "client_closed") &&
	      !strcmp(http_end_name((enum http_end)99), "unknown"), "names");
}

int main(void)
{
	RUN(test_chat_stream_one_write_per_event);
	RUN(test_chat_stream_packed_writes);
	RUN(test_chat_stream_event_split);
	RUN(test_chat_stream_bytewise);
	RUN(test_completions_stream);
	RUN(test_token_events);
	RUN(test_chat_reasoning_and_tools);
	RUN(test_responses_api);
	RUN(test_keep_alive_three_requests);
	RUN(test_pipelined);
	RUN(test_json_response_with_usage);
	RUN(test_error_responses);
	RUN(test_client_disconnects_mid_stream);
	RUN(test_expect_100_continue);
	RUN(test_gaps_in_bodies_keep_framing);
	RUN(test_gap_in_chunk_size_line);
	RUN(test_gap_hides_request_head);
	RUN(test_connection_close_response);
	RUN(test_shutdown_ends_close_delimited_body);
	RUN(test_midstream_garbage_and_expiry);
	RUN(test_clamp_and_upgrade);
	RUN(test_totals_and_names);
	return CHECK_DONE();
}
