# sgl-overlay. `make`: fetch the pinned trees, apply, verify, build patched wheels into dist/.
# `make test`: the whole suite (CI runs it through .ci/run). See README.md.
SHELL := /bin/bash
.DEFAULT_GOAL := all
TOOL := .venv/bin/sgl-overlay
PYTEST := -m pytest -q -p no:cacheprovider

.PHONY: all venvs trees wheels test test-tool test-sglang test-sglang-kt test-kernel test-wheels test-launch matrix k3-grid clean

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

test: venvs trees test-tool test-sglang test-sglang-kt test-kernel test-wheels test-launch

test-tool: $(TOOL)
	.venv/bin/python $(PYTEST) tests/tool

test-sglang: venvs trees
	.venvs/sglang/bin/python $(PYTEST) tests/sglang

test-sglang-kt: venvs trees
	.venvs/sglang-kt/bin/python $(PYTEST) tests/sglang_kt

test-kernel: venvs trees
	.venvs/sglang/bin/python $(PYTEST) tests/kernel

# The patched wheels, installed: RECORD, byte diff against stock, doctor; then the K3 and KT
# suites again, this time against the installed stock and patched wheels instead of the trees.
INSTALLED := $(CURDIR)/build/installed
test-wheels: wheels
	scripts/install_wheels.sh
	.venv/bin/python $(PYTEST) tests/wheels
	SGL_OVERLAY_STOCK_ROOT_SGLANG=$(INSTALLED)/stock-sglang SGL_OVERLAY_PATCHED_ROOT_SGLANG=$(INSTALLED)/patched-sglang \
	  .venvs/sglang/bin/python $(PYTEST) tests/sglang
	SGL_OVERLAY_STOCK_ROOT_SGLANG_KT=$(INSTALLED)/stock-sglang-kt SGL_OVERLAY_PATCHED_ROOT_SGLANG_KT=$(INSTALLED)/patched-sglang-kt \
	  .venvs/sglang-kt/bin/python $(PYTEST) tests/sglang_kt
	@# The stock wheels in the patched role must fail both suites on an assertion (log under build/).
	! SGL_OVERLAY_PATCHED_ROOT_SGLANG=$(INSTALLED)/stock-sglang .venvs/sglang/bin/python $(PYTEST) -x tests/sglang \
	  > build/stock-as-patched-sglang.log 2>&1 && grep -q AssertionError build/stock-as-patched-sglang.log \
	  && echo "stock sglang wheel fails the K3 suite on an assertion, as expected (build/stock-as-patched-sglang.log)"
	! SGL_OVERLAY_PATCHED_ROOT_SGLANG_KT=$(INSTALLED)/stock-sglang-kt .venvs/sglang-kt/bin/python $(PYTEST) -x tests/sglang_kt \
	  > build/stock-as-patched-sglang-kt.log 2>&1 && grep -q AssertionError build/stock-as-patched-sglang-kt.log \
	  && echo "stock sglang-kt wheel fails the KT suite on an assertion, as expected (build/stock-as-patched-sglang-kt.log)"

# Stretch of issue 6: the patched wheel with its full dependency set, and the launch command.
test-launch: wheels
	scripts/test_launch.sh

matrix: trees
	$(TOOL) matrix

# The K3 / MegaMoE token-cap grid (test-sglang runs it too and checks the summary),
# writing its summary into docs/k3-token-cap-grid.{md,json}.
k3-grid: venvs trees
	SGL_OVERLAY_K3_GRID_WRITE=1 .venvs/sglang/bin/python $(PYTEST) tests/sglang/test_k3_token_cap_grid.py

clean:
	rm -rf build dist
