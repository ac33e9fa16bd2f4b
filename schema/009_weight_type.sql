-- 009_weight_type.sql - kpiscope trace store, schema version 9: the weight
-- type of the model that served a request (docs/schema.md), so that two runs
-- of one model at different quantizations (Q4_K against F16) can be set side
-- by side. Applied on top of version 8 in one transaction; the agent sets
-- user_version.
-- The serving process's mapped GGUF file, read once per process: the types
-- of its matrices (tensors of two or more dimensions) by the parameters they
-- hold, most first, joined by '+' ('Q4_K', 'F16', 'Q4_K+Q6_K' for a Q4_K_M
-- file): abi/kpi_ggml_types.h, the names kpi-infer's start-up line and its
-- kpi_infer_model_info{weight_type} use. NULL: no GGUF file mapped (a server
-- whose model the agent cannot see) or a row older than version 9;
-- exchanges_out rows (a process's outbound calls) leave it NULL.

ALTER TABLE requests ADD COLUMN weight_type TEXT;
ALTER TABLE exchanges_out ADD COLUMN weight_type TEXT;
