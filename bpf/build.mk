# bpf/build.mk - the BPF objects beside bpf/kpi.bpf.c, each loaded by
# agent/sources/loader.c: the CUPTI side (kpi_cupti.bpf.c, agent/sources/gpu.c:
# GPU records and every target's step__seqs), the TLS side (kpi_tls.bpf.c,
# agent/sources/tls.c) and the llama.cpp side (kpi_llama.bpf.c,
# agent/sources/llama.c); the generic .bpf.o and .skel.h rules are in agent/build.mk.

$(BUILD)/bpf/kpi_cupti.bpf.o: bpf/kpi_gpu_event.h abi/kpi_cupti_abi.h abi/kpi_step_seq.h
$(OBJ)/agent/sources/gpu.o: $(BUILD)/include/kpi_cupti.skel.h
.SECONDARY: $(BUILD)/bpf/kpi_cupti.bpf.o

# The TLS BPF object (bpf/kpi_tls.bpf.c -> kpi_tls.skel.h): uprobes on libssl,
# loaded by agent/sources/tls.c on the main object's maps.
$(OBJ)/agent/sources/tls.o: $(BUILD)/include/kpi_tls.skel.h
.SECONDARY: $(BUILD)/bpf/kpi_tls.bpf.o
$(BUILD)/bpf/kpi.bpf.o $(BUILD)/bpf/kpi_tls.bpf.o: bpf/kpi_maps.bpf.h
# The llama.cpp side (bpf/kpi_llama.bpf.c -> kpi_llama.skel.h), used by agent/sources/llama.c.
$(BUILD)/bpf/kpi_llama.bpf.o: bpf/kpi_llama_event.h
$(OBJ)/agent/sources/llama.o: $(BUILD)/include/kpi_llama.skel.h
.SECONDARY: $(BUILD)/bpf/kpi_llama.bpf.o
