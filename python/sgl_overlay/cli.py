"""`sgl-overlay` command line: one function per command, its docstring the command's help.
Exit codes: 0 ok, 1 failure, 2 usage, 130 interrupted.

What every command needs (the manifest, the series, a checkout) is imported here; a module only some commands
use (fetch, verify, wheels, doctor, export, prs, matrix) is imported by those commands, so that `status`,
`apply` and `revert` start without loading it."""

from __future__ import annotations

import argparse
import errno
import io
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sgl_overlay import __version__
from sgl_overlay.builds import tree
from sgl_overlay.builds.places import Places, places
from sgl_overlay.engine import gitutil, operations, scratch, subproc, transaction
from sgl_overlay.engine.checkout import Checkout, detect
from sgl_overlay.engine.manifest import Kind, Manifest, Target, load_manifest
from sgl_overlay.engine.series import Series
from sgl_overlay.errors import Interrupted, OverlayError, UsageError
from sgl_overlay.maint import pins


def say(line: str) -> None:
    """A progress line, out before the next slow step."""
    print(line, flush=True)


@dataclass(frozen=True)
class Context:
    """What every command gets: the manifest and the folders the global options name."""

    manifest: Manifest
    at: Places  # the repository the patches/ folder sits in, the trees, the wheel cache
    series: dict[str, Series]  # those the start of the run read (pins.check), by target name

    @property
    def root(self) -> Path:
        return self.at.root

    @property
    def trees(self) -> Path:
        return self.at.trees

    @property
    def cache(self) -> Path:
        return self.at.cache

    def series_of(self, target: Target) -> Series:
        return self.series.get(target.name) or Series.read(target)

    def checkouts(self, args: argparse.Namespace) -> list[Checkout]:
        """`--checkout`, else the laid-out tree of each selected target."""
        if getattr(args, "checkout", None) is not None:
            return [detect(args.checkout, self.manifest, args.target, self.series)]
        result = []
        for target in self.manifest.select(args.target):
            path = self.trees / target.name
            tree.require_ready(path, target)
            result.append(detect(path, self.manifest, read=self.series))
        return result


def cmd_fetch(args: argparse.Namespace, ctx: Context) -> int:
    """Download the pinned wheels and lay each target out as a git tree.

    Wheels are cached and sha256-checked; build/trees/<target> gets one commit, tagged `upstream`. sgl-kernel's
    pre-images come from its full-context patch, with no network."""
    from sgl_overlay.builds import fetch

    for target in ctx.manifest.select(args.target):
        series = ctx.series_of(target)
        wheel = fetch.fetch_wheels(target, ctx.cache, args.offline, say)[0] if target.kind == Kind.WHEEL else None
        say(tree.lay_out(target, ctx.trees / target.name, wheel, series, force=args.force).line())
    return 0


def cmd_apply(args: argparse.Namespace, ctx: Context) -> int:
    """Apply the patch series, all or nothing (a failure or Ctrl-C rolls the tree back).

    Patches already in are reported, not applied again. An optional target (a fork's own sgl-kernel/, a moved
    folder) gets one line saying what its patch would do; -t NAME applies it. --abort rolls back what a killed
    apply or revert left (its journal in the git directory) and removes its lock."""
    if args.abort:
        return _change_each(args, ctx, lambda co: [transaction.abort(co.path).line()])
    return _change_each(args, ctx, lambda co: operations.apply(co, args.strict).lines())


def _change_each(args: argparse.Namespace, ctx: Context, change: Callable[[Checkout], list[str]]) -> int:
    """Change each checkout in turn, printing its report before the next (a signal then stops before it)."""
    for co in ctx.checkouts(args):
        for line in change(co):
            say(line)
        subproc.release()
    return 0


def _print_each(reports: Iterator[operations.CheckReport | operations.StatusReport]) -> int:
    """Print each checkout's report as it is read; exit 1 when one of them failed."""
    ok = True
    for report in reports:
        say("\n".join(report.lines()))
        ok &= report.ok
    return 0 if ok else 1


def cmd_check(args: argparse.Namespace, ctx: Context) -> int:
    """Say what apply would do, touching nothing (exit 1 if it would fail)."""
    return _print_each(operations.check(co, args.strict) for co in ctx.checkouts(args))


def cmd_status(args: argparse.Namespace, ctx: Context) -> int:
    """List each patch's state in a checkout (exit 1 if a required one cannot go in).

    Each patch is applied, applied (older), applicable, applicable (3-way), conflicting, in (other commit),
    already upstream or target file absent, read from the files (uncommitted working files included); the tree is not touched.
    Beside it: where upstream stands and when the series can drop it (`drop: upstream since X` once the
    manifest's applied_upstream names the release X that holds it)."""
    return _print_each(operations.status(co) for co in ctx.checkouts(args))


def cmd_revert(args: argparse.Namespace, ctx: Context) -> int:
    """Remove exactly the overlay's commits (reset when on top, else `git revert`); refuses a dirty tree."""
    return _change_each(args, ctx, lambda co: operations.revert(co).lines())


def cmd_verify(args: argparse.Namespace, ctx: Context) -> int:
    """Prove each laid-out tree is the pinned pre-images (`upstream`) plus the patches (HEAD)."""
    from sgl_overlay.builds.verify import verify_tree

    problems = []
    for co in ctx.checkouts(args):
        for target in co.targets:
            found = verify_tree(co.path, co.series[target.name])
            problems += found
            if not found:
                patches = len(target.patches)
                print(f"verified {target.name}: base matches pins, {patches} patch(es) give the exact post-images")
    for p in problems:
        print(f"error: {p.line()}", file=sys.stderr)
    return 1 if problems else 0


def cmd_export(args: argparse.Namespace, ctx: Context) -> int:
    """(maintainers) Write the commits on `upstream` in build/trees/<target> back to patches/<target>/."""
    from sgl_overlay.maint import export

    for target in ctx.manifest.select(args.target):
        for line in export.lines(export.export_series(target, ctx.trees / target.name)):
            print(line)
    written = pins.rewrite(
        load_manifest(ctx.manifest.path.parent), ctx.manifest.select(args.target) if args.target else None
    )
    print("\n".join(pins.lines(ctx.manifest.path, written)))
    return 0


def cmd_prs(args: argparse.Namespace, ctx: Context) -> int:
    """(maintainers) Write each patch as the pull request upstream would receive: a normal-context mbox and PR.md.

    Generated from the verified laid-out trees, by you (git's user.name and user.email where it runs), without
    the overlay's `Origin:` / `Bug:` / `Forwarded:` / `Drop-when:` trailers and `base-commit:`; PR.md is the
    patch's `<stem>.pr.md`, checked against upstream's template, or REVIEW.md where it is a review of an open pull
    request (`Origin: other, <URL>`; the line names the command that posts it). A port (`Origin: backport, ...`)
    is listed, not written. A missing or malformed description writes nothing. Layout: OUT/<target>/<patch stem>/{0001-*.patch,PR.md or REVIEW.md}."""
    from sgl_overlay.maint import prs

    by = prs.sender(Path.cwd())
    out = (args.out or ctx.trees.parent / "prs").resolve()
    for line in prs.lines(prs.export_prs(ctx.manifest.select(args.target), ctx.trees, out, by)):
        print(line)
    return 0


def cmd_pins(args: argparse.Namespace, ctx: Context) -> int:
    """(maintainers) Rewrite the manifest's `preimages` tables from the series (each file's first-touch blob).

    Every other command refuses a table the series disagrees with; `export` rewrites it too."""
    written = pins.rewrite(ctx.manifest, ctx.manifest.select(args.target) if args.target else None)
    print("\n".join(pins.lines(ctx.manifest.path, written)))
    return 0


def cmd_wheels(args: argparse.Namespace, ctx: Context) -> int:
    """Build patched wheels into a folder.

    Each pinned wheel's twin is built from the verified tree (same tags, a local version label); with
    --checkout, upstream's own build of the checkout's python/, once the series is in."""
    from sgl_overlay.builds import doctor, fetch, wheels

    out_dir, local = (args.out or doctor.default_dist(ctx.root)).resolve(), ctx.manifest.local_version
    if args.print_names:
        rows = wheels.print_names(ctx.manifest.select(args.target), ctx.cache, out_dir, local, args.for_python)
        print("\n".join(" ".join(fields) for fields in rows))  # one line of fields per wheel, for scripts
        return 0
    if args.checkout is not None:
        co = detect(args.checkout, ctx.manifest, args.target, ctx.series)
        print(f"built {wheels.build_from_checkout(co, out_dir, local)}")
        return 0
    for target in ctx.manifest.select(args.target):
        if target.kind != Kind.WHEEL:
            continue
        series = ctx.series_of(target)
        for wheel in fetch.fetch_wheels(target, ctx.cache, True, say):
            say(f"built {wheels.build_patched_wheel(series, wheel, ctx.trees / target.name, out_dir, local)}")
    return 0


def cmd_doctor(args: argparse.Namespace, ctx: Context) -> int:
    """Check which fixes an environment has (exit 1 when one is missing).

    Installed files against the post-image blobs, the installed sgl_kernel's lengths beside what the DeepGEMM
    runner sends, a live N=16 copy on a GPU; prints the command that fixes what is missing."""
    from sgl_overlay.builds import doctor

    dist = (args.dist or doctor.default_dist(ctx.root)).resolve()
    report = doctor.doctor(ctx.manifest, ctx.series_of, args.python, dist, not args.no_live, args.site)
    print("\n".join(doctor.report_lines(report)))
    return 0 if report.ok else 1


def cmd_matrix(args: argparse.Namespace, ctx: Context) -> int:
    """Which released versions each patch applies to, and its tests there.

    Writes compat-matrix.md and .json; conflicts and failing tests are results, only tool errors exit non-zero.
    docs/DESIGN.md explains the method."""
    from sgl_overlay.maint import matrix, matrix_report

    build = ctx.trees.parent / "matrix"
    opts = matrix.Options(ctx.root, ctx.cache, build, run_tests=not args.no_tests, offline=args.offline)
    versions = matrix.parse_versions(args.versions, args.target)
    runs = matrix.run_matrix(ctx.manifest, args.target, versions, opts, say)
    out = (args.out or ctx.root / "docs").resolve()
    for path in matrix_report.write_outputs(runs, out, list(ctx.manifest.targets)):
        print(f"wrote {path}")
    problems = matrix.errors(runs)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def _python_version(text: str) -> tuple[int, int]:
    major, dot, minor = text.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Python version like 3.12")
    return int(major), int(minor)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with one line + hint
        self.print_usage(sys.stderr)
        raise UsageError(f"{message}; see `{self.prog} --help`")


Command = Callable[[argparse.Namespace, Context], int]
GLOBAL_DIRS = {
    "--patches": "the overlay's patches/ folder (default: $SGL_OVERLAY_PATCHES or this checkout's)",
    "--trees": "where `fetch` lays out targets (default: build/trees beside patches/; installed from the wheel: "
    "$XDG_CACHE_HOME/sgl-overlay/trees, else ~/.cache/sgl-overlay/trees)",
    "--cache": "wheel download cache (default: .cache/wheels beside patches/; installed from the wheel: "
    "$XDG_CACHE_HOME/sgl-overlay/wheels, else ~/.cache/sgl-overlay/wheels)",
}


def _add(
    commands: argparse._SubParsersAction, func: Command, targets: bool = True, checkout: bool = False
) -> argparse.ArgumentParser:
    """The sub-parser of `cmd_<name>`: its docstring's first line is the help, all of it the description."""
    doc = func.__doc__ or ""
    p = commands.add_parser(func.__name__.removeprefix("cmd_"), help=doc.partition("\n")[0], description=doc)
    p.set_defaults(func=func)
    for flag in GLOBAL_DIRS:  # also accepted after the command
        p.add_argument(flag, type=Path, metavar="DIR", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    if targets:
        p.add_argument(
            "--target",
            "-t",
            action="append",
            metavar="NAME",
            help="limit to this target (sglang, sglang-kt, sgl-kernel); repeatable",
        )
    if checkout:
        p.add_argument(
            "--checkout",
            "-C",
            type=Path,
            metavar="PATH",
            help="a git checkout of sgl-project/sglang or kvcache-ai/sglang (default: the trees `fetch` "
            "laid out under build/trees)",
        )
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="sgl-overlay",
        description="Fixes for SGLang MoE serving as upstream-shaped patches: fetch the pinned upstream trees, "
        "apply the patches with `git am -3`, verify, build patched wheels.",
        epilog="Exit codes: 0 ok, 1 failure, 2 usage error, 130 interrupted (the change under way rolled back; a "
        "Ctrl-C or SIGTERM after it completed leaves it standing, says so in one line and exits 0).",
    )
    parser.add_argument("--version", action="version", version=f"sgl-overlay {__version__}")
    for flag, what in GLOBAL_DIRS.items():
        parser.add_argument(flag, type=Path, metavar="DIR", help=what)
    _add_commands(parser.add_subparsers(dest="command", required=True, parser_class=Parser))
    return parser


def _add_commands(commands: argparse._SubParsersAction) -> None:
    """Every command, in the order `--help` lists them, with its own options."""
    p = _add(commands, cmd_fetch)
    p.add_argument("--offline", action="store_true", help="use only the cache; fail if a wheel is missing")
    p.add_argument("--force", action="store_true", help="lay trees out again even if they exist")
    p = _add(commands, cmd_apply, checkout=True)
    p.add_argument("--strict", action="store_true", help="refuse when a pinned pre-image blob differs")
    p.add_argument("--abort", action="store_true", help="roll back what a killed apply or revert left, remove its lock")
    p = _add(commands, cmd_check, checkout=True)
    p.add_argument("--strict", action="store_true", help="treat a differing pre-image blob as a failure")
    _add(commands, cmd_status, checkout=True)
    _add(commands, cmd_revert, checkout=True)
    _add(commands, cmd_verify)
    _add(commands, cmd_export)
    _add(commands, cmd_pins)
    p = _add(commands, cmd_prs)
    p.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: prs/ beside the trees' folder)")

    p = _add(commands, cmd_wheels, checkout=True)
    p.add_argument("--out", type=Path, help="output folder (default: where doctor looks: <repo>/dist, else ./dist)")
    p.add_argument(
        "--print-names",
        action="store_true",
        help="build nothing; print one line per pinned wheel: target, Python tag, stock wheel, patched wheel, "
        "pip options that install it with its own tags",
    )
    p.add_argument(
        "--for-python",
        metavar="X.Y",
        type=_python_version,
        help="with --print-names: only the wheel pip picks for this Python",
    )

    p = _add(commands, cmd_doctor, targets=False)
    p.add_argument("--python", default=sys.executable, help="interpreter of the environment to inspect")
    p.add_argument("--dist", type=Path, help="where the patched wheels are (default: <repo>/dist, else ./dist)")
    p.add_argument(
        "--site", type=Path, help="also look in this folder (an install made with `pip install --target DIR`)"
    )
    p.add_argument("--no-live", action="store_true", help="skip the live GPU copy")

    p = _add(commands, cmd_matrix)
    p.add_argument(
        "--versions",
        action="append",
        metavar="[T=]V1,V2",
        help="versions to cover instead of the manifest's; T=... per target, repeatable",
    )
    p.add_argument("--out", type=Path, help="output folder (default: <repo>/docs)")
    p.add_argument("--no-tests", action="store_true", help="classify only; do not run the patches' tests")
    p.add_argument("--offline", action="store_true", help="use only the wheel cache")


def _finish(args: argparse.Namespace, code: int) -> int:
    """The exit code once the command is done. A signal that came after its change had completed ends the
    run with the change standing: one line says so, and the command's own code stays (0)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, subproc.SIGNALS)  # the run is over: a later signal finds it gone
    signum = subproc.caught()
    if signum is None:
        return code
    if not subproc.completed():
        raise subproc.interruption(signum)
    print(
        f"sgl-overlay: signal {signum} came after {args.command} had completed; the change stands as reported above",
        file=sys.stderr,
    )
    return code


def main(argv: list[str] | None = None) -> int:
    """Run one command. Ctrl-C and SIGTERM are acted on between two programs it runs (subproc.checkpoint):
    before a change completes they roll it back (exit 130); after, they end the run with it standing."""
    try:
        subproc.catch_signals()
        if isinstance(sys.stdout, io.TextIOWrapper):  # a path of other bytes than UTF-8 is printed as its bytes
            sys.stdout.reconfigure(errors="surrogateescape")
        scratch.sweep()
        args = build_parser().parse_args(argv)
        manifest = load_manifest(args.patches)
        gitutil.ensure_git_runs()  # before any git call could blame a patch or a checkout for it
        # pins and export rewrite what the check refuses; every other command goes on with the series it read
        read = {} if args.func in (cmd_pins, cmd_export) else pins.check(manifest)
        at = places(manifest.path, args.trees, args.cache)
        return _finish(args, args.func(args, Context(manifest, at, read)))
    except OverlayError as exc:
        _failed(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        print("sgl-overlay: interrupted", file=sys.stderr)
        return Interrupted.exit_code
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as a shell would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except UnicodeEncodeError as exc:  # what a file holds is read as bytes or UTF-8: this is the output's encoding
        _failed(
            f"cannot print {ascii(exc.object[exc.start : exc.end])} in the output's encoding {exc.encoding} (set by "
            "PYTHONIOENCODING or the locale); run with PYTHONIOENCODING=utf-8"
        )
        return 1
    except UnicodeError as exc:
        _failed(f"a file is not valid text ({exc}); restore it from git")
        return 1
    except OSError as exc:
        _failed(_STANDS + (exc.strerror or str(exc)) if subproc.completed() else _os_error(exc))
        return 1


_STANDS = "the change completed and stands (`sgl-overlay status` shows it), but its report could not be written: "


def _failed(line: str) -> None:
    print(f"sgl-overlay: error: {line}", file=sys.stderr)


def _os_error(exc: OSError) -> str:
    """A file the tool could not use (one no check named before)."""
    where = f" {exc.filename}" if exc.filename else ""
    if exc.errno == errno.ENOSPC:
        return f"cannot write{where}: no space left on the device; free some space there, then run again"
    return f"cannot use{where}: {exc.strerror or exc}; check it exists and is readable/writable"


if __name__ == "__main__":
    sys.exit(main())
