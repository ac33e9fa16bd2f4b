# tests/lib/build.mk - the real llama.cpp for tests/test_agent_llama.py:
# node-llama-cpp 3 with only its CPU prebuilt binaries (@node-llama-cpp/linux-x64),
# from the npm registry into build/node-llama. Never built from source, never
# fetched at run time: a failed install leaves its reason for the test to skip with.

NODE_LLAMA_VERSION := 3.22.1
NODE_LLAMA_DIR := $(BUILD)/node-llama
NODE_LLAMA_STAMP := $(NODE_LLAMA_DIR)/installed-$(NODE_LLAMA_VERSION)

.PHONY: node-llama
node-llama: $(NODE_LLAMA_STAMP)
test: node-llama

# --omit=optional drops the CUDA / Vulkan / other-platform variants the
# package lists; NODE_LLAMA_CPP_SKIP_DOWNLOAD stops its postinstall from
# building llama.cpp when no prebuilt binary fits.
$(NODE_LLAMA_STAMP): tests/lib/build.mk
	@mkdir -p $(NODE_LLAMA_DIR)
	$(call msg,NPM,node-llama-cpp@$(NODE_LLAMA_VERSION))
	$(Q)rm -f $(NODE_LLAMA_DIR)/install-failed.txt $(NODE_LLAMA_DIR)/installed-*; \
	if NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --prefix $(NODE_LLAMA_DIR) --no-save \
		--no-audit --no-fund --omit=optional --loglevel=error \
		node-llama-cpp@$(NODE_LLAMA_VERSION) @node-llama-cpp/linux-x64@$(NODE_LLAMA_VERSION) \
		> $(NODE_LLAMA_DIR)/npm.log 2>&1; then \
		touch $@; \
	else \
		{ echo "npm install of node-llama-cpp@$(NODE_LLAMA_VERSION) failed:"; \
		  tail -5 $(NODE_LLAMA_DIR)/npm.log; } > $(NODE_LLAMA_DIR)/install-failed.txt; \
		echo "make node-llama: $$(head -c 300 $(NODE_LLAMA_DIR)/install-failed.txt | tr '\n' ' ') (tests/test_agent_llama.py will skip)" >&2; \
	fi

# The LD_PRELOAD shim whose marks around llama_decode time the agent's
# uprobes in tests/test_agent_llama.py (tests/decode_mark.c).
PROGRAMS += $(BUILD)/tests/libdecodemark.so
$(BUILD)/tests/libdecodemark.so: tests/decode_mark.c bpf/kpi_llama_event.h
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(filter-out -MMD -MP,$(CFLAGS)) -fPIC -shared $(LDFLAGS) $< -o $@ -ldl

# The noise floor under the tests that time the agent against a capture:
# when a CPU ran nothing of the guest (tests/noise_probe.c, tests/lib/noisetest.py).
PROGRAMS += $(BUILD)/tests/noise-probe
$(BUILD)/tests/noise-probe: tests/noise_probe.c
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(filter-out -MMD -MP,$(CFLAGS)) $(LDFLAGS) $< -o $@ -pthread

# The Go TLS server of tests/test_agent_tls.py and tests/bench/bench_tls.py
# (tests/lib/sse_server.go: net/http over Go's crypto/tls), built with
# Debian's golang-go twice: with DWARF, and stripped (-s -w: no symbol table,
# the agent finds its functions in .gopclntab).  Go's own cache under build/.
GO_SSE := $(BUILD)/tests/go-sse-server
GO_ENV = GOCACHE=$(abspath $(BUILD))/go-cache GOPATH=$(abspath $(BUILD))/go-path GO111MODULE=off GOFLAGS= GOENV=off
.PHONY: go-servers
go-servers: $(GO_SSE) $(GO_SSE)-stripped
test bench: go-servers
$(GO_SSE): tests/lib/sse_server.go | deps
	$(call msg,GO,$@)
	@mkdir -p $(@D)
	$(Q)$(GO_ENV) go build -o $@ $<
$(GO_SSE)-stripped: tests/lib/sse_server.go | deps
	$(call msg,GO,$@)
	@mkdir -p $(@D)
	$(Q)$(GO_ENV) go build -ldflags='-s -w' -o $@ $<
