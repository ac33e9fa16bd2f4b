/* kpi_reasons.h - why a request ended (the finish_reason argument of
 * kpi:request__finished), why kpi-infer refused one (the reason argument of
 * kpi:request__rejected) and which endpoint an admitted one came through (the
 * operation argument of kpi:request__admitted), each with its one names table.
 * Shared by the daemon, the agent and the tools; the numeric values are an ABI
 * (append only). docs/probes.md lists them. */
#ifndef KPI_REASONS_H
#define KPI_REASONS_H

enum kpi_finish_reason {
	KPI_FINISH_NONE = 0,
	KPI_FINISH_STOP = 1,      /* EOS token or a stop string */
	KPI_FINISH_LENGTH = 2,    /* max_tokens or the context limit */
	KPI_FINISH_CANCELLED = 3, /* client went away */
	KPI_FINISH_ERROR = 4,     /* the engine failed the sequence */
	KPI_FINISH__COUNT
};

/* Each finish reason under the two names it goes by: the trace's
 * (requests.finish_reason, kpi-agent's labels) and the wire's (OpenAI's
 * finish_reason field and vLLM's finished_reason label, which call a
 * cancelled sequence "abort"). */
struct kpi_finish_names {
	const char *trace;
	const char *wire;
};

static inline const struct kpi_finish_names *kpi_finish_names(int r)
{
	static const struct kpi_finish_names names[KPI_FINISH__COUNT] = {
		{ NULL, NULL },
		{ "stop", "stop" },
		{ "length", "length" },
		{ "cancelled", "abort" },
		{ "error", "error" },
	};
	static const struct kpi_finish_names unknown = { NULL, NULL };
	return r > KPI_FINISH_NONE && r < KPI_FINISH__COUNT ? &names[r] : &unknown;
}

/* The trace's name of r; NULL for KPI_FINISH_NONE or an unknown value. */
static inline const char *kpi_finish_reason_name(int r)
{
	return kpi_finish_names(r)->trace;
}

/* The OpenAI / vLLM name of r; "error" for any value outside the table. */
static inline const char *kpi_finish_reason_wire(int r)
{
	const char *n = kpi_finish_names(r)->wire;
	return n ? n : "error";
}

enum kpi_reject_reason {
	KPI_REJECT_NONE = 0,
	KPI_REJECT_QUEUE_FULL = 1,        /* 429: waiting requests reached --max-queue */
	KPI_REJECT_BAD_HTTP = 2,          /* 400: malformed request line, header or chunk */
	KPI_REJECT_BODY_TOO_LARGE = 3,    /* 413: body over --max-body */
	KPI_REJECT_HEADERS_TOO_LARGE = 4, /* 431: request head over 16 KiB */
	KPI_REJECT_BAD_JSON = 5,          /* 400: body is not a JSON object */
	KPI_REJECT_BAD_PARAM = 6,         /* 400: a field has the wrong type or value */
	KPI_REJECT_PROMPT_TOO_LONG = 7,   /* 400: prompt + max_tokens over the context or KV pool */
	KPI_REJECT_BAD_TOKEN = 8,         /* 400: prompt token id out of the vocabulary */
	KPI_REJECT_NOT_FOUND = 9,         /* 404: unknown path */
	KPI_REJECT_METHOD = 10,           /* 405: known path, wrong method */
	KPI_REJECT_TIMEOUT = 11,          /* 408: request not complete within --request-timeout */
	KPI_REJECT_DRAINING = 12,         /* 503: shutting down (SIGTERM) */
	KPI_REJECT_UNSUPPORTED = 13,      /* 501/505: transfer coding or HTTP version */
	KPI_REJECT_INTERNAL = 14,         /* 500: the engine refused a request the server accepted */
	KPI_REJECT_UPSTREAM = 15,         /* 502/503/504: a worker this request was sent to failed,
					   * could not be reached or gave an invalid answer */
	KPI_REJECT_KV_TRANSFER = 16,      /* 502: the KV stream from the prefill worker was refused
					   * (another model, version, size, truncated) */
	KPI_REJECT_MODEL_MISMATCH = 17,   /* 409: a KV request for another model than this worker's */
	KPI_REJECT__COUNT
};

static inline const char *kpi_reject_reason_name(int r)
{
	static const char *const names[KPI_REJECT__COUNT] = {
		"none", "queue_full", "bad_http", "body_too_large", "headers_too_large",
		"bad_json", "bad_param", "prompt_too_long", "bad_token", "not_found",
		"method_not_allowed", "timeout", "draining", "unsupported", "internal",
		"upstream", "kv_transfer", "model_mismatch",
	};
	return r >= 0 && r < KPI_REJECT__COUNT ? names[r] : "unknown";
}

/* The endpoint of an admitted request, named as the OpenTelemetry GenAI
 * semantic conventions' gen_ai.operation.name. */
enum kpi_operation {
	KPI_OP_NONE = 0,                  /* not known (never fired by the daemon) */
	KPI_OP_TEXT_COMPLETION = 1,       /* POST /v1/completions */
	KPI_OP_CHAT = 2,                  /* POST /v1/chat/completions */
	KPI_OP_KV_PREFILL = 3,            /* POST /v1/kv/prefill: a decode worker's prefill (abi/kpi_kv_wire.h) */
	KPI_OP__COUNT
};

/* gen_ai.operation.name of op; NULL for KPI_OP_NONE or an unknown value. */
static inline const char *kpi_operation_name(int op)
{
	static const char *const names[KPI_OP__COUNT] = { NULL, "text_completion", "chat",
							   "kv_prefill" };
	return op >= 0 && op < KPI_OP__COUNT ? names[op] : NULL;
}

/* How kpi-infer --role router chose the workers of a request: the policy
 * argument of kpi:route__decision. */
enum kpi_route_policy {
	KPI_ROUTE_NONE = 0,
	KPI_ROUTE_ROUND_ROBIN = 1,  /* each role's workers in turn */
	KPI_ROUTE_LEAST_LOADED = 2, /* the fewest waiting + running, from the workers' own /load */
	KPI_ROUTE_PREFIX = 3,       /* prefill worker by a hash of the prompt's prefix; decode least loaded */
	KPI_ROUTE__COUNT
};

static inline const char *kpi_route_policy_name(int p)
{
	static const char *const names[KPI_ROUTE__COUNT] = { NULL, "round-robin", "least-loaded",
							      "prefix" };
	return p > 0 && p < KPI_ROUTE__COUNT ? names[p] : NULL;
}

#endif
