/* kpi_probes.d - every USDT probe of kpi-infer (provider "kpi"), in one place.
 * Arguments are documented in docs/probes.md; ids are the daemon's numeric
 * request ids, and request_id strings are the x-request-id join key.
 * Probes fire per request and per batch step, never per token. */
provider kpi {
	/* parsed, tokenized and queued; operation: enum kpi_operation (abi/kpi_reasons.h),
	 * the endpoint it came through */
	probe request__admitted(uint64_t id, int fd, int prompt_tokens, int max_tokens, const char *request_id,
				int operation);
	/* refused before queueing: HTTP status and a reason code (docs/probes.md) */
	probe request__rejected(int fd, int status, int reason, const char *request_id);
	/* entered the running set (again after a preemption) */
	probe request__scheduled(uint64_t id);
	probe step__begin(uint64_t step, int prefill_tokens, int decode_seqs, int kv_used, int kv_free);
	/* right after step__begin: the step's n sequences, entries = struct kpi_step_seq[n]
	 * (abi/kpi_step_seq.h); prepared only while someone listens */
	probe step__seqs(uint64_t step, int n, const void *entries);
	probe step__end(uint64_t step);
	probe request__first_token(uint64_t id);
	probe request__preempted(uint64_t id);
	/* last token generated: output tokens and enum finish_reason */
	probe request__finished(uint64_t id, int output_tokens, int finish_reason);
	/* the client went away before the end */
	probe request__cancelled(uint64_t id);
	/* the response's first byte is about to be written on fd; its last has been */
	probe response__start(uint64_t id, int fd);
	probe response__end(uint64_t id, int fd, int http_status);
};
