/* test_server_text.c - UTF-8 repair across token pieces, stop strings with
 * hold-back, JSON escaping, the request decoder and the chat template. */
#include <jansson.h>
#include <string.h>

#include "tests/unit/check.h"
#include "daemon/server/api.h"
#include "daemon/server/text.h"

static void feed_all(const char *const *pieces, int n, struct sbuf *out)
{
	struct utf8_stream u = { 0 };
	for (int i = 0; i < n; i++)
		utf8_stream_feed(&u, pieces[i], strlen(pieces[i]), out);
	utf8_stream_flush(&u, out);
}

static void test_utf8_split(void)
{
	/* "é€😀" with every character split across pieces */
	const char *pieces[] = { "a\xC3", "\xA9\xE2\x82", "\xAC\xF0", "\x9F\x98", "\x80z" };
	struct sbuf out = { 0 };
	feed_all(pieces, 5, &out);
	CHECK(!strcmp(out.data, "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z"), "joined '%s'", out.data);
	sbuf_free(&out);
}

static void test_utf8_hold(void)
{
	struct utf8_stream u = { 0 };
	struct sbuf out = { 0 };
	utf8_stream_feed(&u, "x\xE2\x82", 3, &out);
	CHECK(out.len == 1, "incomplete tail held back, got %zu bytes", out.len);
	utf8_stream_feed(&u, "\xAC", 1, &out);
	CHECK(out.len == 4, "completed");
	sbuf_free(&out);
}

static void test_utf8_invalid(void)
{
	const char *pieces[] = { "\xFF", "a\x80", "\xC0\xAF", "\xED\xA0\x80", "\xE2\x82" };
	struct sbuf out = { 0 };
	feed_all(pieces, 5, &out);
	/* every result must be valid UTF-8: jansson checks */
	json_t *s = json_stringn(out.data, out.len);
	CHECK(s != NULL, "output is not valid UTF-8");
	json_decref(s);
	CHECK(memmem(out.data, out.len, "a", 1), "valid bytes survive");
	sbuf_free(&out);
}

static void test_stop(void)
{
	char *stops[] = { "END", "\n\n" };
	size_t emit;
	CHECK(!stop_scan("hello", 5, stops, 2, &emit) && emit == 5, "no stop");
	CHECK(!stop_scan("hello E", 7, stops, 2, &emit) && emit == 6, "hold 'E': %zu", emit);
	CHECK(!stop_scan("hello EN", 8, stops, 2, &emit) && emit == 6, "hold 'EN'");
	CHECK(stop_scan("hello END more", 14, stops, 2, &emit) && emit == 6, "match at 6");
	CHECK(stop_scan("a\n\nEND", 6, stops, 2, &emit) && emit == 1, "earliest match");
	CHECK(!stop_scan("abc\n", 4, stops, 2, &emit) && emit == 3, "hold newline");
	CHECK(!stop_scan("x", 1, NULL, 0, &emit) && emit == 1, "no stops at all");
}

static void test_escape(void)
{
	struct sbuf out = { 0 };
	json_escape(&out, "a\"b\\c\n\x01\x7f\xC3\xA9", 10);
	CHECK(!strcmp(out.data, "a\\\"b\\\\c\\n\\u0001\\u007f\xC3\xA9"), "got '%s'", out.data);
	sbuf_free(&out);
}

static int parse(const char *body, bool chat, struct api_request *r, bool *bad_json, char *err)
{
	return api_request_parse(body, strlen(body), chat, r, bad_json, err, 256);
}

static void test_api_completion(void)
{
	struct api_request r;
	bool bj;
	char err[256];
	CHECK(parse("{\"model\":\"m\",\"prompt\":\"hi\",\"max_tokens\":5,\"temperature\":0,"
		    "\"top_p\":0.5,\"seed\":7,\"stop\":[\"x\",\"yz\"],\"stream\":true,"
		    "\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true}",
		    false, &r, &bj, err) == 0, "%s", err);
	CHECK(r.prompt && !strcmp(r.prompt, "hi"), "prompt");
	CHECK(r.max_tokens == 5 && r.temperature == 0 && r.top_p == 0.5f, "numbers");
	CHECK(r.has_seed && r.seed == 7 && r.n_stop == 2 && !strcmp(r.stop[1], "yz"), "seed, stop");
	CHECK(r.stream && r.include_usage && r.ignore_eos, "flags");
	api_request_free(&r);

	CHECK(parse("{\"prompt\":[1,2,3],\"stop\":\"s\"}", false, &r, &bj, err) == 0, "%s", err);
	CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && r.n_stop == 1, "token ids");
	CHECK(r.max_tokens == -1 && r.temperature == 1.0f, "defaults");
	api_request_free(&r);
}

static void test_api_errors(void)
{
	static const struct {
		const char *body;
		bool bad_json;
		const char *field;
	} cases[] = {
		{ "{", true, "JSON" },
		{ "[1]", true, "object" },
		{ "{}", false, "'prompt'" },
		{ "{\"prompt\":5}", false, "'prompt'" },
		{ "{\"prompt\":[1,\"a\"]}", false, "'prompt[1]'" },
		{ "{\"prompt\":[-1]}", false, "'prompt[0]'" },
		{ "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", false, "'max_tokens'" },
		{ "{\"prompt\":\"x\",\"max_tokens\":0}", false, "'max_tokens'" },
		{ "{\"prompt\":\"x\",\"max_tokens\":1.5}", false, "'max_tokens'" },
		{ "{\"prompt\":\"x\",\"temperature\":-1}", false, "'temperature'" },
		{ "{\"prompt\":\"x\",\"top_p\":0}", false, "'top_p'" },
		{ "{\"prompt\":\"x\",\"stream\":1}", false, "'stream'" },
		{ "{\"prompt\":\"x\",\"stop\":[1]}", false, "'stop[0]'" },
		{ "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", false, "'stop'" },
		{ "{\"prompt\":\"x\",\"seed\":\"s\"}", false, "'seed'" },
		{ "{\"prompt\":\"x\",\"n\":2}", false, "'n'" },
		{ "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":\"y\"}}", false,
		  "'stream_options.include_usage'" },
		{ "{\"prompt\":\"x\",\"prompt\":\"y\"}", true, "JSON" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct api_request r;
		bool bj;
		char err[256] = "";
		CHECK(parse(cases[i].body, false, &r, &bj, err) < 0, "case %zu accepted", i);
		CHECK(bj == cases[i].bad_json, "case %zu: bad_json %d", i, bj);
		CHECK(strstr(err, cases[i].field), "case %zu: '%s' lacks %s", i, err, cases[i].field);
		api_request_free(&r);
	}
}

static void test_chat(void)
{
	struct api_request r;
	bool bj;
	char err[256];
	CHECK(parse("{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
		    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi \"},"
		    "{\"type\":\"text\",\"text\":\"there\"}]}],\"max_completion_tokens\":3}",
		    true, &r, &bj, err) == 0, "%s", err);
	const char *want = "<|system|>\nbe brief</s>\n<|user|>\nhi there</s>\n<|assistant|>\n";
	CHECK(r.prompt && !strcmp(r.prompt, want), "rendered '%s'", r.prompt);
	CHECK(r.max_tokens == 3, "max_completion_tokens");
	api_request_free(&r);

	CHECK(parse("{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", true, &r, &bj, err) < 0
	      && strstr(err, "'messages[0].role'"), "bad role: %s", err);
	api_request_free(&r);
	CHECK(parse("{\"messages\":[]}", true, &r, &bj, err) < 0 && strstr(err, "'messages'"),
	      "empty: %s", err);
	api_request_free(&r);
	CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":7}]}", true, &r, &bj, err) < 0
	      && strstr(err, "'messages[0].content'"), "bad content: %s", err);
	api_request_free(&r);
}

int main(void)
{
	RUN(test_utf8_split);
	RUN(test_utf8_hold);
	RUN(test_utf8_invalid);
	RUN(test_stop);
	RUN(test_escape);
	RUN(test_api_completion);
	RUN(test_api_errors);
	RUN(test_chat);
	return CHECK_DONE();
}
