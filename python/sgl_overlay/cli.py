"""`sgl-overlay` command line: one function per command. Exit codes: 0 ok, 1 failure, 2 usage,
130 interrupted."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sgl_overlay import __version__, doctor, export, fetch, matrix, matrix_report, operations, tree, wheels
from sgl_overlay.checkout import Checkout, detect
from sgl_overlay.errors import OverlayError, UsageError
from sgl_overlay.manifest import Kind, Manifest, load_manifest
from sgl_overlay.patchfile import Series
from sgl_overlay.series import State
from sgl_overlay.verify import verify_tree

Option = tuple[tuple[str, ...], dict]


def opt(*flags: str, **kwargs) -> Option:
    """One command-line option of a command: `add_argument`'s arguments."""
    return flags, kwargs


@dataclass(frozen=True)
class Command:
    func: Callable[[argparse.Namespace, Context], int]
    help: str  # one line in `sgl-overlay --help`
    description: str  # what the command does, in `sgl-overlay <command> --help`
    options: tuple[Option, ...]
    targets: bool  # takes --target
    checkout: bool  # takes --checkout


COMMANDS: dict[str, Command] = {}  # in the order `--help` lists them


def command(help: str, description: str, *options: Option, targets: bool = True, checkout: bool = False):
    """Register `cmd_<name>` as the command <name>."""

    def register(func: Callable[[argparse.Namespace, Context], int]) -> Callable[[argparse.Namespace, Context], int]:
        COMMANDS[func.__name__.removeprefix("cmd_")] = Command(func, help, description, options, targets, checkout)
        return func

    return register


@dataclass(frozen=True)
class Context:
    """What every command gets: the manifest and the folders the global options name."""

    manifest: Manifest
    root: Path  # the repository the patches/ folder sits in
    trees: Path
    cache: Path

    def checkouts(self, args: argparse.Namespace) -> list[Checkout]:
        """`--checkout`, else the laid-out tree of each selected target."""
        if getattr(args, "checkout", None) is not None:
            return [detect(args.checkout, self.manifest, args.target)]
        result = []
        for target in self.manifest.select(args.target):
            path = self.trees / target.name
            if not tree.is_ready(path, target):
                raise OverlayError(f"no tree for {target.name} at {path}; run `sgl-overlay fetch` first")
            result.append(detect(path, self.manifest))
        return result


def _python_version(text: str) -> str:
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Python version like 3.12")
    return text


@command(
    "download the pinned wheels and lay each target out as a git tree",
    "Download each pinned wheel (cached, sha256 checked) and lay the target out under build/trees/<target> as a "
    "git checkout with one commit, tagged `upstream`. sgl-kernel's pre-images come from its full-context patch, "
    "with no network.",
    opt("--offline", action="store_true", help="use only the cache; fail if a wheel is missing"),
    opt("--force", action="store_true", help="lay trees out again even if they exist"),
)
def cmd_fetch(args: argparse.Namespace, ctx: Context) -> int:
    for target in ctx.manifest.select(args.target):
        if target.kind == Kind.WHEEL:
            wheel, series = fetch.fetch_wheels(target, ctx.cache, args.offline)[0], None
        else:
            wheel, series = None, Series.read(target)
        print(tree.lay_out(target, ctx.trees / target.name, wheel, series, force=args.force), flush=True)
    return 0


@command(
    "apply the patch series (all or nothing)",
    "Apply every pending patch with one `git am -3`; on a failure or Ctrl-C the tree is rolled back. Patches "
    "already in are reported, not applied again. A target that is optional in a checkout (a fork's own "
    "sgl-kernel/, a moved folder) gets one line saying what its patch would do; -t NAME applies it.",
    opt("--strict", action="store_true", help="refuse when a pinned pre-image blob differs"),
    checkout=True,
)
def cmd_apply(args: argparse.Namespace, ctx: Context) -> int:
    for co in ctx.checkouts(args):
        for line in operations.apply(co, args.strict):
            print(line, flush=True)
    return 0


@command(
    "say what apply would do, touching nothing (exit 1 if it would fail)",
    "Report what apply would do, touching nothing; exit 1 when it would fail.",
    opt("--strict", action="store_true", help="treat a differing pre-image blob as a failure"),
    checkout=True,
)
def cmd_check(args: argparse.Namespace, ctx: Context) -> int:
    ok = True
    for co in ctx.checkouts(args):
        try:
            to_apply, sv, warnings = operations.check(co, args.strict)
        except OverlayError as exc:
            print(f"would fail: {exc}")
            ok = False
            continue
        for w in warnings:
            print(f"warning: {w}")
        print(
            f"ok: {len(to_apply)} patch(es) would apply to {co.path}"
            if to_apply
            else f"ok: {operations.already_in(co, sv)}"
        )
        for line in operations.notes(co, sv):
            print(line)
    return 0 if ok else 1


@command(
    "list each patch's state in a checkout",
    "List each patch as applied, applicable, applicable (3-way), conflicting, already upstream or target file "
    "absent, read from the files (uncommitted working files included); the tree is not touched.",
    checkout=True,
)
def cmd_status(args: argparse.Namespace, ctx: Context) -> int:
    ok = True
    for co in ctx.checkouts(args):
        ok &= _print_status(co)
    return 0 if ok else 1


def _print_status(co: Checkout) -> bool:
    """Each patch's state, read from the working files; False when a required one cannot go in."""
    ok = True
    sv = operations.survey(co, working_files=True)
    if sv.content.uncommitted:
        touched = {
            co.placement(name).path(p) for name, rows in sv.rows.items() for r in rows for p in r.patch.touched()
        }
        ours = [p for p in sv.content.uncommitted if p in touched]
        first = (ours or list(sv.content.uncommitted))[0]
        print(
            f"note: {len(sv.content.uncommitted)} file(s) have uncommitted changes "
            f"({len(ours)} touched by the patches; first: {first}): the states below read the working "
            "files, not HEAD; apply and revert refuse until they are committed or stashed"
        )
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


@command(
    "remove exactly the overlay's commits",
    "Remove the commits made from the overlay's patches (reset when they are on top, `git revert` otherwise); "
    "refuses a dirty tree.",
    checkout=True,
)
def cmd_revert(args: argparse.Namespace, ctx: Context) -> int:
    for co in ctx.checkouts(args):
        for line in operations.revert(co):
            print(line, flush=True)
    return 0


@command(
    "prove each laid-out tree is the pinned pre-images plus the patches",
    "Check that each laid-out tree's `upstream` commit holds the pinned blobs and HEAD the series' final "
    "post-image blobs.",
)
def cmd_verify(args: argparse.Namespace, ctx: Context) -> int:
    problems = []
    for co in ctx.checkouts(args):
        for target in co.targets:
            found = verify_tree(co.path, co.series[target.name])
            problems += found
            if not found:
                print(
                    f"verified {target.name}: base matches pins, {len(target.patches)} patch(es) "
                    "give the exact post-images"
                )
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 1 if problems else 0


@command(
    "(maintainers) write a laid-out tree's commits back as the series",
    "Write the commits on top of `upstream` in build/trees/<target> to patches/<target>/ with "
    "`git format-patch --full-index`; the file names must match the manifest's list.",
)
def cmd_export(args: argparse.Namespace, ctx: Context) -> int:
    for target in ctx.manifest.select(args.target):
        for line in export.export_series(target, ctx.trees / target.name):
            print(line)
    return 0


@command(
    "build patched wheels into a folder",
    "Build the patched twin of each pinned wheel from the verified tree (same tags, local version label). With "
    "--checkout: upstream's own build of the checkout's python/, once the series is in.",
    opt("--out", type=Path, default=Path("dist"), help="output folder (default: dist)"),
    opt(
        "--print-names",
        action="store_true",
        help="build nothing; print one line per pinned wheel: target, "
        "Python tag, stock wheel, patched wheel, pip options that install it with its own tags",
    ),
    opt(
        "--for-python",
        metavar="X.Y",
        type=_python_version,
        help="with --print-names: only the wheel pip picks for this Python",
    ),
    checkout=True,
)
def cmd_wheels(args: argparse.Namespace, ctx: Context) -> int:
    out_dir = args.out.resolve()
    if args.print_names:
        python = tuple(int(p) for p in args.for_python.split(".")) if args.for_python else None
        lines = wheels.print_names(
            ctx.manifest.select(args.target), ctx.cache, out_dir, ctx.manifest.local_version, python
        )
        print("\n".join(lines))
        return 0
    if args.checkout is not None:
        print(f"built {wheels.build_from_checkout(detect(args.checkout, ctx.manifest, args.target), out_dir)}")
        return 0
    for target in ctx.manifest.select(args.target):
        if target.kind != Kind.WHEEL:
            continue
        series = Series.read(target)
        for wheel in fetch.fetch_wheels(target, ctx.cache, offline=True):
            made = wheels.build_patched_wheel(
                series, wheel, ctx.trees / target.name, out_dir, ctx.manifest.local_version
            )
            print(f"built {made}", flush=True)
    return 0


@command(
    "check which fixes an environment has (exit 1 when one is missing)",
    "Check an installed environment: each patch's files against its post-image blobs, sgl-kernel-ext installed "
    "and wired in, and with a GPU a live N=16 copy. Prints the command that fixes what is missing.",
    opt("--python", default=doctor.default_python(), help="interpreter of the environment to inspect"),
    opt("--dist", type=Path, default=None, help="where the patched wheels are (default: <repo>/dist)"),
    opt(
        "--site",
        type=Path,
        default=None,
        help="also look in this folder (an install made with `pip install --target DIR`)",
    ),
    opt("--no-live", action="store_true", help="skip the live GPU copy"),
    targets=False,
)
def cmd_doctor(args: argparse.Namespace, ctx: Context) -> int:
    dist = (args.dist or ctx.root / "dist").resolve()
    lines, ok = doctor.doctor(ctx.manifest, args.python, dist, not args.no_live, args.site)
    print("\n".join(lines))
    return 0 if ok else 1


@command(
    "which released versions each patch applies to, and its tests there",
    "Try each patch on each released version of its target and run its own tests there; write compat-matrix.md "
    "and compat-matrix.json. Conflicts and failing tests are results: only tool errors exit non-zero. "
    "docs/DESIGN.md explains the method.",
    opt(
        "--versions",
        action="append",
        metavar="[T=]V1,V2",
        help="versions to cover instead of the manifest's; T=... per target, repeatable",
    ),
    opt("--out", type=Path, default=None, help="output folder (default: <repo>/docs)"),
    opt("--no-tests", action="store_true", help="classify only; do not run the patches' tests"),
    opt("--offline", action="store_true", help="use only the wheel cache"),
)
def cmd_matrix(args: argparse.Namespace, ctx: Context) -> int:
    opts = matrix.Options(
        root=ctx.root,
        cache=ctx.cache,
        build=ctx.trees.parent / "matrix",
        run_tests=not args.no_tests,
        offline=args.offline,
    )
    versions = matrix.parse_versions(args.versions, args.target)
    runs = matrix.run_matrix(ctx.manifest, args.target, versions, opts)
    out = (args.out or ctx.root / "docs").resolve()
    for path in matrix_report.write_outputs(runs, out, list(ctx.manifest.targets)):
        print(f"wrote {path}")
    problems = matrix.errors(runs)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with one line + hint
        self.print_usage(sys.stderr)
        raise UsageError(f"{message}; see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="sgl-overlay",
        description="Fixes for SGLang MoE serving as upstream-shaped patches: fetch the pinned upstream trees, "
        "apply the patches with `git am -3`, verify, build patched wheels.",
        epilog="Exit codes: 0 ok, 1 failure, 2 usage error, 130 interrupted (tree rolled back).",
    )
    parser.add_argument("--version", action="version", version=f"sgl-overlay {__version__}")
    for flags, kwargs in GLOBAL_OPTIONS:
        parser.add_argument(*flags, **kwargs)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.description)
        p.set_defaults(func=cmd.func)
        options = (TARGET_OPTION,) * cmd.targets + (CHECKOUT_OPTION,) * cmd.checkout + cmd.options
        for flags, kwargs in options:
            p.add_argument(*flags, **kwargs)
    return parser


GLOBAL_OPTIONS = (
    opt(
        "--patches",
        type=Path,
        metavar="DIR",
        help="the overlay's patches/ folder (default: $SGL_OVERLAY_PATCHES or this checkout's)",
    ),
    opt("--trees", type=Path, metavar="DIR", help="where `fetch` lays out targets (default: <repo>/build/trees)"),
    opt("--cache", type=Path, metavar="DIR", help="wheel download cache (default: <repo>/.cache/wheels)"),
)
TARGET_OPTION = opt(
    "--target",
    "-t",
    action="append",
    metavar="NAME",
    help="limit to this target (sglang, sglang-kt, sgl-kernel); repeatable",
)
CHECKOUT_OPTION = opt(
    "--checkout",
    "-C",
    type=Path,
    metavar="PATH",
    help="a git checkout of sgl-project/sglang or kvcache-ai/sglang (default: the trees `fetch` "
    "laid out under build/trees)",
)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    manifest = load_manifest(args.patches)
    root = manifest.path.parent.parent
    ctx = Context(
        manifest,
        root,
        (args.trees or root / "build" / "trees").resolve(),
        (args.cache or root / ".cache" / "wheels").resolve(),
    )
    return args.func(args, ctx)


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
