# Makefile - builds libkiln_rt, libkiln, bin/kiln, tests, benchmarks and examples.
#   make help     lists the targets
#   make run      the main job (README)     make test    run the whole test suite
#   make SAN=1 test   the same suite under ASan + UBSan (objects under build/san)
#   make TSAN=1 build/tsan/tests/emu_layernorm_test   a ThreadSanitizer build (build/tsan)
#   make setup    install the Debian packages kiln needs (as root), else print the command; and the Python test
#                 packages, PyTorch included (make run too; a plain make installs all but PyTorch)

# The LLVM and Lua flags below are computed when make reads this file. On a fresh machine the
# packages are not there yet, so the first pass only installs them (tools/setup.sh) and then
# runs the same goals again in a new make that sees the installed packages (KILN_SETUP_DONE=1:
# that make does not check again, so a package that failed to install cannot loop).
NO_DEPS_GOALS := help setup clean
GOALS_NEEDING_DEPS := $(filter-out $(NO_DEPS_GOALS),$(or $(MAKECMDGOALS),all))
ifneq ($(KILN_SETUP_DONE),)
DEPS_READY := yes
else ifeq ($(GOALS_NEEDING_DEPS),)
DEPS_READY := yes
else
DEPS_READY := $(shell tools/setup.sh --check >/dev/null 2>&1 && echo yes)
endif
ifneq ($(DEPS_READY),yes)
REMAKE_GOALS := $(or $(MAKECMDGOALS),all)
.PHONY: $(REMAKE_GOALS) deps-then-remake
$(REMAKE_GOALS): deps-then-remake ; @:
deps-then-remake:
	@tools/setup.sh
	@$(MAKE) --no-print-directory KILN_SETUP_DONE=1 $(MAKECMDGOALS)
else

# Build on every core unless -j was given (the README's `make run` / `make test` are one command each).
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

CC          ?= cc
LLVM_CONFIG ?= llvm-config-22
PREFIX      ?= /usr/local
CUDA_HOME   ?= /usr/local/cuda

ifdef TSAN
O        := build/tsan
LIBDIR   := build/tsan/lib
BINDIR   := build/tsan/bin
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
else ifdef SAN
O        := build/san
LIBDIR   := build/san/lib
BINDIR   := build/san/bin
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
O        := build
LIBDIR   := lib
BINDIR   := bin
SANFLAGS :=
endif

WERROR   := $(if $(CI),-Werror,)
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra $(WERROR) -fPIC $(SANFLAGS) -Iinclude -Itemplates -MMD -MP
LDFLAGS  += $(SANFLAGS)
CXX      ?= c++
CXXFLAGS ?= -O2 -g
CXXFLAGS += -Wall -Wextra $(WERROR) -fPIC $(SANFLAGS) -Iinclude -MMD -MP

LLVM_CFLAGS := $(shell $(LLVM_CONFIG) --cflags 2>/dev/null | sed 's/-std=[^ ]*//; s/-W[^ ]*//g; s/-D_GNU_SOURCE//')
LLVM_CXXFLAGS := $(shell $(LLVM_CONFIG) --cxxflags 2>/dev/null | sed 's/-W[^ ]*//g; s/-I/-isystem /g')
LLVM_LIBS   := $(shell $(LLVM_CONFIG) --ldflags 2>/dev/null) $(shell $(LLVM_CONFIG) --libs 2>/dev/null)
LUA_CFLAGS  := $(shell pkg-config --cflags lua5.4 2>/dev/null)
LUA_LIBS    := $(shell pkg-config --libs lua5.4 2>/dev/null)

# How bin/kiln and lib/libkiln.so get LLVM and Lua. By default only the LLVM components kiln uses
# are linked in statically: no libLLVM-22.so to relocate at start (a third of a short process's
# time) and no LLVM package needed where they run. Lua is static in bin/kiln; lib/libkiln.so links
# liblua5.4.so.0 because Debian's liblua5.4.a is not position-independent. LLVM_SHARED=1 links
# libLLVM-22.so and liblua5.4.so instead (for distribution packagers). Tests and benchmarks link the
# shared libLLVM either way: they link in a fraction of the time and emit the same PTX.
LLVM_COMPONENTS := nvptx orcjit x86 passes irreader bitreader
LIB_A       = $(firstword $(wildcard $(addsuffix /lib$(1).a,/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib)))
ifdef LLVM_SHARED
CLI_GEN_LIBS := $(LLVM_LIBS) $(LUA_LIBS) -lstdc++
SO_GEN_LIBS  := $(LLVM_LIBS) $(LUA_LIBS) -lstdc++
else
LLVM_STATIC  := $(shell $(LLVM_CONFIG) --ldflags 2>/dev/null) \
                $(shell $(LLVM_CONFIG) --link-static --libs $(LLVM_COMPONENTS) 2>/dev/null) -lstdc++
STDCXX_A     := $(wildcard $(shell $(CC) -print-file-name=libstdc++.a))
CLI_GEN_LIBS := -Wl,--gc-sections $(subst -lstdc++,$(or $(STDCXX_A),-lstdc++),$(LLVM_STATIC)) \
                $(or $(call LIB_A,lua5.4),$(LUA_LIBS)) $(or $(call LIB_A,zstd),-lzstd) $(or $(call LIB_A,z),-lz)
# A fresh `kiln emit` pays its start before main: libstdc++.so's relocations and symbol look-ups,
# and 52 000 relative relocations of the PIE's vtables and tables (LLVM's). libstdc++ is linked in;
# the binary stays position-independent (a fixed load address would save ~0.5 ms more, but kiln
# parses untrusted PTX, bundles and ELF files, and keeps its address randomized; docs/jit.md).
# The PIE's 52 000 relative relocations packed (DT_RELR, glibc 2.36+, binutils 2.38+): the loader
# reads 9 KB instead of 1.4 MB of relocation records; `kiln --version` 2.4 -> 2.1 ms (docs/jit.md).
# Only where this compiler and linker take it without a word.
RELR_LDFLAGS := $(shell printf 'int main(void){return 0;}' | $(CC) -x c - -Wl,-z,pack-relative-relocs \
                  -o /dev/null 2>&1 | grep -q . || echo -Wl,-z,pack-relative-relocs)
# bin/kiln's hot functions first: the functions a `kiln emit` process runs (tools/kiln.order, written
# by `make kiln-order`) are linked at the start of the text, so a fresh process faults in ~290 fewer
# pages of code (LayerNorm bf16 h4096: 1480 -> 1190 page faults, about 1 ms less CPU; docs/jit.md).
# Needs LLVM's linker from lld-22 (lld 14 packs relocations without glibc's GLIBC_ABI_DT_RELR mark);
# only where this compiler links with it, the order file and the flags above without a word.
LLD_DIR       := $(shell $(LLVM_CONFIG) --bindir 2>/dev/null)
ORDER_FILE    := tools/kiln.order
ORDER_LDFLAGS := -B$(LLD_DIR) -fuse-ld=lld -Wl,--symbol-ordering-file=$(ORDER_FILE) -Wl,--no-warn-symbol-ordering
ORDER_LDFLAGS := $(if $(wildcard $(LLD_DIR)/ld.lld),$(shell printf 'int main(void){return 0;}' | $(CC) -x c - \
                   $(RELR_LDFLAGS) $(ORDER_LDFLAGS) -o /dev/null 2>&1 | grep -q . || echo '$(ORDER_LDFLAGS)'))
CLI_LDFLAGS  := $(if $(STDCXX_A),-static-libgcc) $(RELR_LDFLAGS) $(ORDER_LDFLAGS)
SO_GEN_LIBS  := -Wl,--gc-sections -Wl,--exclude-libs,ALL $(LLVM_STATIC) $(LUA_LIBS) -lzstd -lz
endif

RT_SRCS   := $(wildcard runtime/*.c)
GEN_SRCS  := $(wildcard gen/*.c) $(wildcard emu/*.c)
# float64 references beside their templates: templates/<family>.ref.c exports kiln_ref_<family>,
# templates/lib/*.ref.c holds what several share; the registry lists the first kind (docs/registry.md)
REF_SRCS  := $(sort $(wildcard templates/*.ref.c templates/lib/*.ref.c))
REF_FAMS  := $(patsubst templates/%.ref.c,%,$(sort $(wildcard templates/*.ref.c)))
comma     := ,
CLI_SRCS  := $(wildcard tools/kiln*.c) $(wildcard tools/cmd_*.c)
TEMPLATES := $(sort $(wildcard templates/*.lua templates/lib/*.lua))
TEST_SRCS := $(wildcard tests/*_test.c)
BENCH_SRCS:= $(wildcard bench/*_bench.c)

RT_OBJS   := $(RT_SRCS:%.c=$(O)/%.o)
GEN_OBJS  := $(GEN_SRCS:%.c=$(O)/%.o) $(REF_SRCS:%.c=$(O)/%.o) $(O)/emu/emu_ref_table.o $(O)/gen/templates_embed.o $(patsubst %.cpp,$(O)/%.o,$(wildcard gen/*.cpp))
CLI_OBJS  := $(CLI_SRCS:%.c=$(O)/%.o)
TESTS     := $(TEST_SRCS:tests/%.c=$(O)/tests/%)
BENCHES   := $(BENCH_SRCS:bench/%.c=$(O)/bench/%)

RT_LIBS   := -ldl -lpthread -lm
GEN_LIBS  := $(LLVM_LIBS) $(LUA_LIBS) -lzstd $(RT_LIBS) -lstdc++

KILN      := $(BINDIR)/kiln

.PHONY: all check-deps torch-deps setup run test bench install clean help
all: check-deps $(LIBDIR)/libkiln_rt.a $(LIBDIR)/libkiln_rt.so $(LIBDIR)/libkiln.a \
     $(LIBDIR)/libkiln.so $(KILN) $(TESTS) $(BENCHES) extra

# Installs missing Debian packages when run as root, else names the apt-get command and stops.
check-deps:
	@tools/setup.sh

# PyTorch for kiln.torch's tests (4 GB: installed by make setup and make run, not by every build)
torch-deps:
	@tools/setup.sh --torch

setup:
	@tools/setup.sh --torch

# Rooms add their own targets to `extra` (fake driver, examples, ...).
extra:
.PHONY: extra

# Runtime room: the fake CUDA driver the runtime tests load through KILN_CUDA_DRIVER, and the
# examples (aot_*: libkiln_rt only; jit_*: libkiln too).
FAKE_CUDA := $(O)/tests/libfakecuda.so.1
EXAMPLES  := $(patsubst examples/%.c,$(O)/examples/%,$(wildcard examples/*.c))
FAKE_CUDA_OLD := $(O)/tests/libfakecuda_old.so.1
extra: $(FAKE_CUDA) $(FAKE_CUDA_OLD) $(EXAMPLES)
$(FAKE_CUDA): tests/fake_cuda/fake_cuda.c tests/fake_cuda/fake_cuda.h include/kiln/tensor_map.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS) -lpthread
# the same driver without cuTensorMapEncodeTiled (before CUDA 12.0)
$(FAKE_CUDA_OLD): tests/fake_cuda/fake_cuda.c tests/fake_cuda/fake_cuda.h include/kiln/tensor_map.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DFAKE_CUDA_NO_TENSOR_MAP -shared -fvisibility=hidden $< -o $@ $(LDFLAGS) -lpthread
# runtime_cache_test needs libkiln_rt only (a stand-in generator), so that its ThreadSanitizer build
# (make TSAN=1 build/tsan/tests/runtime_cache_test) does not build the generator.
$(O)/tests/runtime_cache_test: tests/runtime_cache_test.c $(LIBDIR)/libkiln_rt.a tests/check.h $(FAKE_CUDA)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -Iruntime $< -o $@ $(LDFLAGS) $(LIBDIR)/libkiln_rt.a $(RT_LIBS)
$(O)/examples/aot_%: examples/aot_%.c $(LIBDIR)/libkiln_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LIBDIR)/libkiln_rt.a $(RT_LIBS)
$(O)/examples/jit_%: examples/jit_%.c $(LIBDIR)/libkiln.a $(LIBDIR)/libkiln_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(STATIC_LIBS) $(GEN_LIBS)

# Fuzzing: libFuzzer targets for the readers (tests/fuzz/), built with clang-22 under ASan + UBSan
# wherever clang-22 is installed (tools/setup.sh installs it). The suite runs a bounded slice
# (tests/fuzz_test.sh); `make fuzz` runs each target FUZZ_SECONDS (default 120) on a corpus kept
# in build/fuzz/corpus/ with a fresh random seed each run (FUZZ_SEED=N repeats one). Without clang-22
# nothing is built and the test says skipped.
FUZZ_CC      ?= clang-22
HAVE_FUZZ    := $(shell command -v $(FUZZ_CC) >/dev/null 2>&1 && echo yes)
FUZZ_NAMES   := spec ptx bundle meta disk bin
FUZZERS      := $(FUZZ_NAMES:%=build/fuzz/fuzz_%)
FUZZ_CFLAGS  := -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                -fno-omit-frame-pointer -ffunction-sections -fdata-sections -Iinclude -Itemplates -Iruntime -I$(O)/runtime -Igen -Iemu \
                $(LLVM_CFLAGS) $(LUA_CFLAGS)
FUZZ_SRCS_spec   := gen/gen_spec.c emu/emu_half.c templates/attention.ref.c
FUZZ_SRCS_ptx    := gen/gen_lint.c gen/gen_lint_table.c gen/gen_ptx_reader.c gen/gen_target.c
FUZZ_SRCS_bundle :=
FUZZ_SRCS_meta   :=
FUZZ_SRCS_disk   :=
FUZZ_SRCS_bin    := gen/gen_lint_bin.c gen/gen_lint.c gen/gen_lint_table.c gen/gen_ptx_reader.c gen/gen_target.c
# the plain build only: they link lib/libkiln.a and are sanitized anyway
ifeq ($(HAVE_FUZZ)$(O),yesbuild)
extra: $(FUZZERS)
endif
.SECONDEXPANSION:
FUZZ_OBJ := build/fuzz/obj
.PRECIOUS: $(FUZZ_OBJ)/%.o
build/fuzz/obj/%.o: %.c $(wildcard runtime/*.h gen/*.h emu/*.h include/kiln/*.h templates/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
# The instrumented objects come first; lib/libkiln.a only supplies what they reference beyond
# the code under test (the Lua host and the emulator that the parsers' neighbours call).
fuzz_objs = $(patsubst %.c,$(FUZZ_OBJ)/%.o,$(FUZZ_SRCS_$(1)))
build/fuzz/fuzz_%: $(FUZZ_OBJ)/tests/fuzz/fuzz_%.o $$(call fuzz_objs,$$*) $(RT_SRCS:%.c=$(FUZZ_OBJ)/%.o) lib/libkiln.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(filter %.o,$^) -o $@ lib/libkiln.a $(LLVM_LIBS) $(LUA_LIBS) -lzstd -ldl -lpthread -lm
.PHONY: fuzz
fuzz: $(FUZZERS)
	@KILN_FUZZ_SECONDS=$${FUZZ_SECONDS:-120} KILN_FUZZ_SEED=$${FUZZ_SEED:-0} KILN_FUZZ_KEEP=build/fuzz/corpus bash tests/fuzz_test.sh

$(O)/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iruntime -I$(O)/runtime -c $< -o $@

# The attention helpers spell the causal and rotary keys' values as templates/lib/attn_mask.lua and
# templates/lib/attn_rotary.lua declare them.
$(O)/tools/key_values: tools/key_values.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 $(LUA_CFLAGS) $< -o $@ $(LUA_LIBS)
$(O)/runtime/rt_keys.h: templates/lib/attn_mask.lua templates/lib/attn_rotary.lua $(O)/tools/key_values
	@mkdir -p $(dir $@)
	$(O)/tools/key_values $@ templates templates/lib/attn_mask.lua CAUSAL RT_CAUSAL_VALUES \
	    templates/lib/attn_rotary.lua ROTARY RT_ROTARY_VALUES
$(O)/runtime/rt_attention.o $(FUZZ_OBJ)/runtime/rt_attention.o: $(O)/runtime/rt_keys.h

$(O)/gen/%.o: gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Igen $(LLVM_CFLAGS) $(LUA_CFLAGS) -c $< -o $@

# gen/gen_llvm.cpp: the LLVM C++ API where the C API has no way to time passes.
$(O)/gen/%.o: gen/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -Igen $(LLVM_CXXFLAGS) $(LUA_CFLAGS) -c $< -o $@

$(O)/emu/%.o: emu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Igen -Iemu $(LLVM_CFLAGS) $(LUA_CFLAGS) -c $< -o $@

$(O)/templates/%.o: templates/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Igen -Iemu $(LLVM_CFLAGS) $(LUA_CFLAGS) -c $< -o $@

# The registry: one entry per templates/<family>.ref.c (rewritten when that list changes).
.PHONY: FORCE
FORCE:
$(O)/emu/emu_ref_table.c: FORCE
	@mkdir -p $(dir $@)
	@{ echo '/* generated by the Makefile from templates/<family>.ref.c: the family registry (docs/registry.md) */'; \
	  echo '#include "kiln/emu_case.h"'; \
	  for f in $(REF_FAMS); do echo "extern const kiln_ref_family kiln_ref_$$f;"; done; \
	  echo 'const kiln_ref_family *const emu_ref_table[] = {'; \
	  for f in $(REF_FAMS); do echo "    &kiln_ref_$$f,"; done; \
	  echo '    0};'; \
	  echo 'const char emu_ref_names[] = "$(subst $(eval) ,$(comma) ,$(REF_FAMS))";'; } > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(O)/emu/emu_ref_table.o: $(O)/emu/emu_ref_table.c
	$(CC) $(CFLAGS) -c $< -o $@

$(O)/tools/%.o: tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itools -c $< -o $@

# Templates are compiled into libkiln so that it works without an installed tree.
$(O)/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 $(LUA_CFLAGS) $< -o $@ $(LUA_LIBS)
$(O)/gen/templates_embed.c: $(TEMPLATES) $(O)/tools/embed
	@mkdir -p $(dir $@)
	$(O)/tools/embed $@ $(TEMPLATES)
$(O)/gen/templates_embed.o: $(O)/gen/templates_embed.c
	$(CC) $(CFLAGS) -c $< -o $@

$(LIBDIR)/libkiln_rt.a: $(RT_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
# Shared libraries carry a versioned SONAME: libX.so -> libX.so.0 -> libX.so.0.1.0 (the real file).
SOVERSION := 0
SOFULL    := $(SOVERSION).1.0
$(LIBDIR)/libkiln_rt.so: $(LIBDIR)/libkiln_rt.so.$(SOFULL)
	ln -sf libkiln_rt.so.$(SOFULL) $(LIBDIR)/libkiln_rt.so.$(SOVERSION)
	ln -sf libkiln_rt.so.$(SOVERSION) $@
$(LIBDIR)/libkiln_rt.so.$(SOFULL): $(RT_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libkiln_rt.so.$(SOVERSION) -o $@ $^ $(RT_LIBS)
$(LIBDIR)/libkiln.a: $(GEN_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBDIR)/libkiln.so: $(LIBDIR)/libkiln.so.$(SOFULL)
	ln -sf libkiln.so.$(SOFULL) $(LIBDIR)/libkiln.so.$(SOVERSION)
	ln -sf libkiln.so.$(SOVERSION) $@
$(LIBDIR)/libkiln.so.$(SOFULL): $(GEN_OBJS) $(LIBDIR)/libkiln_rt.so
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libkiln.so.$(SOVERSION) -o $@ $(GEN_OBJS) -L$(LIBDIR) -lkiln_rt \
	    $(SO_GEN_LIBS) $(RT_LIBS) -Wl,--no-undefined -Wl,-rpath,'$$ORIGIN'

STATIC_LIBS := $(LIBDIR)/libkiln.a $(LIBDIR)/libkiln_rt.a

$(KILN): $(CLI_OBJS) $(STATIC_LIBS) $(if $(ORDER_LDFLAGS),$(ORDER_FILE))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(CLI_LDFLAGS) -o $@ $(CLI_OBJS) $(STATIC_LIBS) $(CLI_GEN_LIBS) $(RT_LIBS)

$(O)/tests/%: tests/%.c $(STATIC_LIBS) tests/check.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -Igen -Iemu -Iruntime $(LLVM_CFLAGS) $(LUA_CFLAGS) $< -o $@ \
	    $(LDFLAGS) $(STATIC_LIBS) $(GEN_LIBS)

$(O)/bench/%: bench/%.c $(STATIC_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ibench $< -o $@ $(LDFLAGS) $(STATIC_LIBS) $(GEN_LIBS)

# GPU check kit (bench/gpu/, docs/gpu-kit.md): everything a machine with a GPU needs, in
# $(O)/gpu-kit: the AOT check (libkiln_rt only), libkiln.so (generator + emulator, LLVM inside; gzip'd)
# with the libraries it needs that a GPU machine may lack (Lua, zlib, zstd) and kiln-kit on top of it,
# a bundle of PTX for every SM and cubins for each (ptxas), the Python package and its real-torch
# tests, the peers script and `run`.
KIT       := $(O)/gpu-kit
KIT_LIB   := bench/gpu/kit_case.c bench/gpu/kit_launch.c
KIT_DEPS  := $(KIT_LIB) bench/gpu/kit.h bench/gpu/kit_rows.h
.PHONY: gpu-kit
# The kiln Python package (python/kiln, when present) rides along with its real-torch tests, so that
# peers.py and `run` drive kiln on torch tensors (libkiln_rt, and libkiln unpacked by `run`: JIT too).
KIT_PY    := $(if $(wildcard python/kiln/__init__.py),$(KIT)/python/kiln/__init__.py,)
# what libkiln.so.0 needs beyond libc/libstdc++, copied from this machine (ldd names the files)
KIT_SYSLIBS := liblua5.4.so.0 libz.so.1 libzstd.so.1
gpu-kit: $(KIT)/kiln-gpucheck $(KIT)/kiln-kit $(KIT)/lib/libkiln.so.$(SOVERSION).gz $(KIT)/kit.kbundle.gz $(KIT)/run \
         $(KIT)/transformer.kbundle.gz $(KIT)/kit_90a.kbundle.gz $(KIT)/sanitize \
         $(KIT)/peers.py $(KIT)/models.py $(KIT)/lib/libkiln_rt.so.$(SOVERSION) $(KIT_PY)
$(KIT)/lib/libkiln_rt.so.$(SOVERSION): $(LIBDIR)/libkiln_rt.so.$(SOFULL)
	@mkdir -p $(dir $@)
	cp $< $@
$(KIT)/lib/libkiln.so.$(SOVERSION).gz: $(LIBDIR)/libkiln.so.$(SOFULL)
	@mkdir -p $(dir $@)
	strip -o $(O)/bench/libkiln.so.stripped $< && gzip -4 -c $(O)/bench/libkiln.so.stripped > $@.tmp && mv $@.tmp $@
	@if ldd $< | grep -q libLLVM; then echo "gpu-kit: $< links libLLVM (LLVM_SHARED=1); the kit needs LLVM linked in statically"; exit 1; fi
	for l in $(KIT_SYSLIBS); do \
	    p=$$(ldd $< | awk -v l=$$l '$$1 == l { print $$3 }'); \
	    [ -n "$$p" ] && cp -L "$$p" $(dir $@)$$l || { echo "gpu-kit: ldd finds no $$l for $< (the kit must carry it)"; exit 1; }; \
	done
KIT_PY_TESTS := python/tests/test_torch_real.py python/tests/test_torch_real_attention_bwd.py python/tests/test_torch_swap_norms.py \
                python/tests/test_torch_flash_attn.py python/tests/test_torch_sdpa_mask.py python/tests/test_torch_transformers.py \
                python/tests/conftest.py python/tests/test_torch_flash_attn_kernels.py python/tests/test_torch_fa_matrix.py python/tests/fa_matrix.py
$(KIT)/python/kiln/__init__.py: $(wildcard python/kiln/*.py) $(KIT_PY_TESTS)
	rm -rf $(KIT)/python && mkdir -p $(KIT)/python/tests && cp -r python/kiln $(KIT)/python/ && \
	    cp $(KIT_PY_TESTS) $(KIT)/python/tests/ && \
	    find $(KIT)/python -name __pycache__ -prune -exec rm -rf {} +
$(O)/bench/kiln-gpucheck: bench/gpu/kit_check.c bench/gpu/kit_bench.c $(KIT_DEPS) $(LIBDIR)/libkiln_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ibench/gpu bench/gpu/kit_check.c bench/gpu/kit_bench.c $(KIT_LIB) -o $@ $(LDFLAGS) $(LIBDIR)/libkiln_rt.a $(RT_LIBS)
$(KIT)/kiln-gpucheck: $(O)/bench/kiln-gpucheck
	@mkdir -p $(dir $@)
	cp $< $@
# kiln-kit links libkiln.so.0: beside the kit's lib/ on the GPU machine ($ORIGIN/lib, where `run`
# unpacks it), else this build's lib/ (make gpu-kit runs `kiln-kit specs` here).
$(O)/bench/kiln-kit: bench/gpu/kit_gen.c $(KIT_DEPS) $(LIBDIR)/libkiln.so.$(SOFULL) $(LIBDIR)/libkiln_rt.so.$(SOFULL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ibench/gpu bench/gpu/kit_gen.c $(KIT_LIB) -o $@ $(LDFLAGS) $(LIBDIR)/libkiln.so.$(SOFULL) \
	    $(LIBDIR)/libkiln_rt.so.$(SOFULL) $(RT_LIBS) -Wl,-rpath,'$$ORIGIN/lib:$(abspath $(LIBDIR))'
$(KIT)/kiln-kit: $(O)/bench/kiln-kit
	@mkdir -p $(dir $@)
	rm -f $(KIT)/kiln-kit.gz # the statically linked kiln-kit of earlier kits
	strip -o $@ $<
$(KIT)/specs.txt: $(O)/bench/kiln-kit
	@mkdir -p $(dir $@)
	$< specs > $@.tmp && mv $@.tmp $@
# The kit's SMs: the GPUs it is carried to today (sm_90) and the sm_75 paths it runs there, the other
# sm_8x rows, and one data-center and one consumer Blackwell row (sm_103/110/121 share their code paths):
# every SM with cubins would double the kit's build time for GPUs it does not meet.
KIT_SMS   := 75,80,86,89,90,100,120
# Cubins for the GPU the kit is carried to alone (the H100/H200 machines, sm_90): kiln-gpucheck runs a device's own
# SM's cubin and PTX and sm_75's PTX, so another SM's cubin is never loaded there. Assembling all seven SMs was ~80 %
# of `make gpu-kit` (wave 23: 20 kit specs on 7 SMs, 8 s CPU to generate, 46 s with cubins). For another GPU:
# make gpu-kit KIT_CUBIN_SMS=80 (one of KIT_SMS).
KIT_CUBIN_SMS := 90
$(O)/bench/kit.kbundle: $(KIT)/specs.txt $(KILN) $(TEMPLATES)
	PATH="$(CUDA_HOME)/bin:$$PATH" $(KILN) bundle --spec-list $< --sm $(KIT_SMS) --cubin-sm $(KIT_CUBIN_SMS) -o $@
# the transformer set (bench/transformer_kernels.txt, its SM column dropped) as PTX for every SM: what
# `kiln-gpucheck load` loads cold and warm through the runtime's disk cache of the driver's cubins
$(O)/bench/transformer.kbundle: bench/transformer_kernels.txt $(KILN) $(TEMPLATES)
	@mkdir -p $(dir $@)
	sed -n 's/^[0-9][0-9]* //p' $< > $(O)/bench/transformer_specs.txt
	$(KILN) bundle --spec-list $(O)/bench/transformer_specs.txt --sm $(KIT_SMS) -o $@
$(KIT)/transformer.kbundle.gz: $(O)/bench/transformer.kbundle
	@mkdir -p $(dir $@)
	gzip -4 -c $< > $@.tmp && mv $@.tmp $@
# the arch bundle: sm_90a PTX and cubins of the wgmma attention rows and sweep (`kiln-kit specs --arch`)
$(KIT)/specs_90a.txt: $(O)/bench/kiln-kit
	@mkdir -p $(dir $@)
	$< specs --arch > $@.tmp && mv $@.tmp $@
$(O)/bench/kit_90a.kbundle: $(KIT)/specs_90a.txt $(KILN) $(TEMPLATES)
	PATH="$(CUDA_HOME)/bin:$$PATH" $(KILN) bundle --spec-list $< --sm 90a --cubin -o $@
$(KIT)/kit_90a.kbundle.gz: $(O)/bench/kit_90a.kbundle
	gzip -4 -c $< > $@.tmp && mv $@.tmp $@
$(KIT)/kit.kbundle.gz: $(O)/bench/kit.kbundle # PTX compresses ~4x; `run` unpacks it
	rm -f $(KIT)/kit.kbundle # the uncompressed bundle of earlier kits
	gzip -4 -c $< > $@.tmp && mv $@.tmp $@
$(KIT)/run: bench/gpu/run.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@
$(KIT)/sanitize: bench/gpu/sanitize.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@
$(KIT)/peers.py: bench/gpu/peers.py
	@mkdir -p $(dir $@)
	cp $< $@
$(KIT)/models.py: bench/gpu/models.py
	@mkdir -p $(dir $@)
	cp $< $@

# The main job: generate LayerNorm PTX for every SM and show that ptxas accepts it.
run: all torch-deps
	@tools/showcase.sh $(KILN)

test: all $(if $(SAN),,gpu-kit)
	@KILN=$(KILN) O=$(O) tests/run.sh

bench: all
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

# JIT at model load (docs/jit.md): stage split per variant, the transformer kernel set cold on
# every core, and `kiln emit` as a process against NVRTC and Triton processes. Not in `make test`.
$(O)/bench/nvrtc_once: bench/nvrtc_once.c bench/layernorm_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -ldl
bench-jit: all $(O)/bench/nvrtc_once
	$(O)/bench/jit_bench warm
	$(O)/bench/jit_bench model bench/transformer_kernels.txt
	python3 bench/jit_compare.py --kiln $(KILN) --nvrtc $(O)/bench/nvrtc_once
.PHONY: bench-jit
# Rewrites tools/kiln.order from callgrind runs of kiln emit (valgrind; after an LLVM or template upgrade).
kiln-order: $(KILN)
	bash tools/kiln_order.sh $(KILN) $(ORDER_FILE)
.PHONY: kiln-order

# Rewrites tests/quality/<test>.tsv: per variant of every ptxas matrix test (those using
# tests/matrix.h), the registers and instruction counts LLVM's default<O3> pipeline gives.
# Run it after a template changes or new variants land; the matrix tests then check kiln's
# pipeline against it.
QUALITY_TESTS = $(patsubst tests/%.c,$(O)/tests/%,$(shell grep -l '"matrix.h"' tests/*_test.c))
quality-table: all
	@mkdir -p tests/quality
	@for t in $(QUALITY_TESTS); do echo "== $$t (default<O3>)"; \
	    KILN_PIPELINE=o3 KILN_QUALITY_WRITE=1 $$t | grep -E '^(wrote|FAIL|.*: [0-9]+ passed)' || exit 1; done
.PHONY: quality-table
# Appends rows for the variants a table lacks (the NOTE line of a matrix test), leaving the existing rows:
# QUALITY_TEST=attention_ptxas_test (default: every matrix test); KILN_TEST_FULL=1 for the full matrices' variants.
quality-add: all
	@for t in $(if $(QUALITY_TEST),$(O)/tests/$(QUALITY_TEST),$(QUALITY_TESTS)); do echo "== $$t (default<O3>, missing rows)"; \
	    KILN_PIPELINE=o3 KILN_QUALITY_ADD=1 $$t | grep -E '^(quality add|appended|FAIL|.*: [0-9]+ passed)' || exit 1; done
.PHONY: quality-add

# Installs headers, both libraries (static, and shared with their SONAME links), the CLI, and
# pkg-config files: kiln.pc (generator + runtime) and kiln-rt.pc (runtime only: no LLVM, no Lua).
install: all
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/kiln \
	    $(DESTDIR)$(PREFIX)/share/licenses/kiln
	install -m 644 $(LIBDIR)/libkiln_rt.a $(LIBDIR)/libkiln.a $(DESTDIR)$(PREFIX)/lib
	install -m 755 $(LIBDIR)/libkiln_rt.so.$(SOFULL) $(LIBDIR)/libkiln.so.$(SOFULL) $(DESTDIR)$(PREFIX)/lib
	for l in libkiln_rt libkiln; do \
	    ln -sf $$l.so.$(SOFULL) $(DESTDIR)$(PREFIX)/lib/$$l.so.$(SOVERSION) && \
	    ln -sf $$l.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/$$l.so || exit 1; done
	install -m 755 $(KILN) $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/kiln/*.h $(DESTDIR)$(PREFIX)/include/kiln
	install -m 644 LICENSE $(DESTDIR)$(PREFIX)/share/licenses/kiln
	for pc in kiln kiln-rt; do \
	    sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(SOFULL)|' -e 's|@LIBS_PRIVATE@|$(LUA_LIBS) -lzstd -lz -lstdc++|' \
	        tools/$$pc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc || exit 1; done

help:
	@echo "kiln make targets:"
	@echo "  make run        install missing packages (as root; PyTorch too), build, then the main job: bf16 LayerNorm"
	@echo "                  for every SM through ptxas, lint and the CPU emulator"
	@echo "  make test       build and run the whole test suite (summary line at the end)"
	@echo "  make            build libraries, bin/kiln, tests, benchmarks and examples"
	@echo "  make SAN=1 test the suite under ASan + UBSan (objects under build/san)"
	@echo "  make bench      generation-latency and cache benchmarks"
	@echo "  make bench-jit  JIT at model load: stage split, kernel set cold, kiln emit vs NVRTC and Triton"
	@echo "  make kiln-order rewrite tools/kiln.order (bin/kiln's hot functions, linked first; needs valgrind)"
	@echo "  make quality-table  rewrite tests/quality/*.tsv (default<O3> registers/SASS per matrix variant)"
	@echo "  make quality-add    append the rows tests/quality/*.tsv lack (QUALITY_TEST=name_ptxas_test for one)"
	@echo "  make gpu-kit    build/gpu-kit/: carry it to a GPU machine and run build/gpu-kit/run (docs/gpu-kit.md)"
	@echo "  make install PREFIX=/usr/local [DESTDIR=]   headers, libraries, CLI, pkg-config files"
	@echo "  make setup      install the Debian packages kiln builds with (as root), else print the command;"
	@echo "                  and the Python test packages, PyTorch included (tools/torch-requirements.txt)"
	@echo "  make clean      remove build/, lib/, bin/"
	@echo "options: LLVM_SHARED=1 (link libLLVM-22.so instead of static LLVM), CI=1 (warnings are errors)"

clean:
	rm -rf build lib bin

-include $(shell find build -name '*.d' 2>/dev/null)
endif
