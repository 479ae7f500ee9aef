# kiln — one plain Makefile.
#   make            library (build/libkiln.a, build/libkiln.so), examples, tests
#   make test       install missing packages, build, run the test suite
#   make demo       install missing packages, build, run the demo
#   make install PREFIX=/usr/local
#   CC=clang make   the same with clang

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
KILN_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -fopenmp -Iinclude -Icore -MMD -MP
LIBS    = -lopenblas -lz -lm -lpthread
LDFLAGS ?=

LIB_SRC  = $(wildcard core/*.c ops/*.c backends/cpu/*.c optim/*.c)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC = $(wildcard tests/*.c)
TEST_OBJ = $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
EXAMPLES = $(notdir $(wildcard examples/*))
EXAMPLE_BINS = $(EXAMPLES:%=$(BUILD)/examples/%)

.PHONY: all lib test demo install clean deps
all: lib $(EXAMPLE_BINS) $(BUILD)/tests/kiln_tests

lib: $(BUILD)/libkiln.a $(BUILD)/libkiln.so

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(KILN_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libkiln.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libkiln.so: $(LIB_OBJ)
	$(CC) -shared -fopenmp $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/kiln_tests: $(TEST_OBJ) $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(CC) -fopenmp $(LDFLAGS) -o $@ $(TEST_OBJ) $(BUILD)/libkiln.a $(LIBS)

# Each examples/<name>/ holds one program's .c files.
.SECONDEXPANSION:
$(BUILD)/examples/%: $$(patsubst %.c,$(BUILD)/obj/%.o,$$(wildcard examples/%/*.c)) $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(CC) -fopenmp $(LDFLAGS) -o $@ $(filter %.o,$^) $(BUILD)/libkiln.a $(LIBS)

deps:
	@scripts/deps.sh build data

test: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/tests/kiln_tests $(TESTS)

demo: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/examples/mlp

$(BUILD)/kiln.pc: Makefile
	@mkdir -p $(dir $@)
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: kiln' 'Description: tensors, autodiff, optimizers and quantization in C' 'Version: 0.1.0' \
	  'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lkiln' 'Libs.private: -fopenmp $(LIBS)' > $@

install: lib $(BUILD)/kiln.pc
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/kiln.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libkiln.a $(BUILD)/libkiln.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(BUILD)/kiln.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
