from dataclasses import dataclass, field
from typing import Literal

import pytest

from protocol import ErrorCode, SupervisorError, parse


@dataclass(frozen=True)
class Inner:
    n: int


@dataclass(frozen=True)
class Params:
    argv: list[str]
    env: dict[str, str | None] = field(default_factory=dict)
    mode: Literal["tcp", "http"] = "tcp"
    limit: int | None = None
    ratio: float = 1.0
    data: bytes = b""
    flag: bool = False
    inner: Inner | None = None
    pair: tuple[int, ...] = ()

    def validate(self) -> None:
        if not self.argv:
            raise SupervisorError(ErrorCode.VALIDATION_FAILED, "empty", {"field": "argv"})


def field_of(raw: object) -> str:
    with pytest.raises(SupervisorError) as info:
        parse(Params, raw)
    assert info.value.code == ErrorCode.VALIDATION_FAILED
    return str(info.value.context["field"])


def test_full_parse() -> None:
    p = parse(
        Params,
        {
            "argv": ["a", ""],
            "env": {"A": "1", "B": None},
            "mode": "http",
            "limit": 3,
            "ratio": 2,
            "data": b"\x00",
            "flag": True,
            "inner": {"n": 1, "extra": 0},
            "pair": [1, 2],
            "unknown": "ignored",
        },
    )
    assert p == Params(
        ["a", ""], {"A": "1", "B": None}, "http", 3, 2.0, b"\x00", True, Inner(1), (1, 2)
    )


def test_defaults() -> None:
    assert parse(Params, {"argv": ["x"]}) == Params(["x"])


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ([], "params"),
        ({}, "argv"),
        ({"argv": "ls"}, "argv"),
        ({"argv": ["ls", 3]}, "argv[1]"),
        ({"argv": []}, "argv"),
        ({"argv": ["x"], "env": {"A": 1}}, "env.A"),
        ({"argv": ["x"], "env": []}, "env"),
        ({"argv": ["x"], "mode": "udp"}, "mode"),
        ({"argv": ["x"], "mode": ["tcp"]}, "mode"),
        ({"argv": ["x"], "ratio": True}, "ratio"),
        ({"argv": ["x"], "limit": True}, "limit"),
        ({"argv": ["x"], "limit": 1.5}, "limit"),
        ({"argv": ["x"], "ratio": "1"}, "ratio"),
        ({"argv": ["x"], "data": "text"}, "data"),
        ({"argv": ["x"], "flag": 1}, "flag"),
        ({"argv": ["x"], "inner": {}}, "inner.n"),
        ({"argv": ["x"], "inner": 3}, "inner"),
        ({"argv": ["x"], "pair": 3}, "pair"),
    ],
)
def test_errors_name_the_field(raw: object, where: str) -> None:
    assert field_of(raw) == where
