"""Parameter schemas of the `file.*` and `watch.*` methods, and the watch glob language.

Paths are strings; a relative path resolves against the daemon's workspace (the daemon does
that, not the protocol). A path with NUL is VALIDATION_FAILED here, before any system call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ._schema import invalid

#: Watch patterns skip these unless the client gives its own `exclude`.
DEFAULT_WATCH_EXCLUDE = (".git", "node_modules", ".DS_Store")
#: Entries one `file.list` returns at most; beyond it the result says `truncated`.
MAX_LIST_ENTRIES = 50_000


def _path(value: str, name: str) -> None:
    if not value:
        raise invalid(name, "must be a non-empty path")
    if "\0" in value:
        raise invalid(name, "must not contain NUL")


def _mode(value: int | None, name: str = "mode") -> None:
    if value is not None and not 0 <= value <= 0o7777:
        raise invalid(name, "must be a permission mode between 0 and 0o7777")


@dataclass(frozen=True)
class FilePath:
    path: str

    def validate(self) -> None:
        _path(self.path, "path")


@dataclass(frozen=True)
class FileReadParams:
    path: str
    #: Files larger than this come as `data` events of this size, not inline in the result.
    chunk_bytes: int = 1024 * 1024

    def validate(self) -> None:
        _path(self.path, "path")
        if not 4096 <= self.chunk_bytes <= 8 * 1024 * 1024:
            raise invalid("chunk_bytes", "must be between 4096 and 8388608")


@dataclass(frozen=True)
class UploadBeginParams:
    path: str
    #: Permission bits; unset keeps an existing file's mode (a new file gets 0o644).
    mode: int | None = None
    create_parents: bool = False

    def validate(self) -> None:
        _path(self.path, "path")
        _mode(self.mode)


@dataclass(frozen=True, kw_only=True)
class FileWriteParams(UploadBeginParams):
    """An upload in one message."""

    content: bytes


@dataclass(frozen=True)
class UploadChunkParams:
    upload_id: str
    data: bytes
    #: Where `data` starts; it must equal the bytes received so far (no gaps, no repeats).
    offset: int

    def validate(self) -> None:
        if self.offset < 0:
            raise invalid("offset", "must be zero or more")


@dataclass(frozen=True)
class UploadId:
    upload_id: str


@dataclass(frozen=True)
class FileListParams:
    path: str
    recursive: bool = False
    hidden: bool = False
    limit: int = 10_000

    def validate(self) -> None:
        _path(self.path, "path")
        if not 1 <= self.limit <= MAX_LIST_ENTRIES:
            raise invalid("limit", f"must be between 1 and {MAX_LIST_ENTRIES}")


@dataclass(frozen=True)
class FileMkdirParams:
    path: str
    recursive: bool = False
    mode: int | None = None

    def validate(self) -> None:
        _path(self.path, "path")
        _mode(self.mode)


@dataclass(frozen=True)
class FileDeleteParams:
    path: str
    recursive: bool = False

    def validate(self) -> None:
        _path(self.path, "path")


@dataclass(frozen=True)
class FileMoveParams:
    source: str
    destination: str
    overwrite: bool = False

    def validate(self) -> None:
        _path(self.source, "source")
        _path(self.destination, "destination")


@dataclass(frozen=True)
class WatchStartParams:
    path: str
    recursive: bool = True
    include: list[str] | None = None
    exclude: list[str] | None = None

    def validate(self) -> None:
        _path(self.path, "path")
        if self.include is not None and self.exclude is not None:
            raise invalid("include", "cannot be used together with exclude")
        for name, patterns in (("include", self.include), ("exclude", self.exclude)):
            for i, pattern in enumerate(patterns or ()):
                compile_glob(pattern, f"{name}[{i}]")

    @property
    def exclusions(self) -> list[str]:
        if self.include is not None:
            return []
        return list(DEFAULT_WATCH_EXCLUDE if self.exclude is None else self.exclude)


_GLOB_TOKENS = re.compile(r"\*\*/?|\*|\?|[^*?]+")
_FORBIDDEN = set("[]{}\\")


def compile_glob(pattern: str, name: str = "pattern") -> re.Pattern[str]:
    """A watch glob as a regular expression over '/'-separated relative paths.

    `*` matches within one path segment, `**` across segments (`**/` also matches no
    directory at all), `?` one character other than '/'. Character classes, braces and
    backslashes are VALIDATION_FAILED: they are not part of the language, and a pattern
    that silently meant something else would be worse.
    """
    if not pattern or "\0" in pattern:
        raise invalid(name, "must be a non-empty pattern without NUL")
    bad = sorted(_FORBIDDEN & set(pattern))
    if bad:
        raise invalid(name, f"unsupported glob syntax {''.join(bad)!r}: only *, ** and ? are")
    parts = []
    for token in _GLOB_TOKENS.findall(pattern):
        if token == "**/":
            parts.append("(?:.*/)?")
        elif token == "**":
            parts.append(".*")
        elif token == "*":
            parts.append("[^/]*")
        elif token == "?":
            parts.append("[^/]")
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


@dataclass(frozen=True)
class GlobSet:
    """Patterns a relative path is tested against. A pattern without '/' tests each path
    segment (so `node_modules` covers everything below one, `*.ts` any TypeScript file at
    any depth); one with '/' tests the whole relative path and what lies below it."""

    patterns: tuple[str, ...]
    _segment: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _whole: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_segment", tuple(compile_glob(p) for p in self.patterns if "/" not in p)
        )
        object.__setattr__(
            self,
            "_whole",
            tuple(compile_glob(p.strip("/")) for p in self.patterns if "/" in p),
        )

    def matches_name(self, relative: str) -> bool:
        """Does the last segment, or the whole path, match? (for `include`)"""
        name = relative.rpartition("/")[2]
        return any(r.match(name) for r in self._segment) or any(
            r.match(relative) for r in self._whole
        )

    def covers(self, relative: str) -> bool:
        """Is the path, or a directory above it, matched? (for `exclude`)"""
        segments = relative.split("/")
        if any(r.match(s) for r in self._segment for s in segments):
            return True
        prefixes = ["/".join(segments[: i + 1]) for i in range(len(segments))]
        return any(r.match(p) for r in self._whole for p in prefixes)
