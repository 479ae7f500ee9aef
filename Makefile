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
define example_rule
$(BUILD)/examples/$(1): $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard examples/$(1)/*.c)) $(BUILD)/libkiln.a
	@mkdir -p $$(dir $$@)
	$$(CC) -fopenmp $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(BUILD)/libkiln.a $$(LIBS)
endef
$(foreach e,$(EXAMPLES),$(eval $(call example_rule,$(e))))

deps:
	@scripts/deps.sh build data

test: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/tests/kiln_tests $(TESTS)

demo: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/examples/mlp

# kiln.pc is written at install time so it always names this PREFIX.
install: lib
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/kiln.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libkiln.a $(BUILD)/libkiln.so $(DESTDIR)$(PREFIX)/lib/
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: kiln' 'Description: tensors and reverse-mode autodiff in C' 'Version: 0.1.0' \
	  'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lkiln' 'Libs.private: -fopenmp $(LIBS)' \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kiln.pc

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
