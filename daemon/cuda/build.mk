# daemon/cuda/build.mk - the CUDA backend of kpi-infer (--backend cuda): kernels
# (nvcc, sm_80 + sm_90 + PTX) and the host side (gcc). Built only where nvcc is
# found; elsewhere kpi-infer's cuda_backend_ops stays NULL and --backend cuda
# says the build has no CUDA.

ifeq ($(HAVE_CUDA),1)
# sm_80 (A100), sm_90 (H100/H200) as SASS, and compute_90 PTX for newer GPUs.
CUDA_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo
CUDA_OBJS := $(OBJ)/daemon/cuda/kernels.o $(OBJ)/daemon/cuda/cuda_backend.o

$(OBJ)/daemon/cuda/%.o: daemon/cuda/%.cu daemon/cuda/kernels.h | deps
	$(call msg,NVCC,$<)
	@mkdir -p $(@D)
	$(Q)$(NVCC) $(NVCCFLAGS) $(CUDA_GENCODE) -Xcompiler -fPIC -I. -c $< -o $@

$(OBJ)/daemon/cuda/cuda_backend.o $(OBJ)/daemon/cuda/attn_check.o: CFLAGS += -isystem $(CUDA_HOME)/include

# cudart static (no libcudart.so needed at run time; the driver is dlopen'd by
# it), cuBLAS dlopen'd by cuda_backend.c at --backend cuda only.
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++ -pthread

DAEMON_CUDA_OBJS := $(CUDA_OBJS)
# The step slot libkpi_cupti.so reads (abi/kpi_step.h) is defined by the engine
# (daemon/engine/engine.c) and exported by daemon/build.mk's link of kpi-infer,
# with or without this backend: nothing to add here.
DAEMON_CUDA_LDLIBS := $(CUDA_LDLIBS)
# daemon/build.mk expanded kpi-infer's prerequisites before this fragment was read.
ifneq ($(wildcard daemon/server/main.c),)
$(BUILD)/kpi-infer: $(DAEMON_CUDA_OBJS)
endif

# Paged attention against a naive kernel on random shapes (GPU only; run by
# tests/test_cuda.py, which skips without a GPU).
PROGRAMS += $(BUILD)/cuda-attn-check
$(BUILD)/cuda-attn-check: $(OBJ)/daemon/cuda/attn_check.o $(OBJ)/daemon/cuda/kernels.o
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) -lm
endif

# make bench-gpu: decode-attention bandwidth (JSON in build/bench/gpu_attention.json);
# QUICK=1 for the 3 x 3 subset. Needs a GPU; says so and stops elsewhere.
.PHONY: bench-gpu
ifeq ($(HAVE_CUDA),1)
bench-gpu: $(BUILD)/cuda-attn-check
	@mkdir -p $(BUILD)/bench
	$(Q)$(BUILD)/cuda-attn-check --bench $(BUILD)/bench/gpu_attention.json $(if $(QUICK),--quick) \
		| tee $(BUILD)/bench/gpu_attention.md
else
bench-gpu:
	@echo "make bench-gpu: no nvcc under CUDA_HOME='$(CUDA_HOME)': nothing to run" >&2; exit 1
endif

# The host-side planning of the backend (header-only): tested everywhere.
UNIT_TESTS += $(BUILD)/tests/test_cuda_plan
$(BUILD)/tests/test_cuda_plan: $(OBJ)/tests/unit/test_cuda_plan.o
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_COMMON)
