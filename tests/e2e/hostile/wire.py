"""Raw HTTP/1.1 over a socket, for requests no well-behaved client sends (huge or slow headers,
lying Content-Length, stalled bodies) and for reading exactly what the server answered."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool  # the server closed the connection after answering
    elapsed: float

    def json(self) -> Any:
        return json.loads(self.body)


def connect(port: int, timeout: float = 30.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return sock


def send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send what the server still takes: it may close the connection half-way (that is the point)."""
    try:
        sock.sendall(data)
    except OSError:
        pass


def read_answer(sock: socket.socket, started: float | None = None) -> RawAnswer:
    """Everything the server sends until it closes (or the socket times out), parsed."""
    started = time.monotonic() if started is None else started
    data = b""
    closed = False
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                closed = True
                break
            data += chunk
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep:
                length = _content_length(head)
                if length is not None and len(rest) >= length:
                    # Whole answer in: see whether the server closes right after.
                    sock.settimeout(2.0)
                    try:
                        closed = sock.recv(1) == b""
                    except ConnectionResetError:  # closed with our unread bytes in its buffer: RST
                        closed = True
                    except OSError:
                        closed = False
                    break
    except ConnectionResetError:
        closed = True
    except TimeoutError:
        pass
    finally:
        sock.close()
    return parse(data, closed, time.monotonic() - started)


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None


def parse(data: bytes, closed: bool, elapsed: float) -> RawAnswer:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines or not lines[0].startswith("HTTP/1.1 "):
        return RawAnswer(0, {}, data, closed, elapsed)
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawAnswer(status, headers, body, closed, elapsed)


def exchange(port: int, data: bytes, timeout: float = 30.0) -> RawAnswer:
    sock = connect(port, timeout)
    started = time.monotonic()
    send_quietly(sock, data)
    return read_answer(sock, started)


def request_head(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: relay.test"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
