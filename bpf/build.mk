# bpf/build.mk - the agent's second and third BPF objects: the GPU side (bpf/kpi_cupti.bpf.c ->
# kpi_cupti.skel.h) used by agent/gpu.c and agent/cost.c (its step__seqs program), and the
# llama.cpp side (bpf/kpi_llama.bpf.c); the generic .bpf.o and .skel.h rules are in agent/build.mk.

$(BUILD)/bpf/kpi_cupti.bpf.o: bpf/kpi_gpu_event.h abi/kpi_cupti_abi.h abi/kpi_step_seq.h
$(OBJ)/agent/gpu.o $(OBJ)/agent/cost.o: $(BUILD)/include/kpi_cupti.skel.h
.SECONDARY: $(BUILD)/bpf/kpi_cupti.bpf.o

# The llama.cpp side (bpf/kpi_llama.bpf.c -> kpi_llama.skel.h), used by agent/llama.c.
$(BUILD)/bpf/kpi_llama.bpf.o: bpf/kpi_llama_event.h
$(OBJ)/agent/llama.o: $(BUILD)/include/kpi_llama.skel.h
.SECONDARY: $(BUILD)/bpf/kpi_llama.bpf.o
