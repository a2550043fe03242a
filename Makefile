# sgl-overlay. `make`: fetch the pinned trees, apply, verify, build patched wheels into dist/.
# `make test`: the whole suite (CI runs it through .ci/run). See README.md.
SHELL := /bin/bash
.DEFAULT_GOAL := all
TOOL := .venv/bin/sgl-overlay
PYTEST := -m pytest -q -p no:cacheprovider
# Bytecode, written once into one folder outside the sources and reused by every later process: the
# suites start dozens of processes that import torch and sglang (seconds of compiling each, where the
# environment sets PYTHONDONTWRITEBYTECODE and the venvs hold no bytecode).
export PYTHONPYCACHEPREFIX := $(CURDIR)/build/pycache
export PYTHONDONTWRITEBYTECODE :=

.PHONY: all venvs trees wheels wheels-only installed lint test test-tool test-style test-sglang test-sglang-kt test-kernel \
  test-wheels test-wheels-files test-wheels-sglang test-wheels-sglang-kt test-launch test-image matrix pins clean

all: trees wheels

venvs: $(TOOL)
	scripts/setup_venvs.sh

# Rebuilt first when its requirement files change (before the trees and the test venvs, which run it).
$(TOOL): python/pyproject.toml requirements/tool.txt
	scripts/setup_venvs.sh --tool-only
	touch $@

trees: $(TOOL)
	$(TOOL) fetch
	$(TOOL) apply
	$(TOOL) verify

# dist/: the patched sglang / sglang-kt wheels and the tool's wheel (with a copy of patches/; python/build is
# removed first so that no file deleted from patches/ ships).
define build_dist
	$(TOOL) wheels --out dist
	rm -rf python/build && .venv/bin/python -m pip wheel -q --no-deps -w dist ./python && rm -rf python/build
endef

wheels: trees
	$(call build_dist)

# dist/ only: the tool's .venv and the trees, no test venvs.
wheels-only: trees
	$(call build_dist)

# `make test` runs the suites three at a time on two cores (a sub-make with -j3): the chains that wait on pip,
# git or nvcc (trees, wheels, installs, the launch test's 10 GB install) leave a core idle otherwise. Goals start
# in this order when ready: test-wheels, the longest chain (trees, wheels, installs, then three runs), then
# test-launch (the install, mostly disk and network, from the moment the wheels exist), then the rest, the
# costliest first. Each suite's output is printed whole when it ends (--output-sync). Under `make test`:
# - test-tool waits for the trees, whose real series one of its tests re-applies;
# - the tests test-wheels runs against the installed wheels run there only: the installed files are the
#   trees' post-images byte for byte (tests/wheels), so a second run on the trees proves nothing more.
SUITES := test-wheels test-launch test-sglang test-sglang-kt test-tool test-style test-kernel test-image
test:
	$(MAKE) -j3 --output-sync=target --no-print-directory lint $(SUITES) TOOL_TEST_DEPS=trees \
	  SGLANG_TREE_ARGS="$(addprefix --deselect=,$(SGLANG_WHEEL_TESTS))" \
	  KT_TREE_ARGS="$(addprefix --deselect=,$(KT_WHEEL_TESTS))"

# ruff.toml: one format and lint configuration for the tool, the tests and the benchmarks.
LINTED := python tests benchmarks scripts/check_upstream_main.py
lint: $(TOOL)
	.venv/bin/ruff format --check $(LINTED)
	.venv/bin/ruff check $(LINTED)

test-tool: $(TOOL) $(TOOL_TEST_DEPS)
	.venv/bin/python $(PYTEST) tests/tool

# upstream's pre-commit hooks (isort, black, clang-format, codespell) on what every series changes
test-style: venvs trees
	.venvs/sglang/bin/python $(PYTEST) tests/style

test-sglang: venvs trees
	.venvs/sglang/bin/python $(PYTEST) tests/sglang $(SGLANG_TREE_ARGS)

test-sglang-kt: venvs trees
	.venvs/sglang-kt/bin/python $(PYTEST) tests/sglang_kt $(KT_TREE_ARGS)

# The sgl-kernel series on the trees: pins and drift, nvcc compiling the post-image (CI has no GPU: the GPU
# tests skip; scripts/gpu_kernel.sh runs them on a GPU machine).
test-kernel: venvs trees
	.venvs/sglang/bin/python $(PYTEST) tests/kernel

# The patched wheels, every Python tag, installed: RECORD, byte diff against stock, doctor, the cp312 wheel in
# a Python 3.12 venv (tests/wheels). Then, against the installed stock and patched wheels (the first pinned
# one: cp311 for sglang) instead of the trees, the tests whose subject is the package as pip lays it out,
# imported from there: each patch's own unit test (upstream's test/ layout, run with only the package on
# PYTHONPATH and importing its sglang.test helpers from it), for every sglang patch (test_in_patch_tests.py,
# which also runs each one's test on its pre-image: the stock package, or a commit of the tree where an
# earlier patch changed its files; one pytest process per tree), the probe of sglang 0003, the DeepGEMM
# runner's caller (test_deep_gemm_copy_list.py: the installed runner over the released kernels' length rules),
# for sglang-kt 0001 (test_kt_gpu_expert_remap.py's upstream_unit_test cases) and 0002
# (test_kt_deep_gemm_copy_list.py, likewise). The probe suites run on the trees only (test-sglang,
# test-sglang-kt): the multi-pass probes (test_k3_mega_moe_passes.py), the CUDA-graph ranks probe
# (test_k3_mega_moe_graphs.py) and the KT remap test module (gpu_expert_remap.py: the rest of
# test_kt_gpu_expert_remap.py). They prove the patched functions' behaviour on the post-image files, which
# tests/wheels proves the installed files are byte for byte; rerun here they would add minutes and prove
# nothing new.
INSTALLED := $(CURDIR)/build/installed
SGLANG_WHEEL_TESTS := tests/sglang/test_in_patch_tests.py tests/sglang/test_deep_gemm_copy_list.py
KT_REMAP := tests/sglang_kt/test_kt_gpu_expert_remap.py
KT_WHEEL_TESTS := tests/sglang_kt/test_kt_deep_gemm_copy_list.py $(KT_REMAP)::test_upstream_unit_test_passes_on_patched \
  $(KT_REMAP)::test_upstream_unit_test_fails_on_stock
# The three runs share the installs and nothing else: under `make test` they run beside other suites.
test-wheels: test-wheels-files test-wheels-sglang test-wheels-sglang-kt

installed: venvs wheels
	scripts/install_wheels.sh

test-wheels-files: installed
	.venv/bin/python $(PYTEST) tests/wheels

test-wheels-sglang: installed
	SGL_OVERLAY_STOCK_ROOT_SGLANG=$(INSTALLED)/stock-sglang SGL_OVERLAY_PATCHED_ROOT_SGLANG=$(INSTALLED)/patched-sglang \
	  .venvs/sglang/bin/python $(PYTEST) $(SGLANG_WHEEL_TESTS)

test-wheels-sglang-kt: installed
	SGL_OVERLAY_STOCK_ROOT_SGLANG_KT=$(INSTALLED)/stock-sglang-kt SGL_OVERLAY_PATCHED_ROOT_SGLANG_KT=$(INSTALLED)/patched-sglang-kt \
	  .venvs/sglang-kt/bin/python $(PYTEST) $(KT_WHEEL_TESTS)

# README.md's "Installing on a GPU box" commands, as written, in a fresh venv (full dependency set), and
# the launch command.
test-launch: wheels
	scripts/test_launch.sh

# docker/Dockerfile's RUN step, as written, in a clean venv standing in for the lmsysorg/sglang image.
test-image: wheels
	docker/test_in_venv.sh

matrix: trees
	$(TOOL) matrix

# Rewrite the manifest's pre-image lock from the series (after re-pinning or editing a patch).
pins: $(TOOL)
	$(TOOL) pins

clean:
	rm -rf build dist
