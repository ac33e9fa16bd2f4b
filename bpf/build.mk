# bpf/build.mk - the BPF objects beside bpf/kpi.bpf.c: the GPU side (kpi_cupti.bpf.c,
# used by agent/gpu.c and agent/cost.c), the TLS side (kpi_tls.bpf.c, agent/tls.c) and the
# llama.cpp side (kpi_llama.bpf.c, agent/llama.c); the generic .bpf.o and .skel.h rules
# are in agent/build.mk.

$(BUILD)/bpf/kpi_cupti.bpf.o: bpf/kpi_gpu_event.h abi/kpi_cupti_abi.h abi/kpi_step_seq.h
$(OBJ)/agent/gpu.o $(OBJ)/agent/cost.o: $(BUILD)/include/kpi_cupti.skel.h
.SECONDARY: $(BUILD)/bpf/kpi_cupti.bpf.o

# The TLS BPF object (bpf/kpi_tls.bpf.c -> kpi_tls.skel.h): uprobes on libssl,
# loaded by agent/tls.c on the main object's maps.
$(OBJ)/agent/tls.o: $(BUILD)/include/kpi_tls.skel.h
.SECONDARY: $(BUILD)/bpf/kpi_tls.bpf.o
$(BUILD)/bpf/kpi.bpf.o $(BUILD)/bpf/kpi_tls.bpf.o: bpf/kpi_maps.bpf.h
# The llama.cpp side (bpf/kpi_llama.bpf.c -> kpi_llama.skel.h), used by agent/llama.c.
$(BUILD)/bpf/kpi_llama.bpf.o: bpf/kpi_llama_event.h
$(OBJ)/agent/llama.o: $(BUILD)/include/kpi_llama.skel.h
.SECONDARY: $(BUILD)/bpf/kpi_llama.bpf.o
