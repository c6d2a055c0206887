from typing import Any

import pytest

from protocol import (
    Accepted,
    Cancel,
    ClientConnection,
    ErrorCode,
    Event,
    ProtocolViolation,
    Request,
    Response,
    ServerConnection,
    ServerPolicy,
    State,
    SupervisorError,
    Welcome,
)

INSTANCE = "0123456789abcdef"


def server(token: str | None = None) -> ServerConnection:
    return ServerConnection(
        ServerPolicy(INSTANCE, "sandbox-supervisor/test", ["runtime"], 1 << 20, token=token)
    )


def open_pair(**client_kwargs: Any) -> tuple[ClientConnection, ServerConnection]:
    client = ClientConnection("test/1", **client_kwargs)
    srv = server(client_kwargs.get("token"))
    accepted = srv.receive(client.hello())
    assert isinstance(accepted, Accepted)
    assert accepted.client == "test/1"
    welcome = client.receive(accepted.welcome.to_wire())
    assert isinstance(welcome, Welcome)
    return client, srv


def violation(srv: ServerConnection, raw: dict[str, Any]) -> ProtocolViolation:
    with pytest.raises(ProtocolViolation) as info:
        srv.receive(raw)
    assert srv.state is State.CLOSED
    return info.value


def test_handshake_welcome_fields() -> None:
    client, srv = open_pair()
    assert client.welcome is not None
    assert client.welcome.to_wire() == {
        "type": "welcome",
        "version": 1,
        "instance": INSTANCE,
        "server": "sandbox-supervisor/test",
        "capabilities": ["runtime"],
        "max_frame": 1 << 20,
    }
    assert srv.state is State.OPEN and client.state is State.OPEN


def test_highest_common_version_is_chosen() -> None:
    srv = ServerConnection(ServerPolicy(INSTANCE, "s", [], 1024, versions=(1, 2, 3)))
    accepted = srv.receive({"type": "hello", "versions": [3, 1, 7], "client": "c"})
    assert isinstance(accepted, Accepted) and accepted.welcome.version == 3


def test_version_mismatch_names_what_is_supported() -> None:
    err = violation(server(), {"type": "hello", "versions": [2, 9], "client": "c"})
    assert err.code == ErrorCode.UNSUPPORTED_PROTOCOL_VERSION
    assert err.context["supported"] == [1]


def test_empty_version_list_is_a_version_mismatch() -> None:
    err = violation(server(), {"type": "hello", "versions": [], "client": "c"})
    assert err.code == ErrorCode.UNSUPPORTED_PROTOCOL_VERSION


@pytest.mark.parametrize("token", [None, "wrong", ""])
def test_bad_token_is_unauthorized(token: str | None) -> None:
    hello: dict[str, Any] = {"type": "hello", "versions": [1], "client": "c"}
    if token is not None:
        hello["token"] = token
    err = violation(server(token="secret"), hello)
    assert err.code == ErrorCode.UNAUTHORIZED
    assert "secret" not in err.message


def test_right_token_is_accepted() -> None:
    open_pair(token="secret")


def test_activation_mismatch_names_both_instances() -> None:
    hello = {"type": "hello", "versions": [1], "client": "c", "instance": "ffffffffffffffff"}
    err = violation(server(), hello)
    assert err.code == ErrorCode.ACTIVATION_MISMATCH
    assert err.context == {"expected": "ffffffffffffffff", "actual": INSTANCE}


def test_expected_instance_that_matches_is_accepted() -> None:
    open_pair(instance=INSTANCE)


@pytest.mark.parametrize(
    "first",
    [
        {"type": "request", "id": 1, "method": "runtime.ping", "params": {}},
        {"type": "cancel", "id": 1},
        {"no": "type"},
    ],
)
def test_anything_before_hello_is_handshake_required(first: dict[str, Any]) -> None:
    assert violation(server(), first).code == ErrorCode.HANDSHAKE_REQUIRED


def test_malformed_hello_is_invalid_frame_naming_the_field() -> None:
    err = violation(server(), {"type": "hello", "versions": "1", "client": "c"})
    assert err.code == ErrorCode.INVALID_FRAME
    assert err.context["field"] == "hello.versions"


def test_second_hello_is_invalid() -> None:
    _, srv = open_pair()
    assert violation(srv, {"type": "hello", "versions": [1], "client": "c"}).code == (
        ErrorCode.INVALID_FRAME
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "request", "id": -1, "method": "m"},
        {"type": "request", "id": 2**64, "method": "m"},
        {"type": "request", "id": "1", "method": "m"},
        {"type": "request", "id": True, "method": "m"},
        {"type": "request", "id": 1, "method": 5},
        {"type": "bogus"},
        {"type": "welcome"},
    ],
)
def test_malformed_messages_after_handshake_are_invalid_frame(raw: dict[str, Any]) -> None:
    _, srv = open_pair()
    assert violation(srv, raw).code == ErrorCode.INVALID_FRAME


def test_unknown_keys_are_ignored() -> None:
    _, srv = open_pair()
    raw = {"type": "request", "id": 5, "method": "m", "params": {}, "future": [1, 2]}
    assert srv.receive(raw) == Request(5, "m", {})


def test_params_default_to_an_empty_map_and_are_not_checked_here() -> None:
    _, srv = open_pair()
    assert srv.receive({"type": "request", "id": 1, "method": "m"}) == Request(1, "m", {})
    assert srv.receive({"type": "request", "id": 2, "method": "m", "params": 3}) == Request(
        2, "m", 3
    )


def test_request_ids_are_tracked_until_the_final_response() -> None:
    client, srv = open_pair()
    rid, frame = client.request("runtime.ping")
    assert srv.receive(frame) == Request(rid, "runtime.ping", {})
    assert srv.in_flight == {rid}
    dup = violation(srv, frame)
    assert dup.code == ErrorCode.REQUEST_ID_IN_USE


def test_events_then_response_round_trip() -> None:
    client, srv = open_pair()
    rid, frame = client.request("process.logs", {"id": "x"})
    srv.receive(frame)
    event = client.receive(srv.event(rid, {"type": "stdout", "data": b"hi"}))
    assert event == Event(rid, {"type": "stdout", "data": b"hi"})
    response = client.receive(srv.response(rid, {"done": True}))
    assert response == Response(rid, {"done": True})
    assert srv.in_flight == frozenset()
    with pytest.raises(RuntimeError):
        srv.event(rid, {})
    with pytest.raises(ProtocolViolation):
        client.receive(srv_event_wire(rid))


def srv_event_wire(rid: int) -> dict[str, Any]:
    return {"type": "event", "id": rid, "event": {}}


def test_error_response_round_trip() -> None:
    client, srv = open_pair()
    rid, frame = client.request("nope")
    srv.receive(frame)
    err = SupervisorError(ErrorCode.METHOD_NOT_FOUND, "no method", {"method": "nope"})
    response = client.receive(srv.response(rid, error=err))
    assert isinstance(response, Response) and response.error is not None
    assert response.error.code == "METHOD_NOT_FOUND"
    assert response.error.context == {"method": "nope"}


def test_cancel_of_finished_request_is_ignored() -> None:
    client, srv = open_pair()
    rid, frame = client.request("m")
    srv.receive(frame)
    cancel = client.cancel(rid)
    assert cancel == {"type": "cancel", "id": rid}
    assert srv.receive(cancel) == Cancel(rid)
    srv.response(rid, None)
    assert srv.receive(cancel) is None
    client.receive({"type": "response", "id": rid, "result": None})
    assert client.cancel(rid) is None


def test_error_frame_raises_on_the_client_and_closes() -> None:
    client = ClientConnection("c")
    srv = server(token="t")
    with pytest.raises(ProtocolViolation) as info:
        srv.receive(client.hello())
    with pytest.raises(SupervisorError) as raised:
        client.receive(srv.error_frame(info.value))
    assert raised.value.code == "UNAUTHORIZED"
    assert client.state is State.CLOSED


def test_client_refuses_a_version_it_did_not_offer() -> None:
    client = ClientConnection("c")
    welcome = {
        "type": "welcome",
        "version": 2,
        "instance": INSTANCE,
        "server": "s",
        "capabilities": [],
        "max_frame": 10,
    }
    with pytest.raises(ProtocolViolation):
        client.receive(welcome)


def test_client_cannot_send_requests_before_welcome() -> None:
    with pytest.raises(RuntimeError):
        ClientConnection("c").request("m")


def test_closed_server_refuses_everything() -> None:
    _, srv = open_pair()
    violation(srv, {"type": "bogus"})
    violation(srv, {"type": "request", "id": 1, "method": "m"})
