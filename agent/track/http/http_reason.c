/* http_reason.c - reasoning and answer told apart event by event: a second
 * bounded key scan of each event (http_sse_scan), and for inline reasoning a
 * matcher of the two tags over the content's characters, JSON escapes
 * undone, carried from event to event. */
#include <string.h>
#include <strings.h>
#include "http_reason.h"

static const char open_tag[] = "<think>", close_tag[] = "</think>";

/* What one event holds, as its keys are met. */
struct ev {
	struct http_reason *r;
	bool reasoning;                 /* reasoning characters (a field, a delta, inside the tags) */
	bool answer;                    /* answer characters */
	bool undecided;                 /* inline content before any tag */
	bool undecided_reasoning;       /* ... that a tag in this event made reasoning */
	bool tool;                      /* a tool call (its name or its arguments) */
	bool field, think;              /* which shape showed the reasoning */
	const char *name;               /* the event: line's name, as far as the scan has read */
	char rtype[40];                 /* the Responses API type from the data ("" none) */
	bool fn_item;                   /* an item of type function_call */
	int delta;                      /* the Responses API delta: -1 none, 0 empty, 1 characters */
};

/* The pending events (and this one's undecided characters) were reasoning
 * (reasoning true) or answer. */
static void settle(struct ev *v, bool reasoning)
{
	struct http_reason *r = v->r;
	if (r->pending) {
		uint64_t *first = reasoning ? &r->t_first_reasoning : &r->t_first_answer;
		if (!*first || r->t_pending < *first)
			*first = r->t_pending;
		if (reasoning)
			r->reasoning_events += r->pending;
		else
			r->answer_events += r->pending;
		r->pending = 0;
	}
	if (v->undecided) {
		if (reasoning)
			v->undecided_reasoning = true;
		else
			v->answer = true;
		v->undecided = false;
	}
	r->tagged = true;
}

/* One character of inline content. */
static void inline_char(struct ev *v, char c)
{
	struct http_reason *r = v->r;
	if (r->closed) {
		v->answer = true;
		return;
	}
	/* the closing tag, in or before the reasoning (a stream that never opened one) */
	r->close_m = c == close_tag[r->close_m] ? r->close_m + 1 : c == '<';
	if (r->in_think) {
		v->reasoning = v->think = true;
		if (r->close_m == sizeof(close_tag) - 1) {
			r->in_think = false;
			r->closed = true;
		}
		return;
	}
	if (!r->tagged) {
		r->open_m = c == open_tag[r->open_m] ? r->open_m + 1 : c == '<';
		if (r->open_m == 1)
			r->before_lt = r->undecided;
	}
	if (r->close_m == sizeof(close_tag) - 1) {
		/* </think> with no <think>: everything before it reasoned */
		settle(v, true);
		v->reasoning = v->think = true;
		r->closed = true;
		return;
	}
	if (!r->tagged && r->open_m == sizeof(open_tag) - 1) {
		/* <think>: the undecided characters were the tag itself, which opens
		 * the reasoning, or, when text came before it, answer (the events
		 * that held only the tag's beginning then count as answer too) */
		settle(v, r->before_lt == 0);
		v->reasoning = v->think = true;
		r->in_think = true;
		r->open_m = 0;
		return;
	}
	if (r->tagged) {
		v->answer = true;
	} else {
		v->undecided = true;
		r->undecided++;
	}
}

/* Feeds a JSON string's raw bytes (escapes kept) as characters: an escape
 * is one character, \u003c and \u003e the tags' angle brackets. */
static void inline_string(struct ev *v, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '\\' && i + 1 < n) {
			char e = s[++i];
			c = e == '/' ? '/' : e == '"' ? '"' : e == '\\' ? '\\' : '\x01';
			if (e == 'u' && i + 4 < n) {
				c = !strncasecmp(s + i + 1, "003c", 4) ? '<' : !strncasecmp(s + i + 1, "003e", 4) ? '>' : '\x01';
				i += 4;
			}
		}
		inline_char(v, c);
	}
}

static void key(void *ctx, int k, const struct http_jval *jv)
{
	struct ev *v = ctx;
	bool str = jv->type == HTTP_J_STR, chars = str && jv->len;
	switch (k) {
	case HTTP_K_TYPE:
		if (!str || !jv->complete)
			break;
		if (!v->rtype[0] && jv->len < sizeof(v->rtype) && jv->len > 9 && !memcmp(jv->s, "response.", 9)) {
			memcpy(v->rtype, jv->s, jv->len);
			v->rtype[jv->len] = 0;
		} else if (jv->len == 13 && !memcmp(jv->s, "function_call", 13)) {
			v->fn_item = true;
		}
		break;
	case HTTP_K_DELTA:
		if (str)
			v->delta = chars;
		break;
	case HTTP_K_TOOL_CALLS:
		v->tool = true;
		break;
	case HTTP_K_REASONING:
	case HTTP_K_REASONING_CONTENT:
		if (chars)
			v->reasoning = v->field = true;
		break;
	case HTTP_K_ARGUMENTS:
		if (chars)
			v->answer = true;
		break;
	case HTTP_K_CONTENT:
	case HTTP_K_TEXT:
		/* the Responses API's text fields say by their event's type, not inline */
		if (str && !v->rtype[0] && strncmp(v->name, "response.", 9))
			inline_string(v, jv->s, jv->len);
		break;
	}
}

/* The Responses API's event type: what its delta is. */
static void responses_event(struct ev *v, const char *t)
{
	size_t n = strlen(t);
	bool is_delta = n > 6 && !strcmp(t + n - 6, ".delta");
	if (!strcmp(t, "response.output_item.added")) {
		v->tool |= v->fn_item;
		return;
	}
	if (!is_delta || v->delta != 1)
		return;
	if (!strcmp(t, "response.reasoning_text.delta") || !strcmp(t, "response.reasoning_summary_text.delta")) {
		v->reasoning = true;
		v->field = false;
		v->think = false;
		v->r->shape = v->r->shape ? v->r->shape : HTTP_REASON_RESPONSES;
	} else if (!strcmp(t, "response.output_text.delta")) {
		v->answer = true;
	} else if (!strcmp(t, "response.function_call_arguments.delta")) {
		v->answer = v->tool = true;
	}
}

void http_reason_event(struct http_reason *r, const struct http_sse *e, uint64_t ts)
{
	char name[40] = "";
	struct ev v = { .r = r, .delta = -1, .name = name };

	if (!http_sse_scan(e, HTTP_REASON_KEYS, key, &v, name, sizeof(name)))
		return;
	const char *t = !strncmp(name, "response.", 9) ? name : v.rtype;
	if (t[0]) {
		/* the Responses API says by its types; its text fields are not inline content */
		v.answer = v.reasoning = v.undecided = v.think = v.field = false;
		responses_event(&v, t);
	}
	if (v.tool && !r->t_first_tool)
		r->t_first_tool = ts;
	if (!r->shape && (v.field || v.think))
		r->shape = v.field ? HTTP_REASON_FIELD : HTTP_REASON_THINK;
	bool reasoning = v.reasoning || v.undecided_reasoning;
	if (reasoning && !r->t_first_reasoning)
		r->t_first_reasoning = ts;
	if (v.answer) {
		r->answer_events++;
		if (!r->t_first_answer)
			r->t_first_answer = ts;
	} else if (reasoning) {
		r->reasoning_events++;
	} else if (v.undecided) {
		if (!r->pending++)
			r->t_pending = ts;
	}
}

void http_reason_end(struct http_reason *r)
{
	struct ev v = { .r = r, .name = "" };
	if (r->pending)
		settle(&v, false);
}

const char *http_reason_shape_name(unsigned shape)
{
	static const char *const names[] = { NULL, "field", "responses", "think" };
	return shape < sizeof(names) / sizeof(names[0]) ? names[shape] : NULL;
}
