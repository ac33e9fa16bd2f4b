-- 014_http2.sql - kpiscope trace store, schema version 14: what carried an
-- http row (docs/agent.md "HTTP/2 and gRPC"). Applied on top of version 13 in
-- one transaction; the agent sets user_version.
-- protocol: 'http/1.1', 'h2' (an HTTP/2 stream, in the clear or over TLS) or
-- 'grpc' (an HTTP/2 stream whose content-type is application/grpc: its
-- content_events are the response's messages, its path the method); NULL on
-- the usdt rows. h2_stream: the stream's id. grpc_status: the grpc-status of
-- the call's trailers (a trailers-only answer's headers), NULL where none was
-- seen or the headers were not decodable; http_status stays HTTP's :status.
-- A stream of a connection whose header table is unknown (it was open before
-- the agent attached) has path, method and http_status NULL, never guessed.

ALTER TABLE requests ADD COLUMN protocol TEXT;
ALTER TABLE requests ADD COLUMN h2_stream INTEGER;
ALTER TABLE requests ADD COLUMN grpc_status INTEGER;
ALTER TABLE exchanges_out ADD COLUMN protocol TEXT;
ALTER TABLE exchanges_out ADD COLUMN h2_stream INTEGER;
ALTER TABLE exchanges_out ADD COLUMN grpc_status INTEGER;
