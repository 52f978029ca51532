"""``structspec-lsp --tcp``: one client at a time, probes do not stop it, loopback by default."""

from __future__ import annotations

import socket
import subprocess

import pytest
from tests.helpers.lsp import server_command, server_env
from tests.helpers.raw_client import RawClient, connect, free_port, no_traceback

URI = "file:///work/example.py"
TEXT = "def add(a, b):\n    return a + b\n\n\nx = add(1, 2)\ny = "


def start(port: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        server_command("--tcp", f"127.0.0.1:{port}", "--model", "standin", *extra),
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the server closed ``sock`` (EOF or reset) without sending anything."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def end_session(client: RawClient, proc: subprocess.Popen[bytes]) -> int:
    """shutdown + exit over ``client``'s connection; the server's exit code."""
    assert client.call("shutdown")["result"] is None
    client.notify("exit")
    return proc.wait(30)


@pytest.fixture()
def server():
    port = free_port()
    proc = start(port)
    try:
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=30)
        assert no_traceback(err.decode()), err.decode()


def test_connect_and_close_probes_do_not_stop_the_server(server):
    port, proc = server
    for _ in range(3):
        connect(port).close()
    probe = connect(port)  # one that sends half a frame, then goes
    probe.sendall(b"Content-Length: 100\r\n\r\n{")
    probe.close()
    # A client right behind the probes (an editor that checks the port, then
    # connects) waits its turn instead of being refused.
    with RawClient(sock=connect(port)) as client:
        client.initialize()
        client.open(URI, TEXT)
        assert client.response(client.inline(URI, 5, 4))["result"] is not None
        assert end_session(client, proc) == 0


def test_a_second_client_cannot_read_or_disturb_the_first(server):
    port, proc = server
    with RawClient(sock=connect(port)) as first:
        first.initialize()
        first.open(URI, TEXT)
        second = connect(port)
        # The second connection is closed without a byte read from it or written to it...
        second.sendall(
            b'Content-Length: 58\r\n\r\n{"jsonrpc":"2.0","id":1,"method":"shutdown","params":null}'
        )
        assert closed_by_peer(second)
        second.close()
        # ...and the first session goes on: its answers still come to it.
        answer = first.response(first.inline(URI, 5, 4))
        assert answer["result"] is not None and answer["result"]["items"]
        assert first.status()["state"] in ("idle", "busy")
        # A second client that stays connected while the first works changes nothing either.
        lurker = connect(port)
        assert closed_by_peer(lurker)
        assert first.response(first.inline(URI, 5, 4))["result"] is not None
        lurker.close()
        assert end_session(first, proc) == 0


def test_client_that_leaves_ends_the_server(server):
    port, proc = server
    with RawClient(sock=connect(port)) as client:
        client.initialize()
    assert proc.wait(30) == 1  # it vanished without shutdown


def run_to_end(address: str) -> subprocess.CompletedProcess[str]:
    """``structspec-lsp --tcp address`` expected to stop by itself (a refusal)."""
    return subprocess.run(
        server_command("--tcp", address, "--model", "standin"),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_non_loopback_bind_needs_allow_remote():
    port = free_port()
    refused = run_to_end(f"0.0.0.0:{port}")
    assert refused.returncode == 2
    assert "--allow-remote" in refused.stderr and "no authentication" in refused.stderr
    proc = subprocess.Popen(
        server_command("--tcp", f"0.0.0.0:{port}", "--allow-remote", "--model", "standin"),
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with RawClient(sock=connect(port)) as client:
            client.initialize()
            assert end_session(client, proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_to_end(f"127.0.0.1:{port}")
    assert result.returncode == 2 and "cannot listen" in result.stderr
    assert no_traceback(result.stderr)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.1", False),
    ],
)
def test_is_loopback(host: str, loopback: bool):
    from structspec.lsp.transport import is_loopback

    assert is_loopback(host) is loopback
