import pytest

from protocol import Cursor, Provenance, ResourceId, provenance

A = "0123456789abcdef"
B = "fedcba9876543210"


def test_resource_id_round_trip() -> None:
    rid = ResourceId("proc", A, 17)
    assert str(rid) == f"proc-{A}-17"
    assert ResourceId.parse(str(rid)) == rid


@pytest.mark.parametrize(
    "text", ["", "proc", f"proc-{A}", f"proc-{A}-0", f"proc-{A}-01", f"proc-{A[:-1]}-1", "x-y-z"]
)
def test_malformed_ids_do_not_parse(text: str) -> None:
    assert ResourceId.parse(text) is None


def test_provenance() -> None:
    assert provenance(f"proc-{A}-3", "proc", A) == (Provenance.OURS, ResourceId("proc", A, 3))
    assert provenance(f"proc-{B}-3", "proc", A)[0] is Provenance.STALE
    assert provenance(f"term-{A}-3", "proc", A)[0] is Provenance.FOREIGN
    assert provenance("nonsense", "proc", A)[0] is Provenance.FOREIGN


def test_cursor_round_trip() -> None:
    cursor = Cursor(f"proc-{A}-3", 4096)
    assert str(cursor) == f"proc-{A}-3:4096"
    assert Cursor.parse(str(cursor)) == cursor


@pytest.mark.parametrize(
    "text",
    [
        "",
        ":",
        f"proc-{A}-3",
        f"proc-{A}-3:",
        f"proc-{A}-3:-1",
        f"proc-{A}-3:x",
        "junk:5",
        f"proc-{A}-3:١٢",
        f"proc-{A}-3:" + "9" * 20,
    ],
)
def test_malformed_cursors_do_not_parse(text: str) -> None:
    assert Cursor.parse(text) is None
