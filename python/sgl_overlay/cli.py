"""`sgl-overlay` command line. Exit codes: 0 ok, 1 failure, 2 usage, 130 interrupted."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sgl_overlay import __version__, doctor, export, fetch, matrix, matrix_report, operations, tree, wheels
from sgl_overlay.checkout import Checkout, detect
from sgl_overlay.errors import OverlayError, UsageError
from sgl_overlay.manifest import Kind, Manifest, load_manifest
from sgl_overlay.patchfile import Series
from sgl_overlay.series import State
from sgl_overlay.verify import verify_tree


def repo_root(patches_dir: Path) -> Path:
    return patches_dir.resolve().parent


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with one line + hint
        self.print_usage(sys.stderr)
        raise UsageError(f"{message}; see `{self.prog} --help`")


def _common(p: argparse.ArgumentParser, checkout: bool = True) -> None:
    p.add_argument("--target", "-t", action="append", metavar="NAME",
                   help="limit to this target (sglang, sglang-kt, sgl-kernel); repeatable")
    if checkout:
        p.add_argument("--checkout", "-C", type=Path, metavar="PATH",
                       help="a git checkout of sgl-project/sglang or kvcache-ai/sglang "
                            "(default: the trees `fetch` laid out under build/trees)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="sgl-overlay",
        description="Fixes for SGLang MoE serving as upstream-shaped patches: fetch the pinned "
                    "upstream trees, apply the patches with `git am -3`, verify, build patched wheels.",
        epilog="Exit codes: 0 ok, 1 failure, 2 usage error, 130 interrupted (tree rolled back).",
    )
    parser.add_argument("--version", action="version", version=f"sgl-overlay {__version__}")
    parser.add_argument("--patches", type=Path, default=None, metavar="DIR",
                        help="the overlay's patches/ folder (default: $SGL_OVERLAY_PATCHES or this checkout's)")
    parser.add_argument("--trees", type=Path, default=None, metavar="DIR",
                        help="where `fetch` lays out targets (default: <repo>/build/trees)")
    parser.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help="wheel download cache (default: <repo>/.cache/wheels)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("fetch", help="download pinned wheels (sha256-verified) and lay out each target as a git tree",
                       description="Download each pinned wheel with pip (cached, sha256-verified) and lay the "
                                   "target out as a git checkout (python/sglang/...), committed once as "
                                   "'upstream <name> <version>' and tagged `upstream`. sgl-kernel is rebuilt "
                                   "from its full-context patches and proven by blob id, with no network.")
    _common(p, checkout=False)
    p.add_argument("--offline", action="store_true", help="use only the cache; fail if a wheel is missing")
    p.add_argument("--force", action="store_true", help="lay trees out again even if they exist")

    p = sub.add_parser("apply", help="apply the patch series with `git am -3` (all or nothing)",
                       description="Check pre-image blob ids, then apply every pending patch with one "
                                   "`git am -3`. On any failure or Ctrl-C the tree is rolled back to exactly "
                                   "what it was. A second apply reports 'already applied' ('already upstream' when "
                                   "the files hold the change without the overlay's commits). A target that is "
                                   "optional in a checkout (a fork's own sgl-kernel/, the moved kernels/aot/ "
                                   "folder) gets one line saying what its patch would do; -t NAME applies it.")
    _common(p)
    p.add_argument("--strict", action="store_true", help="refuse when a pinned pre-image blob differs")

    p = sub.add_parser("check", help="dry run of apply: would it succeed? (exit 1 if not)",
                       description="Report what apply would do, touching nothing; exit 1 when it would fail.")
    _common(p)
    p.add_argument("--strict", action="store_true", help="treat a differing pre-image blob as a failure")

    p = sub.add_parser("status", help="list each patch as applied / applicable / conflicting / already upstream",
                       description="Classify each patch of each target from the files' content: applied or "
                                   "already upstream when they hold its post-image, applicable when they hold its "
                                   "pre-image. Uncommitted working files are read (and said to be); the series is "
                                   "simulated in a private index (the tree is not touched).")
    _common(p)

    p = sub.add_parser("revert", help="remove exactly the overlay's commits",
                       description="Drop the commits made from the overlay's patches whose change the files "
                                   "still hold (reset when they are on top, `git revert` when later commits "
                                   "follow). Says so when no patch is applied. Refuses a dirty tree.")
    _common(p)

    p = sub.add_parser("verify", help="prove laid-out trees equal pinned pre-images + patch post-images",
                       description="For each laid-out tree: the `upstream` commit's pinned files match the "
                                   "manifest's blob ids and HEAD's patched files match the series' final "
                                   "post-image blob ids.")
    _common(p, checkout=False)

    p = sub.add_parser("export", help="(maintainers) write a laid-out tree's commits back as the patch series",
                       description="Re-export the commits on top of `upstream` in build/trees/<target> with "
                                   "`git format-patch --full-index` (full-file context for sgl-kernel) into "
                                   "patches/<target>/. The file names must match the manifest's list.")
    _common(p, checkout=False)

    p = sub.add_parser("wheels", help="build patched wheels (local version label) into a folder",
                       description="From the verified trees: unpack each pinned wheel, write the patched "
                                   "files, repack with `wheel pack --local-version` (RECORD regenerated, tags "
                                   "kept). With --checkout: upstream's own build of the checkout's python/ "
                                   "after the series is applied there.")
    _common(p)
    p.add_argument("--out", type=Path, default=Path("dist"), help="output folder (default: dist)")

    p = sub.add_parser("doctor", help="check which fixes an environment has; exit 1 when one is missing",
                       description="Inspect an installed environment: sglang / sglang-kt versions and whether "
                                   "each patch's files are installed (blob ids vs the patches' post-images), "
                                   "whether sgl-kernel-ext is installed and wired in, and with a GPU a live "
                                   "N=16 copy. Prints the command that fixes what is missing.")
    p.add_argument("--python", default=doctor.default_python(), help="interpreter of the environment to inspect")
    p.add_argument("--dist", type=Path, default=None, help="where the patched wheels are (default: <repo>/dist)")
    p.add_argument("--site", type=Path, default=None,
                   help="also look in this folder (an install made with `pip install --target DIR`)")
    p.add_argument("--no-live", action="store_true", help="skip the live GPU copy")

    p = sub.add_parser("matrix", help="which released versions each patch applies to, and whether its tests pass",
                       description="For each target and each version of its range ([targets.<t>.matrix] versions "
                                   "in the manifest, or --versions): download the version's wheel (cached, sha256 "
                                   "recorded), lay it out under build/matrix/<target>-<version>, classify every "
                                   "patch (exact / offsets / 3way / conflict / absent / upstream), apply the "
                                   "applicable ones with `git am -3` and run each patch's own tests. Writes "
                                   "compat-matrix.md and compat-matrix.json. Conflicts and failing tests are "
                                   "results: only tool errors exit non-zero.")
    _common(p, checkout=False)
    p.add_argument("--versions", action="append", metavar="[T=]V1,V2",
                   help="versions to cover instead of the manifest's; T=... per target, repeatable")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: <repo>/docs)")
    p.add_argument("--no-tests", action="store_true", help="classify only; do not run the patches' tests")
    p.add_argument("--offline", action="store_true", help="use only the wheel cache")
    return parser


def _checkouts(args: argparse.Namespace, manifest: Manifest, trees: Path) -> list[Checkout]:
    if getattr(args, "checkout", None) is not None:
        return [detect(args.checkout, manifest, args.target)]
    result = []
    for target in manifest.select(args.target):
        path = trees / target.name
        if not tree.is_ready(path, target):
            raise OverlayError(f"no tree for {target.name} at {path}; run `sgl-overlay fetch` first")
        result.append(detect(path, manifest))
    return result


def _print_status(co: Checkout) -> bool:
    """Each patch's state, read from the working files; False when a required one cannot go in."""
    ok = True
    sv = operations.survey(co, working_files=True)
    if sv.content.uncommitted:
        touched = {co.placement(name).path(p) for name, rows in sv.rows.items() for r in rows
                   for p in r.patch.touched()}
        ours = [p for p in sv.content.uncommitted if p in touched]
        first = (ours or list(sv.content.uncommitted))[0]
        print(f"note: {len(sv.content.uncommitted)} file(s) have uncommitted changes "
              f"({len(ours)} touched by the patches; first: {first}): the states below read the working "
              "files, not HEAD; apply and revert refuse until they are committed or stashed")
    for warning in operations.preimage_warnings(co, sv):
        print(f"warning: {warning}")
    for target in co.targets:
        name, rows = target.name, sv.rows[target.name]
        optional = co.optional.get(name)
        note = f" (optional here: {optional}; only `-t {name}` applies it)" if optional else ""
        print(f"{name} in {co.path}{note}:")
        for r in rows:
            extra = r.commit[:12] if r.commit else r.detail
            print(f"  {r.state.value:<20} {r.patch.label}" + (f"  ({extra})" if extra else ""))
            ok &= optional is not None or r.state not in (State.CONFLICTING, State.ABSENT)
    return ok


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    manifest = load_manifest(args.patches)
    root = repo_root(manifest.path.parent)
    trees = (args.trees or root / "build" / "trees").resolve()
    cache = (args.cache or root / ".cache" / "wheels").resolve()

    if args.command == "fetch":
        for target in manifest.select(args.target):
            if target.kind == Kind.WHEEL:
                wheel, series = fetch.fetch_wheels(target, cache, args.offline)[0], None
            else:
                wheel, series = None, Series.read(target)
            print(tree.lay_out(target, trees / target.name, wheel, series, force=args.force), flush=True)
        return 0
    if args.command == "doctor":
        lines, ok = doctor.doctor(manifest, args.python, (args.dist or root / "dist").resolve(), not args.no_live,
                                  args.site)
        print("\n".join(lines))
        return 0 if ok else 1
    if args.command == "wheels":
        out_dir = args.out.resolve()
        if args.checkout is not None:
            co = detect(args.checkout, manifest, args.target)
            print(f"built {wheels.build_from_checkout(co, out_dir)}")
            return 0
        for target in manifest.select(args.target):
            if target.kind != Kind.WHEEL:
                continue
            series = Series.read(target)
            for wheel in fetch.fetch_wheels(target, cache, offline=True):
                made = wheels.build_patched_wheel(series, wheel, trees / target.name, out_dir, manifest.local_version)
                print(f"built {made}", flush=True)
        return 0
    if args.command == "matrix":
        opts = matrix.Options(root=root, cache=cache, build=trees.parent / "matrix",
                              run_tests=not args.no_tests, offline=args.offline)
        versions = matrix.parse_versions(args.versions, args.target)
        runs = matrix.run_matrix(manifest, args.target, versions, opts)
        for path in matrix_report.write_outputs(runs, (args.out or root / "docs").resolve(), list(manifest.targets)):
            print(f"wrote {path}")
        problems = matrix.errors(runs)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1 if problems else 0
    if args.command == "export":
        for target in manifest.select(args.target):
            for line in export.export_series(target, trees / target.name):
                print(line)
        return 0
    if args.command == "verify":
        problems = []
        for co in _checkouts(args, manifest, trees):
            for target in co.targets:
                found = verify_tree(co.path, co.series[target.name])
                problems += found
                if not found:
                    print(f"verified {target.name}: base matches pins, {len(target.patches)} patch(es) "
                          "give the exact post-images")
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 1 if problems else 0
    ok = True
    for co in _checkouts(args, manifest, trees):
        if args.command == "apply":
            for line in operations.apply(co, args.strict):
                print(line, flush=True)
        elif args.command == "revert":
            for line in operations.revert(co):
                print(line, flush=True)
        elif args.command == "status":
            ok &= _print_status(co)
        elif args.command == "check":
            try:
                to_apply, sv, warnings = operations.check(co, args.strict)
            except OverlayError as exc:
                print(f"would fail: {exc}")
                ok = False
                continue
            for w in warnings:
                print(f"warning: {w}")
            print(f"ok: {len(to_apply)} patch(es) would apply to {co.path}" if to_apply
                  else f"ok: {operations.already_in(co, sv)}")
            for line in operations.notes(co, sv):
                print(line)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except OverlayError as exc:
        print(f"sgl-overlay: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("sgl-overlay: interrupted", file=sys.stderr)
        return operations.INTERRUPTED_EXIT


if __name__ == "__main__":
    sys.exit(main())
