# kiln — one plain Makefile.
#   make            library (build/libkiln.a, build/libkiln.so), examples, tests
#   make test       install missing packages, build, run the test suite (see scripts/test.sh)
#   make demo       install missing packages, build the quickstart example, run it
#   make bench      install missing packages, build, run the benchmarks (bench/run.sh)
#   make fuzz FUZZ_SECONDS=N   libFuzzer on every file parser, N seconds each (tests/fuzz/)
#   make install PREFIX=/usr/local   headers, libkiln.a, libkiln.so.$(VERSION) with its links,
#                   kiln.pc and kiln-static.pc (README: using kiln from your own program),
#                   and bin/kiln-serve (examples/serve) where serve is built
#   make V=1        print each command in full (default: one short line per file, "  CC  core/ctx.o")
#   CC=clang make   the same with clang
#   make BLAS=0     no OpenBLAS: every matmul runs kiln's own GEMM
#   make ZLIB=0     no zlib: the IDX loader reads only uncompressed files
#   make VULKAN=0   no Vulkan backend (default: built when the Vulkan loader,
#                   glslc and spirv-val are installed; VULKAN=1 insists on it)
#   make CUDA=1     the CUDA backend too (backends/cuda/, nvcc and cuBLAS from
#                   CUDA_HOME, default /usr/local/cuda; off by default)
#   make CC=aarch64-linux-gnu-gcc BLAS=0 ZLIB=0 VULKAN=0 BUILD=build-arm64   ARM64 cross build
#   make SANITIZE=address,undefined   ASan+UBSan(+LSan) build: every error fails
#                   (-fno-sanitize-recover); use its own BUILD= directory
#   make MPI=1      also libkiln_dist.a (data-parallel training over Open MPI, include/kiln_dist.h),
#                   in a BUILD of its own (gpt and fashion compile differently),
#                   its tests (tests/dist/, run under mpirun by scripts/test_dist.sh), and
#                   examples/gpt and examples/fashion able to train under mpirun -np N

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
KILN_CFLAGS = -std=c11 -D_GNU_SOURCE -fno-math-errno -Wall -Wextra -Werror -fPIC -fopenmp-simd -Iinclude -Icore -MMD -MP
# Loops start on a 32-byte boundary: a short hot loop then never straddles
# a cache line, wherever the link places its function (GEMM's packing loop
# straddling one cost the CNN training step 4-5% when libkiln.a became one
# object and its functions moved).
KILN_CFLAGS += -falign-loops=32
BLAS    ?= 1
ZLIB    ?= 1
LIBS    = -lm -lpthread
LDFLAGS ?=
ifeq ($(BLAS),1)
KILN_CFLAGS += -DKILN_BLAS
# OpenBLAS's single-threaded build (libopenblas0-serial): kiln calls BLAS
# from one thread and runs its own threads around it; the pthread build
# starts threads when it loads, which spin beside kiln's and, under an
# address-space limit, loop forever on their 128 MiB buffers (the process
# then hangs in exit, joining them). An rpath (DT_RPATH, which also serves
# liblapacke's liblapack.so.3) picks it over the system's choice.
BLAS_DIR ?= /usr/lib/$(shell $(CC) -print-multiarch 2>/dev/null)/openblas-serial
LIBS := -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -Wl,--disable-new-dtags -lopenblas $(LIBS)
# GaLore's SVD (sgesdd) through LAPACKE: Debian's OpenBLAS ships LAPACK's
# Fortran symbols but not the LAPACKE C interface, which liblapacke adds
LIBS := -llapacke $(LIBS)
endif
# sanitizers on compile and link; UBSan stops at its first report so a test fails
ifneq ($(SANITIZE),)
SAN_FLAGS = -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
KILN_CFLAGS += $(SAN_FLAGS)
LDFLAGS += $(SAN_FLAGS)
endif
ifeq ($(ZLIB),1)
KILN_CFLAGS += -DKILN_ZLIB
LIBS := -lz $(LIBS)
endif

# Vulkan: GLSL compute shaders in backends/vulkan/shaders/ are compiled by
# glslc, checked by spirv-val and embedded as 32-bit words (vk_embed.sh).
VK_FOUND := $(shell command -v glslc >/dev/null 2>&1 && command -v spirv-val >/dev/null 2>&1 && \
              pkg-config --exists vulkan 2>/dev/null && echo 1 || echo 0)
ifeq ($(VULKAN),)
VULKAN := $(VK_FOUND)
endif
ifeq ($(VULKAN),1)
ifeq ($(VK_FOUND),0)
$(error VULKAN=1 needs the Vulkan loader, glslc and spirv-val: run scripts/deps.sh build)
endif
KILN_CFLAGS += -DKILN_VULKAN
LIBS := -lvulkan $(LIBS)
endif

# CUDA: backends/cuda/*.c are host code built by $(CC) against the CUDA
# runtime and cuBLAS headers; backends/cuda/*.cu are the kernels, built by
# nvcc for sm_80 and sm_90 (A100, H100) plus compute_90 PTX that newer
# GPUs compile on load. Warnings are errors on both sides. -fmad=false: no
# multiply-add is fused that the CPU's kernels round twice.
CUDA ?= 0
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCC_FLAGS = -std=c++17 -O2 -fmad=false $(CUDA_ARCH) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fPIC -MMD -MP
ifeq ($(CUDA),1)
ifeq ($(wildcard $(NVCC)),)
$(error CUDA=1 needs nvcc at $(NVCC): set CUDA_HOME)
endif
KILN_CFLAGS += -DKILN_CUDA
LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++ $(LIBS)
endif

# SIMD variants live in files named for the level that selects them at run
# time; each suffix has one set of flags here and one test in
# backends/cpu/cpu_features.h (kiln__cpu_<suffix>), and no file raises a
# function above its level (scripts/isa_check.sh reads the objects: the
# compiler may use any instruction its flags allow, e.g. AVX-VNNI's VEX
# vpdpbusd where -mavxvnni is given, which Zen 4 lacks). Other files are
# built for the architecture's baseline. On another architecture they
# compile empty.
ARCH := $(shell $(CC) -dumpmachine 2>/dev/null)
ifneq ($(findstring x86_64,$(ARCH)),)
SIMD_AVX2       = -mavx2 -mfma -mf16c
SIMD_AVXVNNI    = $(SIMD_AVX2) -mavxvnni
SIMD_AVX512     = $(SIMD_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512dq
SIMD_AVX512VNNI = $(SIMD_AVX512) -mavx512vnni
SIMD_VBMI       = $(SIMD_AVX512VNNI) -mavx512vbmi -mgfni
SIMD_AVX512BF16 = $(SIMD_AVX512) -mavx512bf16
SIMD_AMX        = $(SIMD_AVX512BF16) -mamx-tile -mamx-bf16 -mamx-int8
endif
ifneq ($(findstring aarch64,$(ARCH)),)
SIMD_NEONDOT    = -march=armv8.2-a+dotprod
endif
$(BUILD)/obj/%_avx2.o: SIMD_FLAGS = $(SIMD_AVX2)
$(BUILD)/obj/%_avxvnni.o: SIMD_FLAGS = $(SIMD_AVXVNNI)
$(BUILD)/obj/%_avx512.o: SIMD_FLAGS = $(SIMD_AVX512)
$(BUILD)/obj/%_avx512vnni.o: SIMD_FLAGS = $(SIMD_AVX512VNNI)
$(BUILD)/obj/%_vbmi.o: SIMD_FLAGS = $(SIMD_VBMI)
$(BUILD)/obj/%_avx512bf16.o: SIMD_FLAGS = $(SIMD_AVX512BF16)
$(BUILD)/obj/%_amx.o: SIMD_FLAGS = $(SIMD_AMX)
$(BUILD)/obj/%_neondot.o: SIMD_FLAGS = $(SIMD_NEONDOT)

LIB_SRC  = $(wildcard core/*.c ops/*.c backends/cpu/*.c optim/*.c quant/*.c)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
ifeq ($(VULKAN),1)
VK_SRC   = $(wildcard backends/vulkan/*.c)
VK_COMP  = $(wildcard backends/vulkan/shaders/*.comp)
VK_VARIANTS = backends/vulkan/shaders/variants.txt
VK_NAMES = $(VK_COMP:backends/vulkan/shaders/%.comp=%) $(shell awk '!/^\#/ && NF { print $$1 }' $(VK_VARIANTS))
VK_SPV   = $(VK_NAMES:%=$(BUILD)/vulkan/%.spv)
LIB_OBJ += $(VK_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/vulkan/shaders.o
endif
ifeq ($(CUDA),1)
CU_SRC   = $(wildcard backends/cuda/*.c)
CU_KERN  = $(wildcard backends/cuda/*.cu)
LIB_OBJ += $(CU_SRC:%.c=$(BUILD)/obj/%.o) $(CU_KERN:%.cu=$(BUILD)/obj/%.o)
$(CU_SRC:%.c=$(BUILD)/obj/%.o): KILN_CFLAGS += -I$(CUDA_HOME)/include
endif
# models/ (model definitions, data sets) use only the public API: no -Icore
MODELS_SRC = $(wildcard models/*.c)
MODELS_OBJ = $(MODELS_SRC:%.c=$(BUILD)/obj/%.o)
$(MODELS_OBJ): KILN_CFLAGS := $(filter-out -Icore,$(KILN_CFLAGS)) -Imodels
# tests/fuzz/fuzz_*.c: the fuzz targets, whose crash inputs the suite replays
TEST_SRC = $(wildcard tests/*.c tests/fuzz/fuzz_*.c)
ifneq ($(VULKAN),1)
# tests of device backends need one built in
TEST_SRC := $(filter-out tests/test_vk_%,$(TEST_SRC))
ifneq ($(CUDA),1)
TEST_SRC := $(filter-out tests/test_backend_%,$(TEST_SRC))
endif
endif
TEST_OBJ = $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
# examples/common/ is what the examples share (arguments, progress, plots, optimizers by name)
EXAMPLES = $(filter-out common,$(notdir $(wildcard examples/*)))
COMMON_OBJ = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard examples/common/*.c))
# examples/serve (the OpenAI-compatible server) links libmicrohttpd and jansson and
# embeds its page with xxd: built where those are installed for $(CC)'s
# architecture (scripts/deps.sh serve), else left out, which make says
SERVE_ARCH  := $(shell $(CC) -print-multiarch 2>/dev/null)
SERVE_FOUND := $(shell [ -n "$(SERVE_ARCH)" ] && [ -e /usr/lib/$(SERVE_ARCH)/libmicrohttpd.so ] && \
                 [ -e /usr/lib/$(SERVE_ARCH)/libjansson.so ] && command -v xxd >/dev/null 2>&1 && echo 1 || echo 0)
ifneq ($(SERVE_FOUND),1)
EXAMPLES := $(filter-out serve,$(EXAMPLES))
$(info make: examples/serve left out: no libmicrohttpd-dev, libjansson-dev or xxd for $(CC) (scripts/deps.sh serve))
endif
EXAMPLE_BINS = $(EXAMPLES:%=$(BUILD)/examples/%)

# Quiet build lines as Linux's kbuild: "  CC      core/ctx.o" (the target,
# without $(BUILD)/obj/); make V=1 prints the commands themselves.
# Use: $(Q)$(call quiet,CC)command... (make -s prints neither)
V ?= 0
ifeq ($(V),1)
Q =
quiet =
else ifneq ($(findstring s,$(firstword -$(MAKEFLAGS))),)
Q = @
quiet =
else
Q = @
quiet = printf '  %-7s %s\n' '$(1)' '$(patsubst $(BUILD)/%,%,$(patsubst $(BUILD)/obj/%,%,$@))';
endif

.PHONY: all lib test demo install clean deps
all: lib $(EXAMPLE_BINS) $(BUILD)/tests/kiln_tests

# libkiln.so.$(VERSION) holds the SONAME libkiln.so.$(SOMAJOR), what a
# program linked against it asks the loader for; libkiln.so.$(SOMAJOR) and
# libkiln.so (what -lkiln finds) are links to it, as Debian installs them.
VERSION := $(shell sed -n 's/^\#define KILN_VERSION "\(.*\)"/\1/p' include/kiln_core.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))
SOLIB   = libkiln.so.$(VERSION)
lib: $(BUILD)/libkiln.a $(BUILD)/libkiln.so

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,CC)$(CC) $(KILN_CFLAGS) $(SIMD_FLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,NVCC)$(NVCC) $(NVCC_FLAGS) -Ibackends/cuda -c $< -o $@
# nvcc writes no dependency files: every kernel file rebuilds when a header it may include changes
$(CU_KERN:%.cu=$(BUILD)/obj/%.o): $(wildcard backends/cuda/*.cuh) backends/cuda/cu_kernels.h

$(BUILD)/vulkan/%.spv: backends/vulkan/shaders/%.comp $(wildcard backends/vulkan/shaders/*.glsl)
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,GLSLC)glslc -O --target-env=vulkan1.2 -Ibackends/vulkan/shaders $< -o $@.tmp
	$(Q)spirv-val --target-env vulkan1.2 $@.tmp
	@mv $@.tmp $@

# kernels listed in variants.txt: a shared body with other #defines
# (kept after the build, to read what was compiled)
.PRECIOUS: $(BUILD)/vulkan/gen/%.comp
$(BUILD)/vulkan/gen/%.comp: $(VK_VARIANTS) scripts/vk_variant.sh
	@mkdir -p $(dir $@)
	@scripts/vk_variant.sh $(VK_VARIANTS) $* $@

$(BUILD)/vulkan/%.spv: $(BUILD)/vulkan/gen/%.comp $(wildcard backends/vulkan/shaders/*.glsl)
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,GLSLC)glslc -O --target-env=vulkan1.2 -Ibackends/vulkan/shaders $< -o $@.tmp
	$(Q)spirv-val --target-env vulkan1.2 $@.tmp
	@mv $@.tmp $@

$(BUILD)/vulkan/shaders.c: $(VK_SPV) scripts/vk_embed.sh
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,EMBED)scripts/vk_embed.sh $@ $(VK_SPV)

$(BUILD)/vulkan/shaders.o: $(BUILD)/vulkan/shaders.c
	$(Q)$(call quiet,CC)$(CC) $(KILN_CFLAGS) -Ibackends/vulkan $(CFLAGS) -c $< -o $@

# libkiln.a holds one object, every library object linked into one (ld -r),
# so that a program linking it gets all of them, as from libkiln.so: each
# backend registers itself with core from a constructor in its own file
# (core names none of them), and a linker takes from an archive only the
# members a program references, so a constructor alone in its member would
# be left out and its backend missing. libkiln.members lists the objects
# (scripts/isa_check.sh checks each at the level its name gives).
$(BUILD)/libkiln.o: $(LIB_OBJ)
	$(Q)$(call quiet,LD)$(CC) -r -nostdlib -Wl,--build-id=none -o $@ $^
	@printf '%s\n' $(patsubst $(BUILD)/%,%,$^) >$(BUILD)/libkiln.members

$(BUILD)/libkiln.a: $(BUILD)/libkiln.o
	@rm -f $@
	$(Q)$(call quiet,AR)ar rcs $@ $^

$(BUILD)/libkiln_models.a: $(MODELS_OBJ)
	@rm -f $@
	$(Q)$(call quiet,AR)ar rcs $@ $^

$(BUILD)/$(SOLIB): $(LIB_OBJ)
	$(Q)$(call quiet,LD)$(CC) -shared -Wl,-soname,libkiln.so.$(SOMAJOR) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/libkiln.so: $(BUILD)/$(SOLIB)
	@ln -sf $(SOLIB) $(BUILD)/libkiln.so.$(SOMAJOR)
	@ln -sf $(SOLIB) $@

$(TEST_OBJ): KILN_CFLAGS += -Imodels -Iexamples/common
$(BUILD)/tests/kiln_tests: $(TEST_OBJ) $(COMMON_OBJ) $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,LD)$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(COMMON_OBJ) $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a $(LIBS)

# MPI=1: dist/ compiled with the flags mpicc would give (mpicc --showme), so
# that nothing else needs MPI; gpt and fashion gain data-parallel training.
MPI ?= 0
DIST_LINK =
ifeq ($(MPI),1)
MPICC ?= mpicc
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_LIBS := $(shell $(MPICC) --showme:link 2>/dev/null)
ifeq ($(MPI_LIBS),)
$(error MPI=1 needs Open MPI's mpicc: run scripts/deps.sh mpi)
endif
DIST_SRC = $(wildcard dist/*.c)
DIST_OBJ = $(DIST_SRC:%.c=$(BUILD)/obj/%.o)
DIST_TEST_OBJ = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/dist/*.c))
$(DIST_OBJ): KILN_CFLAGS := $(filter-out -Icore,$(KILN_CFLAGS)) $(MPI_CFLAGS)
$(DIST_TEST_OBJ): KILN_CFLAGS := $(filter-out -Icore,$(KILN_CFLAGS)) -Imodels -Iexamples/common $(MPI_CFLAGS)
$(BUILD)/obj/examples/gpt/%.o $(BUILD)/obj/examples/fashion/%.o: KILN_CFLAGS += -DKILN_MPI $(MPI_CFLAGS)
DIST_BENCH_OBJ = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard bench/dist/*.c))
$(DIST_BENCH_OBJ): KILN_CFLAGS := $(filter-out -Icore,$(KILN_CFLAGS)) -Imodels -Iexamples/common $(MPI_CFLAGS)
DIST_LINK = $(BUILD)/libkiln_dist.a
all: $(BUILD)/libkiln_dist.a $(BUILD)/tests/kiln_dist_tests $(BUILD)/bench/kiln_dist_bench
bench: $(BUILD)/bench/kiln_dist_bench

$(BUILD)/bench/kiln_dist_bench: $(DIST_BENCH_OBJ) $(COMMON_OBJ) $(BUILD)/libkiln_dist.a $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,LD)$(CC) $(LDFLAGS) -o $@ $(DIST_BENCH_OBJ) $(COMMON_OBJ) $(BUILD)/libkiln_dist.a $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a $(LIBS) $(MPI_LIBS)

$(BUILD)/libkiln_dist.a: $(DIST_OBJ)
	@rm -f $@
	$(Q)$(call quiet,AR)ar rcs $@ $^

# make MPI=1 install: the dist library and header beside kiln's
INSTALL_DIST = $(BUILD)/libkiln_dist.a
install: $(BUILD)/libkiln_dist.a

$(BUILD)/tests/kiln_dist_tests: $(DIST_TEST_OBJ) $(COMMON_OBJ) $(BUILD)/libkiln_dist.a $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,LD)$(CC) $(LDFLAGS) -o $@ $(DIST_TEST_OBJ) $(COMMON_OBJ) $(BUILD)/libkiln_dist.a $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a $(LIBS) $(MPI_LIBS)
endif

# Each examples/<name>/ holds one program's .c files.
$(BUILD)/obj/examples/%.o: KILN_CFLAGS += -Imodels -Iexamples/common
define example_rule
$(BUILD)/examples/$(1): $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard examples/$(1)/*.c)) $(COMMON_OBJ) $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a $(DIST_LINK)
	@mkdir -p $$(dir $$@)
	$$(Q)$$(call quiet,LD)$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(DIST_LINK) $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a $$(LIBS) $$(if $(DIST_LINK),$$(MPI_LIBS))
endef
$(foreach e,$(EXAMPLES),$(eval $(call example_rule,$(e))))
# finetune reads chat JSONL with Jansson (libjansson-dev)
$(BUILD)/examples/finetune: LIBS += -ljansson

# serve's page, examples/serve/page.html, as a C array (xxd -i), and the
# fuzz test of its request parser, always under ASan and UBSan
# (tests/serve/fuzz_api.c, run by scripts/test_serve.sh)
ifeq ($(SERVE_FOUND),1)
$(BUILD)/gen/serve_page.c: examples/serve/page.html
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,XXD){ echo '/* examples/serve/page.html, made by the Makefile with xxd -i */'; \
	  echo 'const unsigned char serve_page[] = {'; xxd -i <$<; echo '};'; \
	  echo 'const unsigned int serve_page_len = sizeof serve_page;'; } >$@.tmp && mv $@.tmp $@
$(BUILD)/obj/gen/serve_page.o: $(BUILD)/gen/serve_page.c
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,CC)$(CC) $(KILN_CFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/examples/serve: $(BUILD)/obj/gen/serve_page.o
$(BUILD)/examples/serve: LIBS += -lmicrohttpd -ljansson
$(BUILD)/tests/serve_fuzz: tests/serve/fuzz_api.c examples/serve/api.c examples/serve/api.h
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,LD)$(CC) $(filter-out -MMD -MP,$(KILN_CFLAGS)) -Iexamples/serve $(CFLAGS) \
	  -fsanitize=address,undefined -fno-sanitize-recover=all tests/serve/fuzz_api.c examples/serve/api.c -o $@ -ljansson
all: $(BUILD)/tests/serve_fuzz
endif

deps:
	@scripts/deps.sh build data

# The suite runs in the default build, with KILN_SIMD=scalar, in a BLAS=0
# build and, cross-compiled, for ARM64 under qemu (scripts/test.sh).
# With SANITIZE=... only the sanitized stage runs, in $(BUILD)/sanitize.
test:
	@scripts/deps.sh build data cross mpi test
ifeq ($(SANITIZE),)
	@$(MAKE) --no-print-directory all
	@MAKE="$(MAKE)" SANITIZE= scripts/test.sh $(BUILD) $(TESTS)
else
	@MAKE="$(MAKE)" SANITIZE="$(SANITIZE)" scripts/test.sh $(BUILD) $(TESTS)
endif

# the quickstart: a CNN on Fashion-MNIST with AdamW, saved and reloaded;
# only the library and that example are built
demo: deps
	@echo "demo: building $(BUILD)/examples/quickstart and the library it links (a few minutes on 2 cores the first time)"
	@$(MAKE) --no-print-directory $(BUILD)/examples/quickstart
	@echo "demo: running $(BUILD)/examples/quickstart --save $(BUILD)/quickstart-cnn.safetensors"
	@$(BUILD)/examples/quickstart --save $(BUILD)/quickstart-cnn.safetensors

# bench/*.c make one program, linked like the tests; it may call the CPU
# backend's entry points (gemm.h), hence -Ibackends/cpu, and the models. bench/run.sh runs
# bench/torch_ref.py first (when PyTorch is importable) for the ratios.
BENCH_SRC = $(wildcard bench/*.c)
BENCH_OBJ = $(BENCH_SRC:%.c=$(BUILD)/obj/%.o)
$(BENCH_OBJ): KILN_CFLAGS += -Ibackends/cpu -Imodels
# bench/gemm.c's reference at 2 threads: OpenBLAS's threaded library, dlopen'ed
$(BENCH_OBJ): KILN_CFLAGS += -DBENCH_OPENBLAS_PTHREAD='"$(dir $(BLAS_DIR))openblas-pthread/libopenblas.so.0"'

$(BUILD)/bench/kiln_bench: $(BENCH_OBJ) $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(Q)$(call quiet,LD)$(CC) $(LDFLAGS) -o $@ $(BENCH_OBJ) $(BUILD)/libkiln_models.a $(BUILD)/libkiln.a $(LIBS)

.PHONY: bench
bench:
	@scripts/deps.sh build serve
	@$(MAKE) --no-print-directory $(BUILD)/bench/kiln_bench $(BUILD)/examples/serve $(BUILD)/examples/generate
	bench/run.sh $(BUILD)/bench/kiln_bench $(BENCH_ARGS)

# libFuzzer targets (tests/fuzz/fuzz_*.c), one per file parser: the
# library built again with clang, coverage, ASan and UBSan in
# $(BUILD)/fuzz, each target run FUZZ_SECONDS on a corpus seeded with
# valid files (make_seeds.c); tests/fuzz/run.sh prints executions and crashes.
# (-Wno-pass-failed: sanitizers can stop "omp simd" loops from vectorizing.)
FUZZ_SECONDS ?= 60
FUZZ_CC    ?= clang-14
FUZZ_BUILD  = $(BUILD)/fuzz
FUZZ_SAN    = -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_NAMES  = $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_FLAGS  = -std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -fopenmp-simd -DKILN_ZLIB \
              -Iinclude -Icore -Imodels $(FUZZ_SAN)
FUZZ_LIBS   = $(FUZZ_BUILD)/libkiln_models.a $(FUZZ_BUILD)/libkiln.a -lz -lm -lpthread

.PHONY: fuzz fuzz-build
fuzz-build:
	@scripts/deps.sh build
	@$(MAKE) --no-print-directory CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) VULKAN=0 BLAS=0 ZLIB=1 \
	  CFLAGS="-O1 -g -fno-omit-frame-pointer -Wno-pass-failed -fsanitize=fuzzer-no-link $(FUZZ_SAN)" \
	  $(FUZZ_BUILD)/libkiln.a $(FUZZ_BUILD)/libkiln_models.a
	@$(MAKE) --no-print-directory $(FUZZ_NAMES:%=$(FUZZ_BUILD)/bin/fuzz_%) $(FUZZ_BUILD)/bin/make_seeds

$(FUZZ_BUILD)/bin/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(FUZZ_BUILD)/libkiln.a $(FUZZ_BUILD)/libkiln_models.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -DKILN_FUZZ_MAIN -fsanitize=fuzzer $< -o $@ $(FUZZ_LIBS)

# the index target writes into fuzz_llama_config.c's directory: that file
# linked in without its entry point
$(FUZZ_BUILD)/obj/fuzz_llama_config_dir.o: tests/fuzz/fuzz_llama_config.c tests/fuzz/fuzz_util.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_BUILD)/bin/fuzz_llama_index: tests/fuzz/fuzz_llama_index.c $(FUZZ_BUILD)/obj/fuzz_llama_config_dir.o \
                                    tests/fuzz/fuzz_util.h $(FUZZ_BUILD)/libkiln.a $(FUZZ_BUILD)/libkiln_models.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -DKILN_FUZZ_MAIN -fsanitize=fuzzer $< $(FUZZ_BUILD)/obj/fuzz_llama_config_dir.o -o $@ $(FUZZ_LIBS)

$(FUZZ_BUILD)/bin/make_seeds: tests/fuzz/make_seeds.c tests/fuzz/fuzz_checkpoint.c tests/fuzz/fuzz_llama_config.c \
                              tests/fuzz/fuzz_util.h $(FUZZ_BUILD)/libkiln.a $(FUZZ_BUILD)/libkiln_models.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(filter %.c,$^) -o $@ $(FUZZ_LIBS)

fuzz: fuzz-build
	@tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_NAMES)

# kiln.h and the parts it includes; the .pc files are written at install
# time so that they name this PREFIX. kiln.pc links the shared library,
# kiln-static.pc libkiln.a and what it needs. -lm is in both: a program
# using kiln's float API calls libm itself (the README's example calls
# sinf), and libkiln.so's own libm does not serve it.
PUBLIC_HEADERS := include/kiln.h $(addprefix include/kiln_,core.h ops.h optim.h files.h tokenizer.h gptq.h)
PC_LIBS = -L$${libdir} -lkiln -lm
ifeq ($(BLAS),1)
# libkiln.so finds the serial OpenBLAS by its rpath at run time; the
# linker, which checks what libkiln's libraries need in turn, must look
# there too, or it takes the system's libblas.so.3 of another OpenBLAS
PC_LIBS += -Wl,-rpath-link,$(BLAS_DIR)
endif
PC_HEAD = 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
          'Description: tensors and reverse-mode autodiff in C' 'Version: $(VERSION)' 'Cflags: -I$${includedir}'
# the server, where it is built (libmicrohttpd and jansson found), as kiln-serve
INSTALL_SERVE = $(filter $(BUILD)/examples/serve,$(EXAMPLE_BINS))
install: lib $(INSTALL_SERVE)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(PUBLIC_HEADERS) $(if $(INSTALL_DIST),include/kiln_dist.h) $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libkiln.a $(BUILD)/$(SOLIB) $(INSTALL_DIST) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SOLIB) $(DESTDIR)$(PREFIX)/lib/libkiln.so.$(SOMAJOR)
	ln -sf $(SOLIB) $(DESTDIR)$(PREFIX)/lib/libkiln.so
	@printf '%s\n' $(PC_HEAD) 'Name: kiln' 'Libs: $(PC_LIBS)' 'Libs.private: $(LIBS)' \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kiln.pc
	@printf '%s\n' $(PC_HEAD) 'Name: kiln-static' 'Libs: $${libdir}/libkiln.a $(LIBS)' \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kiln-static.pc
	$(if $(INSTALL_SERVE),install -d $(DESTDIR)$(PREFIX)/bin && \
	  install -m 755 $(INSTALL_SERVE) $(DESTDIR)$(PREFIX)/bin/kiln-serve)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
