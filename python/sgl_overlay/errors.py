"""Errors as data: what went wrong (`Why`) and the facts that name it (file, patch, value). `wording.error`
makes the one-line message with its next step; the command line prints it and exits with the class's code."""

from __future__ import annotations

from enum import Enum, auto


class Why(Enum):
    """Every failure the tool reports; `wording.ERRORS` has the sentence of each."""

    # the command line
    NO_TREE = auto()
    USAGE = auto()
    TERMINATED = auto()
    # the manifest
    NO_MANIFEST = auto()
    MANIFEST_NOT_UTF8 = auto()
    MANIFEST_UNREADABLE = auto()
    MANIFEST_NOT_TOML = auto()
    NO_SCHEMA = auto()
    OTHER_SCHEMA = auto()
    TARGET_LACKS_KEY = auto()
    UNKNOWN_KIND = auto()
    PATCH_TWICE = auto()
    WHEEL_AND_WHEELS = auto()
    WHEEL_LACKS_KEY = auto()
    BAD_WHEEL_NAME = auto()
    WHEEL_OTHER_VERSION = auto()
    NO_WHEEL_PINNED = auto()
    WHEEL_TWICE = auto()
    VARIANT_LACKS_KEY = auto()
    VARIANT_NOT_LISTED = auto()
    VARIANTS_CLASH = auto()
    UNKNOWN_TARGET = auto()
    APPLIED_NOT_LISTED = auto()
    # the series
    MISSING_PATCH = auto()
    CORRUPT_PATCH = auto()
    PATCH_CRLF = auto()
    PATCH_NO_SUBJECT = auto()
    PATCH_NO_DIFF = auto()
    PATCH_NO_HUNK = auto()
    NO_INDEX_LINE = auto()
    NOT_FULL_CONTEXT = auto()
    NOT_TOUCHED = auto()
    NO_PATCH_TOUCHES = auto()
    LOCK_DISAGREES = auto()
    NO_OP_PATCH = auto()
    # running programs and git
    NO_PROGRAM = auto()
    NOT_ON_PATH = auto()
    CANNOT_RUN = auto()
    FAILED = auto()
    NO_PATH = auto()
    NOT_GIT = auto()
    DUBIOUS_OWNERSHIP = auto()
    NO_SPACE = auto()
    GIT_BROKEN = auto()
    # a checkout
    NOT_THAT_TARGET = auto()
    UNKNOWN_PROJECT = auto()
    GIT_BUSY = auto()
    DIRTY = auto()
    READ_ONLY = auto()
    BARE = auto()
    UNBORN = auto()
    SPARSE = auto()
    DIRTY_BUILD = auto()
    SKIP_WORKTREE_EDITED = auto()
    COMMIT_MSG_HOOK = auto()
    # laying trees out
    REBUILT_PREIMAGE_DIFFERS = auto()
    NOT_THE_TREE = auto()
    PINNED_PREIMAGE_DIFFERS = auto()
    # apply / revert
    STRICT = auto()
    FILE_ABSENT = auto()
    CONFLICTS = auto()
    HALF_APPLIED = auto()
    OLDER_APPLIED = auto()
    UNTRACKED_IN_THE_WAY = auto()
    AM_FAILED = auto()
    REVERT_CONFLICTS = auto()
    REVERT_NO_IDENTITY = auto()
    REVERT_FAILED = auto()
    REVERT_GPG = auto()
    # the lock and the journal
    LEFTOVER = auto()
    LOCK_RACE = auto()
    CANNOT_LOCK = auto()
    LOCK_HELD = auto()
    CANNOT_JOURNAL = auto()
    BAD_JOURNAL = auto()
    BAD_LOCK = auto()
    GIT_LOCK_HELD = auto()
    GIT_LOCK_NOT_RECORDED = auto()
    BAD_COMMITS = auto()
    FOREIGN_COMMITS = auto()
    BRANCH_SINCE = auto()
    FILES_SINCE = auto()
    INTERRUPTED = auto()
    # fetch, export, wheels, doctor, matrix
    DOWNLOAD_FAILED = auto()
    DISK_FULL = auto()
    OFFLINE_NOT_CACHED = auto()
    OTHER_WHEEL_DOWNLOADED = auto()
    SHA256_MISMATCH = auto()
    SEVERAL_CACHED = auto()
    OFFLINE_NO_VERSION = auto()
    NO_TREE_TO_EXPORT = auto()
    EXPORT_NAMES_DIFFER = auto()
    NO_TRAILER = auto()
    PR_NO_DESCRIPTION = auto()
    PR_BAD_TITLE = auto()
    PR_SECTIONS = auto()
    PR_EMPTY_SECTION = auto()
    PR_NO_ISSUE_LINK = auto()
    NO_SENDER = auto()
    NO_WHEEL_FITS = auto()
    STOCK_WHEEL_DIFFERS = auto()
    TREE_NOT_VERIFIED = auto()
    TREE_LACKS_FILE = auto()
    WHEEL_NOT_PACKED = auto()
    NOT_A_PROJECT = auto()
    NOT_APPLIED_YET = auto()
    SOURCE_READ_ONLY = auto()
    BUILD_FAILED = auto()
    NO_WHEEL_BUILT = auto()
    NO_VERSION_TAGS = auto()
    NO_VERSION_ENV = auto()
    PROBE_NOT_JSON = auto()
    SITE_NOT_A_FOLDER = auto()
    MATRIX_UNEXPECTED_STATE = auto()
    VERSIONS_UNKNOWN_TARGET = auto()
    VERSIONS_NEED_TARGET = auto()


class OverlayError(Exception):
    """A failure the user can act on: `why` and its facts (keyword arguments, named as in `wording.ERRORS`)."""

    exit_code = 1

    def __init__(self, why: Why, **facts: object) -> None:
        super().__init__(why, facts)
        self.why, self.facts = why, facts

    def __str__(self) -> str:  # tracebacks and test failures; the message itself is `wording.error`
        return f"{self.why.name} {self.facts}"


class UsageError(OverlayError):
    exit_code = 2


class Interrupted(OverlayError):
    exit_code = 130  # what a shell reports for Ctrl-C
