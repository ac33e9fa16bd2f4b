/* test_agent_http_reason.c - reasoning told apart from the answer
 * (agent/track/http/http_reason.c) through the stream tracker, in every shape
 * servers send it: delta.reasoning, delta.reasoning_content, the Responses
 * API, inline <think>...</think> with the tag inside an event, across two
 * events, across two writes, escaped, and never opened; tool calls; and what
 * else a response or request carries for tasks and cascades: the response's
 * ids, JSON-RPC's method, the MCP tool's name and error, the conversation id,
 * the body fingerprint without the model. */
#include <inttypes.h>
#include "tests/unit/check.h"
#include "agent/track/http/http_reason.h"
#include "agent/track/http/http_track.h"

static struct http_exchange got;
static int n_got;

static void on_x(void *ctx, const struct http_exchange *x)
{
	(void)ctx;
	got = *x;
	n_got++;
}

static struct http_track *mk(void)
{
	n_got = 0;
	memset(&got, 0, sizeof(got));
	struct http_track *t = http_track_new(&(struct http_track_cfg){ .on_exchange = on_x,
									 .digest_key = 0x5eed });
	CHECK(t, "http_track_new");
	return t;
}

static void feed(struct http_track *t, enum http_dir dir, const char *s, uint64_t ts)
{
	http_track_feed(t, dir, (const uint8_t *)s, strlen(s), strlen(s), ts);
}

static void request(struct http_track *t, const char *path, const char *hdrs, const char *body)
{
	char req[2048];
	snprintf(req, sizeof(req), "POST %s HTTP/1.1\r\nContent-Type: application/json\r\n%s"
		 "Content-Length: %zu\r\n\r\n%s", path, hdrs, strlen(body), body);
	feed(t, HTTP_IN, req, 10);
}

/* A chunked event stream: event i (data JSON evs[i], or a named event when
 * it starts with "event:") written at ts 100 * (i + 1); the write of event
 * split_ev is cut after the first split_after in it, its second part one ns
 * later. */
static void stream(struct http_track *t, const char *const *evs, int n, int split_ev, const char *split_after)
{
	feed(t, HTTP_OUT, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nx-request-id: srv-7\r\n"
	     "Transfer-Encoding: chunked\r\n\r\n", 50);
	for (int i = 0; i < n; i++) {
		char ev[1024], ch[1100];
		if (!strncmp(evs[i], "event:", 6))
			snprintf(ev, sizeof(ev), "%s\n\n", evs[i]);
		else
			snprintf(ev, sizeof(ev), "data: %s\n\n", evs[i]);
		snprintf(ch, sizeof(ch), "%zx\r\n%s\r\n", strlen(ev), ev);
		uint64_t ts = 100 * (uint64_t)(i + 1);
		if (i == split_ev && split_after) {
			size_t at = strstr(ch, split_after) - ch + strlen(split_after);
			char first[1100];
			memcpy(first, ch, at);
			first[at] = 0;
			feed(t, HTTP_OUT, first, ts);
			feed(t, HTTP_OUT, ch + at, ts + 1);
		} else {
			feed(t, HTTP_OUT, ch, ts);
		}
	}
	feed(t, HTTP_OUT, "0\r\n\r\n", 100 * (uint64_t)(n + 1));
}

#define CHUNK(delta) "{\"id\":\"chatcmpl-9\",\"choices\":[{\"index\":0,\"delta\":" delta "}]}"

static void expect(uint64_t first_r, uint64_t first_a, uint64_t first_tool, uint32_t nr, uint32_t na,
		   const char *shape)
{
	CHECK(n_got == 1, "%d exchanges", n_got);
	CHECK(got.t_first_reasoning == first_r && got.t_first_answer == first_a && got.t_first_tool == first_tool,
	      "reasoning %" PRIu64 " answer %" PRIu64 " tool %" PRIu64, got.t_first_reasoning,
	      got.t_first_answer, got.t_first_tool);
	CHECK(got.reasoning_events == nr && got.answer_events == na, "events %u reasoning, %u answer",
	      got.reasoning_events, got.answer_events);
	const char *s = http_reason_shape_name(got.reasoning_shape);
	CHECK(shape ? s && !strcmp(s, shape) : !s, "shape %s", s ? s : "none");
}

static void run(const char *const *evs, int n, int split_ev, const char *split_after)
{
	struct http_track *t = mk();
	request(t, "/v1/chat/completions", "", "{\"model\":\"m\",\"stream\":true}");
	stream(t, evs, n, split_ev, split_after);
	http_track_free(t);
}

static void reasoning_fields(void)
{
	for (int k = 0; k < 2; k++) {
		const char *key = k ? "reasoning_content" : "reasoning";
		char r[3][128];
		for (int i = 0; i < 3; i++)
			snprintf(r[i], sizeof(r[i]), CHUNK("{\"%s\":\" r%d\"}"), key, i);
		const char *evs[] = { CHUNK("{\"role\":\"assistant\",\"content\":\"\"}"), r[0], r[1], r[2],
				      CHUNK("{\"content\":\" a0\"}"), CHUNK("{\"content\":\" a1\"}"),
				      CHUNK("{}"), "[DONE]" };
		run(evs, 8, -1, NULL);
		/* the role-only first event is neither; TTFT stays the first reasoning's */
		expect(200, 500, 0, 3, 2, "field");
		CHECK(got.t_first_content == 200 && got.content_events == 5, "content %" PRIu64 " x%u",
		      got.t_first_content, got.content_events);
		CHECK(!strcmp(got.resp_header_id, "srv-7") && !strcmp(got.resp_body_id, "chatcmpl-9"),
		      "ids %s %s", got.resp_header_id, got.resp_body_id);
	}
}

static void think_inline(void)
{
	/* the tag inside one event: its event has answer characters, so it is the first answer */
	const char *one[] = { CHUNK("{\"content\":\"<think> r0\"}"), CHUNK("{\"content\":\" r1\"}"),
			      CHUNK("{\"content\":\" r2</think>\\n\\na0\"}"), CHUNK("{\"content\":\" a1\"}") };
	run(one, 4, -1, NULL);
	expect(100, 300, 0, 2, 2, "think");
	/* across two events: the second holds the answer's first characters */
	const char *two[] = { CHUNK("{\"content\":\"<think> r0\"}"), CHUNK("{\"content\":\" r1</thi\"}"),
			      CHUNK("{\"content\":\"nk>\\n\\na0\"}"), CHUNK("{\"content\":\" a1\"}") };
	run(two, 4, -1, NULL);
	expect(100, 300, 0, 2, 2, "think");
	/* across two writes inside the tag: the event is timed by its second write */
	const char *wr[] = { CHUNK("{\"content\":\"<think> r0\"}"), CHUNK("{\"content\":\" r1\"}"),
			     CHUNK("{\"content\":\"</think>\\n\\na0\"}"), CHUNK("{\"content\":\" a1\"}") };
	run(wr, 4, 2, "</th");
	expect(100, 301, 0, 2, 2, "think");
	/* escaped as JSON may (Go escapes < and >; \/ is legal) */
	const char *esc[] = { CHUNK("{\"content\":\"\\u003cthink\\u003e r0\"}"),
			      CHUNK("{\"content\":\" r1<\\/think>a0\"}") };
	run(esc, 2, -1, NULL);
	expect(100, 200, 0, 1, 1, "think");
	/* the opening tag cut across events */
	const char *cut[] = { CHUNK("{\"content\":\"<thi\"}"), CHUNK("{\"content\":\"nk> r0\"}"),
			      CHUNK("{\"content\":\"</think>a0\"}") };
	run(cut, 3, -1, NULL);
	expect(100, 300, 0, 2, 1, "think");
	/* never opened (DeepSeek-R1's template puts <think> in the prompt): what
	 * came before </think> reasoned, though it waited undecided */
	const char *noopen[] = { CHUNK("{\"content\":\" r0\"}"), CHUNK("{\"content\":\" r1\"}"),
				 CHUNK("{\"content\":\" r2</think>\"}"), CHUNK("{\"content\":\"a0\"}") };
	run(noopen, 4, -1, NULL);
	expect(100, 400, 0, 3, 1, "think");
	/* no tag at all: all answer, TTFO = TTFT */
	const char *plain[] = { CHUNK("{\"content\":\" a0\"}"), CHUNK("{\"content\":\" a1\"}") };
	run(plain, 2, -1, NULL);
	expect(0, 100, 0, 0, 2, NULL);
	/* opened and never closed (cut by max_tokens): all reasoning, no answer */
	const char *open[] = { CHUNK("{\"content\":\"<think> r0\"}"), CHUNK("{\"content\":\" r1\"}") };
	run(open, 2, -1, NULL);
	expect(100, 0, 0, 2, 0, "think");
	/* text completions: choices[].text */
	const char *text[] = { "{\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"<think> r0\"}]}",
			       "{\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"</think> a0\"}]}" };
	run(text, 2, -1, NULL);
	expect(100, 200, 0, 1, 1, "think");
}

static void tool_calls(void)
{
	const char *evs[] = { CHUNK("{\"reasoning_content\":\" r0\"}"),
			      CHUNK("{\"tool_calls\":[{\"index\":0,\"id\":\"call-1\",\"type\":\"function\","
				    "\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}"),
			      CHUNK("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}") };
	run(evs, 3, -1, NULL);
	/* the name's event is the first tool call; the arguments' the first answer */
	expect(100, 300, 200, 1, 1, "field");
}

static void responses_api(void)
{
	const char *evs[] = {
		"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp-1\","
		"\"reasoning\":{\"effort\":\"high\"}}}",
		"event: response.reasoning_text.delta\ndata: {\"type\":\"response.reasoning_text.delta\","
		"\"delta\":\" r0\"}",
		"event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_"
		"text.delta\",\"delta\":\" s0\"}",
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":"
		"{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"\"}}",
		"event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_"
		"arguments.delta\",\"delta\":\"{}\"}",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":"
		"\"<think>no</think>\"}",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":"
		"{\"input_tokens\":5,\"output_tokens\":4,\"output_tokens_details\":{\"reasoning_tokens\":2}},"
		"\"error\":null}}",
	};
	struct http_track *t = mk();
	request(t, "/v1/responses", "", "{\"model\":\"m\",\"stream\":true}");
	stream(t, evs, 7, -1, NULL);
	http_track_free(t);
	/* an output_text delta is answer whatever its text says */
	expect(200, 500, 400, 2, 2, "responses");
	CHECK(got.reasoning_tokens == 2 && !got.rpc_error && !strcmp(got.resp_body_id, "resp-1"),
	      "reasoning_tokens %" PRId64 " error %d id %s", got.reasoning_tokens, got.rpc_error, got.resp_body_id);
}

/* MCP over streamable HTTP: tools/call's name, an isError result; the ids
 * and the conversation id a request carries */
static void mcp_and_ids(void)
{
	struct http_track *t = mk();
	request(t, "/mcp", "gen_ai.conversation.id: conv-42\r\n",
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"lookup\","
		"\"arguments\":{\"name\":\"not this\"}}}");
	const char *evs[] = { "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":"
			      "[{\"type\":\"text\",\"text\":\"failed\"}],\"isError\":true}}" };
	stream(t, evs, 1, -1, NULL);
	CHECK(n_got == 1 && !strcmp(got.rpc_method, "tools/call") && !strcmp(got.tool_name, "lookup") &&
	      got.rpc_error && !strcmp(got.conversation_id, "conv-42"), "%s %s %d %s", got.rpc_method,
	      got.tool_name, got.rpc_error, got.conversation_id);
	/* a model's request carries no JSON-RPC: no method, no tool, even with "name" keys */
	request(t, "/v1/chat/completions", "", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"name\":"
		"\"bob\",\"content\":\"hi\"}]}");
	feed(t, HTTP_OUT, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 20);
	CHECK(n_got == 2 && !got.rpc_method[0] && !got.tool_name[0] && !got.rpc_error, "%s %s", got.rpc_method,
	      got.tool_name);
	http_track_free(t);
}

/* The fingerprint: the same but for the model, equal; anything else, not;
 * none for a body not wholly captured */
static void body_fingerprint(void)
{
	const char *bodies[] = {
		"{\"model\":\"small\",\"messages\":[{\"role\":\"user\",\"content\":\"the \\\"model\\\": x\"}]}",
		"{\"model\" : \"large-v2\",\"messages\":[{\"role\":\"user\",\"content\":\"the \\\"model\\\": x\"}]}",
		"{\"model\":\"small\",\"messages\":[{\"role\":\"user\",\"content\":\"the \\\"model\\\": y\"}]}",
		"{\"messages\":[{\"role\":\"user\",\"content\":\"the \\\"model\\\": x\"}],\"model\":\"small\"}",
	};
	uint64_t d[4];
	for (int i = 0; i < 4; i++) {
		struct http_track *t = mk();
		request(t, "/v1/chat/completions", "", bodies[i]);
		feed(t, HTTP_OUT, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 20);
		CHECK(n_got == 1 && got.body_digest_ok, "body %d", i);
		d[i] = got.body_digest;
		http_track_free(t);
	}
	CHECK(d[0] == d[1] && d[0] != d[2] && d[0] != d[3], "%" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64,
	      d[0], d[1], d[2], d[3]);
	/* a gap in the body: no fingerprint */
	struct http_track *t = mk();
	const char *head = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 20\r\n\r\n{\"model\":";
	http_track_feed(t, HTTP_IN, (const uint8_t *)head, strlen(head), strlen(head) + 11, 10);
	feed(t, HTTP_OUT, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 20);
	CHECK(n_got == 1 && !got.body_digest_ok, "a cut body has no fingerprint");
	http_track_free(t);
}

int main(void)
{
	RUN(reasoning_fields);
	RUN(think_inline);
	RUN(tool_calls);
	RUN(responses_api);
	RUN(mcp_and_ids);
	RUN(body_fingerprint);
	return CHECK_DONE();
}
