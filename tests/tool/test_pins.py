"""The series is the only source of pre-images: the manifest's `preimages` tables are a lock of it."""

from __future__ import annotations

from pathlib import Path

from sgl_overlay.engine.manifest import load_manifest
from sgl_overlay.engine.series import Series
from synth import HOOK_PY, MODEL_PY, blob, cli, make_overlay


def test_series_gives_each_first_touch_blob(tmp_path: Path) -> None:
    """model.py is touched by both patches: its pre-image is the first one's `index` blob, not the second's."""
    ov = make_overlay(tmp_path)
    series = Series.read(load_manifest(ov.patches).get("sglang"))
    assert series.preimages() == {"python/sglang/model.py": blob(MODEL_PY), "python/sglang/hook.py": blob(HOOK_PY)}
    assert series.patches[1].changes[0].old_blob != blob(MODEL_PY)  # the second patch starts from the first's


def test_a_table_that_disagrees_is_refused_and_pins_rewrites_it(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    manifest = ov.patches / "manifest.toml"
    good = manifest.read_text()
    wrong = "f" * 40
    manifest.write_text(good.replace(blob(HOOK_PY), wrong) + "\n# a comment that stays\n")
    proc = cli("--patches", str(ov.patches), "status", "--checkout", str(ov.upstream))
    assert proc.returncode == 1, proc.stdout
    assert proc.stderr.strip() == (
        "sgl-overlay: error: patches/manifest.toml [targets.sglang.preimages] disagrees with the series at "
        f"python/sglang/hook.py (manifest {wrong}, series {blob(HOOK_PY)}); rewrite it from the series with "
        "`sgl-overlay pins`"
    )
    proc = cli("--patches", str(ov.patches), "pins")
    assert proc.returncode == 0 and proc.stdout.strip() == f"pins sglang: 2 pre-image(s) written to {manifest}"
    assert manifest.read_text() == good + "\n# a comment that stays\n"
    assert cli("--patches", str(ov.patches), "pins").stdout.strip() == f"pins: {manifest} already matches the series"
    assert cli("--patches", str(ov.patches), "status", "--checkout", str(ov.upstream)).returncode == 0
