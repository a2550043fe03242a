"""`sgl-overlay matrix` on a synthetic release history made here: one version per outcome class.

Wheels of versions 0.5 ... 1.1 of a tiny `sglang` package go into a cache folder (real
wheels with RECORD, sha256 pinned for 1.0 only); the series is two patches authored in a
clone of 1.0 (patch 2 on top of patch 1, both modify model.py), plus a variant of patch 1 for 0.5, where upstream had the file under another
name. Patch 1 carries a test; patch 2 none. Each version is built to land in one class:

    0.5  model.py is models.py      -> patch 1 applies through its variant (exact)
    0.6  model.py missing            -> absent
    0.7  line 10 changed otherwise   -> conflict, hunk 1 named
    0.8  line 12 (context) changed   -> only 3-way (needs the seeded pinned blob), test FAILS
    0.9  three lines prepended       -> offsets, test passes
    1.0  the pin                     -> exact, test passes
    1.1  fix already there           -> upstream

The patch tests run for real (pytest with this interpreter, PYTHONPATH=<tree>/python).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from sgl_overlay.engine.manifest import load_manifest
from sgl_overlay.engine.states import Outcome, State
from sgl_overlay.maint import matrix, matrix_report
from synth import blob, cli, clone, git, make_upstream, make_wheel, snapshot, write

BASE = "".join(f"V{i} = {i}\n" for i in range(1, 41))
HOOK = "".join(f"H{i} = {i}\n" for i in range(1, 21))
FIXED = BASE.replace("V10 = 10\n", "V10 = 100\n")
TEST_MODEL = (
    "from sglang import model\n\n\n"
    "def test_v10_is_fixed():\n    assert model.V10 == 100\n\n\n"
    "def test_neighbour_untouched():\n    assert model.V12 == 12\n"
)

VERSIONS = {
    "0.5": {"sglang/models.py": BASE},
    "0.6": {},
    "0.7": {"sglang/model.py": BASE.replace("V10 = 10\n", "V10 = 7\n")},
    "0.8": {"sglang/model.py": BASE.replace("V12 = 12\n", "V12 = -12\n")},
    "0.9": {"sglang/model.py": "P1 = 1\nP2 = 2\nP3 = 3\n" + BASE},
    "1.0": {"sglang/model.py": BASE},
    "1.1": {"sglang/model.py": FIXED},
}


def _author(
    tmp: Path, name: str, files: dict[str, str], edits: dict[str, str], extra: dict[str, str], subject: str, out: Path
) -> Path:
    repo = make_upstream(tmp / name, files=files)
    for rel, text in {**edits, **extra}.items():
        write(repo, rel, text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject, "-m", "Why: V10 must be 100.")
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.patch"))
    git(repo, "format-patch", "-q", "-o", str(out), "HEAD~1..HEAD")
    (made,) = set(out.glob("*.patch")) - before
    return made


def make_history(tmp: Path) -> tuple[Path, Path]:
    """patches/ (manifest, series, variant) and a wheel cache holding every version."""
    cache = tmp / "cache"
    cache.mkdir()
    shas = {}
    for version, files in VERSIONS.items():
        shas[version] = make_wheel(
            cache / f"sglang-{version}-py3-none-any.whl", {"sglang/__init__.py": "", "sglang/hook.py": HOOK, **files}
        )
    patches = tmp / "patches"
    series = patches / "sglang"
    pin = {"python/sglang/__init__.py": "", "python/sglang/model.py": BASE, "python/sglang/hook.py": HOOK}
    p1 = _author(
        tmp,
        "w1",
        pin,
        {"python/sglang/model.py": FIXED},
        {"test/unit/test_model.py": TEST_MODEL},
        "model: set V10 to 100",
        series,
    )
    # Patch 2 is authored on top of patch 1 (a series), and carries no test.
    p2_repo = clone(tmp / "w1", tmp / "w2")
    write(p2_repo, "python/sglang/hook.py", HOOK.replace("H5 = 5\n", "H5 = 50\n"))
    write(p2_repo, "python/sglang/model.py", FIXED.replace("V30 = 30\n", "V30 = 300\n"))
    git(p2_repo, "commit", "-q", "-am", "hook: set H5 to 50, V30 to 300")
    git(p2_repo, "format-patch", "-q", "--start-number", "2", "-o", str(series), "HEAD~1..HEAD")
    p2 = next(p for p in series.glob("0002-*.patch"))
    # The variant: the same fix where upstream 0.5 called the file models.py.
    old = {"python/sglang/__init__.py": "", "python/sglang/models.py": BASE, "python/sglang/hook.py": HOOK}
    variant_test = TEST_MODEL.replace("import model", "import models as model")
    var = _author(
        tmp,
        "w0",
        old,
        {"python/sglang/models.py": FIXED},
        {"test/unit/test_model.py": variant_test},
        "model: set V10 to 100",
        series / "variants",
    )
    (patches / "manifest.toml").write_text(
        'schema = 1\n\n[targets.sglang]\nkind = "wheel"\nversion = "1.0"\n'
        'upstream = "https://example.com/sglang"\nrequirement = "sglang==1.0"\n'
        f'wheel = "sglang-1.0-py3-none-any.whl"\nsha256 = "{shas["1.0"]}"\n'
        'layout = { sglang = "python/sglang" }\nproject_name = "sglang"\n'
        f'patches = ["{p1.name}", "{p2.name}"]\n\n'
        f'[targets.sglang.preimages]\n"python/sglang/model.py" = "{blob(BASE)}"\n'
        f'"python/sglang/hook.py" = "{blob(HOOK)}"\n\n'
        f"[targets.sglang.matrix]\nversions = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in VERSIONS)}]\n\n"
        f'[[targets.sglang.variants]]\npatch = "{p1.name}"\nfile = "variants/{var.name}"\n'
        'versions = ["0.5"]\nreason = "model.py was called models.py"\n'
    )
    return patches, cache


def _options(tmp_path: Path, cache: Path) -> matrix.Options:
    """Offline, trees under tmp_path, the patches' tests run with this interpreter."""
    return matrix.Options(
        root=tmp_path,
        cache=cache,
        build=tmp_path / "build" / "matrix",
        offline=True,
        python={"sglang": Path(sys.executable)},
    )


def test_every_outcome_class(tmp_path: Path) -> None:
    patches, cache = make_history(tmp_path)
    manifest = load_manifest(patches)
    opts = _options(tmp_path, cache)
    runs = matrix.run_matrix(manifest, None, {}, opts, log=lambda *_: None)
    assert matrix.errors(runs) == []
    md = matrix_report.to_markdown(matrix_report.to_json(runs))
    p1, p2 = manifest.get("sglang").patches
    assert "| patch | 0.5 | 0.6 | 0.7 | 0.8 | 0.9 | 1.0 | 1.1 |" in md
    assert (
        f"| `{p1}` | exact (variant) · tests pass | absent | **conflict** | 3-way · **tests FAIL** "
        "| offsets · tests pass | exact · tests pass | upstream · tests pass |"
    ) in md
    # Patch 2 modifies model.py after patch 1: absent where the file is, judged on its own where patch 1
    # conflicts (0.7), exact on 1.1, whose model.py is the very blob patch 2 was written against.
    assert (
        f"| `{p2}` | absent | absent | offsets · no tests | offsets · no tests | offsets · no tests "
        "| exact · no tests | exact · no tests |"
    ) in md

    data = matrix_report.to_json(runs)["targets"]["sglang"]
    cells = {v["version"]: v["cells"][p1] for v in data["versions"]}
    assert "python/sglang/model.py: hunk 1/1, @@ -7,7 +7,7 @@ V6 = 6 (fails exact and 3-way)" in cells["0.7"]["detail"]
    assert cells["0.6"]["detail"] == "missing python/sglang/model.py"
    assert "offset 3 lines" in cells["0.9"]["detail"]
    assert "exact apply fails at python/sglang/model.py: hunk 1/1" in cells["0.8"]["detail"]
    assert "assert -12 == 12" in cells["0.8"]["tests"]["reason"]
    assert cells["0.8"]["tests"]["result"] == "fail"
    assert cells["1.0"]["tests"] == {"result": "pass", "reason": "2 passed", "files": ["test/unit/test_model.py"]}
    assert cells["0.5"]["patch_file"].startswith("variants/") and cells["0.5"]["variant"] is True
    assert cells["1.1"]["tests"]["result"] == "pass" and "already carry the change" in cells["1.1"]["detail"]
    recorded = {v["version"]: v["sha256"] for v in data["versions"]}
    for version in VERSIONS:
        wheel = cache / f"sglang-{version}-py3-none-any.whl"
        assert recorded[version] == hashlib.sha256(wheel.read_bytes()).hexdigest()

    # The 3-way class depends on the pinned blob seeded into 0.8's object store; nothing else changed there.
    tree = tmp_path / "build" / "matrix" / "sglang-0.8"
    assert git(tree, "cat-file", "-t", blob(BASE)) == "blob"
    assert git(tree, "for-each-ref", "--format=%(refname)") == "refs/heads/main\nrefs/tags/upstream"

    # Warm run: trees are reused and reset, results identical.
    before = snapshot(tmp_path / "build" / "matrix" / "sglang-1.0")
    again = matrix.run_matrix(manifest, None, {}, opts, log=lambda *_: None)
    assert matrix_report.to_markdown(matrix_report.to_json(again)) == md
    assert snapshot(tmp_path / "build" / "matrix" / "sglang-1.0") == before


def _matrix_cli(tmp_path: Path, patches: Path, cache: Path, *args: str):
    """`sgl-overlay matrix --offline --no-tests` on the synthetic history, trees under tmp_path."""
    trees = str(tmp_path / "build" / "trees")
    return cli(
        "--patches", str(patches), "--cache", str(cache), "--trees", trees, "matrix", "--offline", "--no-tests", *args
    )


def test_cli_writes_outputs_and_exits_zero_on_conflicts(tmp_path: Path) -> None:
    patches, cache = make_history(tmp_path)
    out = tmp_path / "docs"
    proc = _matrix_cli(tmp_path, patches, cache, "--versions", "0.7,1.0", "--target", "sglang", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "compat-matrix.json").read_text())
    row = {v["version"]: v["cells"] for v in data["targets"]["sglang"]["versions"]}
    assert sorted(row) == ["0.7", "1.0"]
    assert [c["outcome"] for c in row["0.7"].values()] == ["conflict", "offsets"]
    assert row["1.0"][next(iter(row["1.0"]))]["tests"]["result"] == "not run"
    assert (tmp_path / "build" / "matrix" / "sglang-0.7" / ".git").exists()
    assert "not run" in (out / "compat-matrix.md").read_text()


def test_cli_fails_on_a_missing_wheel_but_still_writes(tmp_path: Path) -> None:
    patches, cache = make_history(tmp_path)
    proc = _matrix_cli(tmp_path, patches, cache, "--versions", "sglang=1.0,2.0", "--out", str(tmp_path / "o"))
    assert proc.returncode == 1
    assert "no wheel of sglang 2.0" in proc.stderr
    data = json.loads((tmp_path / "o" / "compat-matrix.json").read_text())
    assert [v.get("error", "") != "" for v in data["targets"]["sglang"]["versions"]] == [False, True]


def test_a_partial_run_keeps_the_other_targets_rows(tmp_path: Path) -> None:
    patches, cache = make_history(tmp_path)
    out = tmp_path / "docs"
    out.mkdir()
    other = {
        "pinned": "0.7.2",
        "source": "registry",
        "note": "",
        "patches": [],
        "variants": [],
        "versions": [{"version": "0.7.2", "wheel": "x.whl", "sha256": "ab" * 32, "cells": {}}],
    }
    (out / "compat-matrix.json").write_text(
        json.dumps({"schema": matrix_report.SCHEMA, "targets": {"sglang-kt": other}})
    )
    proc = cli(
        "--patches",
        str(patches),
        "--cache",
        str(cache),
        "--trees",
        str(tmp_path / "build" / "trees"),
        "matrix",
        "--offline",
        "--no-tests",
        "--versions",
        "1.0",
        "-t",
        "sglang",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "compat-matrix.json").read_text())
    assert list(data["targets"]) == ["sglang", "sglang-kt"]
    assert data["targets"]["sglang-kt"] == other
    md = (out / "compat-matrix.md").read_text()
    assert "## sglang-kt (pinned 0.7.2" in md and "`variants/" in md  # the variant list of sglang


def test_patch_tests_get_the_targets_stand_ins(tmp_path: Path) -> None:
    """`pythonpath` / `pytest_args` of the matrix table reach the patch's test run (e.g. kt_cpu_stubs)."""
    tree = tmp_path / "tree"
    write(tree, "python/sglang/__init__.py", "")
    write(
        tree,
        "test/test_x.py",
        "import os\n\nimport native_stub\n\n\n"
        "def test_x():\n    assert native_stub.OK and os.environ['STUB_PLUGIN'] == '1'\n",
    )
    stubs = tmp_path / "stubs"
    write(stubs, "native_stub.py", "OK = True\n")
    write(stubs, "stub_plugin.py", "import os\n\nos.environ['STUB_PLUGIN'] = '1'\n")
    with_stubs = matrix.run_patch_tests(
        Path(sys.executable), tree, ["test/test_x.py"], extra_path=[stubs], pytest_args=("-p", "stub_plugin")
    )
    assert (with_stubs.result, with_stubs.reason) == ("pass", "1 passed")
    bare = matrix.run_patch_tests(Path(sys.executable), tree, ["test/test_x.py"])
    assert bare.result == "error" and "No module named 'native_stub'" in bare.reason


def test_outcomes_are_the_states_in_the_matrix_words():
    """The matrix's words are the JSON's (schema 2), each the word of one state; every state a
    fresh tree can show has one."""
    assert [o.value for o in Outcome] == ["exact", "offsets", "3-way", "conflict", "absent", "upstream"]
    for state in State:
        if state in (State.APPLIED, State.ELSEWHERE, State.OLDER):  # a commit on top of the base: not in a fresh tree
            with pytest.raises(ValueError):
                Outcome.of(state)
            continue
        for at_pin in (True, False):
            assert Outcome.of(state, at_pin).state == state
    assert Outcome.of(State.APPLICABLE, at_pin=False) == Outcome.OFFSETS
    assert list(matrix.LEGEND) == list(Outcome)


def test_a_file_the_series_adds_is_at_the_pin_for_later_patches(tmp_path: Path) -> None:
    # Patch 1 adds python/sglang/extra.py, patch 2 edits it: on the pinned version patch 2's pre-image
    # of extra.py is patch 1's post-image, with no upstream blob to compare, so patch 2 is exact there.
    cache = tmp_path / "cache"
    cache.mkdir()
    sha = make_wheel(cache / "sglang-1.0-py3-none-any.whl", {"sglang/__init__.py": "", "sglang/model.py": BASE})
    series = tmp_path / "patches" / "sglang"
    pin = {"python/sglang/__init__.py": "", "python/sglang/model.py": BASE}
    p1 = _author(
        tmp_path, "w1", pin, {"python/sglang/model.py": FIXED}, {"python/sglang/extra.py": HOOK}, "add", series
    )
    p2_repo = clone(tmp_path / "w1", tmp_path / "w2")
    write(p2_repo, "python/sglang/extra.py", HOOK.replace("H5 = 5\n", "H5 = 50\n"))
    git(p2_repo, "commit", "-q", "-am", "extra: set H5 to 50")
    git(p2_repo, "format-patch", "-q", "--start-number", "2", "-o", str(series), "HEAD~1..HEAD")
    p2 = next(series.glob("0002-*.patch"))
    (tmp_path / "patches" / "manifest.toml").write_text(
        'schema = 1\n\n[targets.sglang]\nkind = "wheel"\nversion = "1.0"\n'
        'upstream = "https://example.com/sglang"\nrequirement = "sglang==1.0"\n'
        f'wheel = "sglang-1.0-py3-none-any.whl"\nsha256 = "{sha}"\n'
        'layout = { sglang = "python/sglang" }\nproject_name = "sglang"\n'
        f'patches = ["{p1.name}", "{p2.name}"]\n\n'
        f'[targets.sglang.preimages]\n"python/sglang/model.py" = "{blob(BASE)}"\n\n'
        '[targets.sglang.matrix]\nversions = ["1.0"]\n'
    )
    manifest = load_manifest(tmp_path / "patches")
    opts = _options(tmp_path, cache)
    runs = matrix.run_matrix(manifest, None, {}, opts, log=lambda *_: None)
    assert matrix.errors(runs) == []
    (version,) = matrix_report.to_json(runs)["targets"]["sglang"]["versions"]
    assert {p: c["outcome"] for p, c in version["cells"].items()} == {p1.name: "exact", p2.name: "exact"}
