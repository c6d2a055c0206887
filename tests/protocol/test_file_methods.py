import pytest

from protocol import (
    ErrorCode,
    FileReadParams,
    GlobSet,
    SupervisorError,
    WatchStartParams,
    compile_glob,
    parse,
)


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.ts", "index.ts", True),
        ("*.ts", "src/index.ts", False),  # * stays within a segment
        ("**/*.ts", "index.ts", True),  # **/ may match no directory
        ("**/*.ts", "a/b/index.ts", True),
        ("docs/**", "docs/a/b.md", True),
        ("?.js", "a.js", True),
        ("?.js", "ab.js", False),
        ("a.b", "axb", False),  # everything else is literal
        ("(x)+", "(x)+", True),
    ],
)
def test_glob_language(pattern: str, path: str, matches: bool) -> None:
    assert bool(compile_glob(pattern).match(path)) is matches


@pytest.mark.parametrize("pattern", ["[ab].ts", "{a,b}", "a\\*", "", "a\0"])
def test_unsupported_globs_are_refused(pattern: str) -> None:
    with pytest.raises(SupervisorError) as info:
        compile_glob(pattern, "include[0]")
    assert info.value.code == ErrorCode.VALIDATION_FAILED
    assert info.value.context["field"] == "include[0]"


def test_glob_sets() -> None:
    exclude = GlobSet(("node_modules", "build/out"))
    assert exclude.covers("node_modules")
    assert exclude.covers("pkg/node_modules/x/y.js")
    assert exclude.covers("build/out/a.o")
    assert not exclude.covers("build/other")
    include = GlobSet(("*.py", "docs/**/*.md"))
    assert include.matches_name("deep/down/x.py")
    assert include.matches_name("docs/guide/a.md")
    assert not include.matches_name("notes.md")


def test_watch_params() -> None:
    default = parse(WatchStartParams, {"path": "src"})
    assert default.recursive and default.exclusions == [".git", "node_modules", ".DS_Store"]
    assert parse(WatchStartParams, {"path": "s", "include": ["*.ts"]}).exclusions == []
    assert parse(WatchStartParams, {"path": "s", "exclude": []}).exclusions == []
    for bad, field in [
        ({"path": "s", "include": ["*"], "exclude": ["x"]}, "include"),
        ({"path": "s", "exclude": ["[x]"]}, "exclude[0]"),
        ({"path": ""}, "path"),
    ]:
        with pytest.raises(SupervisorError) as info:
            parse(WatchStartParams, bad)
        assert info.value.context["field"] == field


def test_read_chunk_bounds() -> None:
    with pytest.raises(SupervisorError):
        parse(FileReadParams, {"path": "x", "chunk_bytes": 10})
