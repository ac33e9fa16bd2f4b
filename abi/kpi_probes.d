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

	/* ---- disaggregated prefill and decode (docs/disaggregation.md) ---- */
	/* router: the request was read and its workers chosen; policy: enum
	 * kpi_route_policy (abi/kpi_reasons.h); decode, prefill: "host:port"
	 * ("" when no prefill worker is named) */
	probe route__decision(uint64_t id, int fd, const char *request_id, int policy,
			      const char *decode, const char *prefill);
	/* prefill worker: the first KV byte of request id goes out on fd to peer
	 * ("host:port"), bytes: the KV it will carry (abi/kpi_kv_wire.h payload),
	 * blocks: the sender's KV blocks holding it */
	probe kv__send_start(uint64_t id, const char *request_id, int fd, uint64_t bytes, int blocks,
			     const char *peer);
	/* prefill worker: the stream's last byte has been written (status 0), or it
	 * ended early (enum kpi_kv_status); bytes: KV bytes sent */
	probe kv__send_end(uint64_t id, int fd, uint64_t bytes, int status);
	/* decode worker: the stream's header has arrived from peer and matched this
	 * worker's model; bytes and blocks as the header announces them */
	probe kv__recv_start(uint64_t id, const char *request_id, int fd, uint64_t bytes, int blocks,
			     const char *peer);
	/* decode worker: the whole KV is in and checked (status 0), or the transfer
	 * failed (enum kpi_kv_status) and the request ends with an error; bytes:
	 * KV bytes received */
	probe kv__recv_end(uint64_t id, int fd, uint64_t bytes, int blocks, int status);
	/* decode worker, engine thread: a request with its KV joins the queue for a
	 * running slot; its wait ends at request__scheduled. waiting_ahead, the KV
	 * blocks it needs, free, running sequences and --max-seqs say why it waits */
	probe kv__slot_wait(uint64_t id, int waiting_ahead, int blocks_needed, int blocks_free,
			    int running, int max_running);
	/* admitted with tokens of its prompt already in the prefix cache */
	probe request__prefix_hit(uint64_t id, int cached_tokens);
};
