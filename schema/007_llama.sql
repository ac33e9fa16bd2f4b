-- 007_llama.sql - kpiscope trace store, schema version 7: the engine's split
-- for servers built on llama.cpp, from uprobes on libllama's llama_decode
-- (source 'http+libllama', docs/agent.md "llama.cpp servers").
-- Applied on top of version 6 in one transaction; the agent sets user_version.
-- A 'libllama' step is one llama_decode call: prefill_tokens counts the tokens
-- of sequences not yet decoding, decode_seqs the sequences decoding one token;
-- kv_used and kv_free are 0 (the call does not show the cache).
-- An 'http+libllama' request is an 'http' one joined to the sequence the
-- engine ran for it: t_sched_ns (its first step's start), t_first_ns (end of
-- the step that computed its first token's logits), t_last_ns (end of its last
-- step) are the engine's, so queue_ns = t_sched - t_req_read, prefill_ns,
-- decode_ns and net_out_ns (t_done - t_last) are as kpi-infer's; server_wait_ns
-- is NULL and net_in_ns + queue_ns + prefill_ns + decode_ns + net_out_ns = e2e_ns.

ALTER TABLE steps ADD COLUMN source TEXT;                   -- 'usdt' | 'libllama'; NULL (older rows): usdt
ALTER TABLE requests ADD COLUMN cached_prompt_tokens INTEGER; -- prompt tokens the KV cache already held (first position)
ALTER TABLE requests ADD COLUMN engine_prompt_tokens INTEGER; -- cached + prefilled: the prompt as the engine saw it
ALTER TABLE requests ADD COLUMN prefill_steps INTEGER;      -- steps that computed its prompt
ALTER TABLE requests ADD COLUMN engine_join TEXT;           -- how the sequence was matched: 'read-order' | 'read-order+usage' (docs/agent.md)
CREATE INDEX IF NOT EXISTS steps_source ON steps(source, pid, t_start_ns);
