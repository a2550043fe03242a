# sgl-overlay. `make`: fetch the pinned trees, apply, verify, build patched wheels into dist/.
# `make test`: the whole suite (CI runs it through .ci/run). See README.md.
SHELL := /bin/bash
.DEFAULT_GOAL := all
TOOL := .venv/bin/sgl-overlay
PYTEST := -m pytest -q -p no:cacheprovider

.PHONY: all venvs trees wheels test test-tool test-sglang test-sglang-kt test-kernel matrix clean

all: trees wheels

venvs:
	scripts/setup_venvs.sh

$(TOOL):
	scripts/setup_venvs.sh --tool-only

trees: $(TOOL)
	$(TOOL) fetch
	$(TOOL) apply
	$(TOOL) verify

wheels: trees venvs
	$(TOOL) wheels --out dist
	.venvs/sglang/bin/python -m pip wheel -q --no-deps --no-build-isolation -w dist ./sgl_kernel_ext

test: venvs trees test-tool test-sglang test-sglang-kt test-kernel

test-tool: $(TOOL)
	.venv/bin/python $(PYTEST) tests/tool

test-sglang: venvs trees
	.venvs/sglang/bin/python $(PYTEST) tests/sglang

test-sglang-kt: venvs trees
	.venvs/sglang-kt/bin/python $(PYTEST) tests/sglang_kt

test-kernel: venvs trees
	.venvs/sglang/bin/python $(PYTEST) tests/kernel

matrix: trees
	$(TOOL) matrix

clean:
	rm -rf build dist
