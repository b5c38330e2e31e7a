"""The demo's own services keep their ports across restarts: the object store's address is
given to tenants (their backups' endpoint), so a port whose last connections wait out
TIME_WAIT is taken again, not swapped for another."""

from __future__ import annotations

import socket

from gpulease.server import _port_or_any


def test_a_port_left_in_time_wait_is_taken_again() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server's side closes first: it waits out TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    assert _port_or_any(port, wait_s=0) == port


def test_a_port_another_program_listens_on_is_left_to_it() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        assert _port_or_any(other.getsockname()[1], wait_s=0.3) is None
