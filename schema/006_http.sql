-- 006_http.sql - kpiscope trace store, schema version 6: requests of servers
-- without kpi probes, traced from the HTTP exchange on their sockets (source
-- 'http', docs/agent.md "Tracing any HTTP server").
-- Applied on top of version 5 in one transaction; the agent sets user_version.
-- For an 'http' row: queue_ns, prefill_ns, t_admit/sched/first/last_ns are
-- NULL (the wire cannot tell them); net_in_ns + server_wait_ns + decode_ns +
-- net_out_ns = e2e_ns (the non-null ones); ttft_ns of a stream is its first
-- content event's write, of anything else the response's first write (time
-- to first byte); itl_*_ns are gaps between content events (content_events),
-- tokens only where output_tokens (the response's usage) says so.
-- New loss cause (losses.cause, meta loss_http_unsynced_total):
--   http_unsynced     times an HTTP tracker lost a connection's framing (bytes
--                     not captured where framing was, or not HTTP/1.1); its
--                     requests until a message starts again have no row or
--                     end as 'unsynced'

ALTER TABLE requests ADD COLUMN source TEXT;            -- 'usdt' | 'http'; NULL (older rows): usdt
ALTER TABLE requests ADD COLUMN server_wait_ns INTEGER; -- http: first content write (else first write) - t_req_read
ALTER TABLE requests ADD COLUMN t_req_read_ns INTEGER;  -- http: the read that completed the request
ALTER TABLE requests ADD COLUMN t_resp_start_ns INTEGER; -- http: the response's first write (status line)
ALTER TABLE requests ADD COLUMN content_events INTEGER; -- http: server-sent events that carried content
ALTER TABLE requests ADD COLUMN method TEXT;            -- http: request method
ALTER TABLE requests ADD COLUMN path TEXT;              -- http: request path, without the query
ALTER TABLE requests ADD COLUMN model TEXT;             -- http: the request's "model"
ALTER TABLE requests ADD COLUMN stream INTEGER;         -- http: the request's "stream" (1/0)
ALTER TABLE requests ADD COLUMN max_tokens INTEGER;     -- http: "max_tokens" (else max_completion_tokens)
ALTER TABLE requests ADD COLUMN end_reason TEXT;        -- http: complete | client_closed | server_closed | unsynced | timeout
