"""Relay's upstream client over TLS against a real TLS server on loopback: the provider's certificate is
checked against the trust store ``SSL_CERT_FILE`` names, and for the URL's host name; a certificate
that fails either check is a connection error naming the failure, never an answer."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from relay.upstream import Upstream, UpstreamConnectionError


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signs for 127.0.0.1 only: (ca.pem, cert.pem, key.pem)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("relay test CA"))
        .issuer_name(_name("relay test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            body = await reader.readexactly(length)
            answer = b'{"echo": ' + body + b"}"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def tls_port(tmp_path: Path) -> AsyncIterator[tuple[int, Path]]:
    ca, cert, key = _issue(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = await asyncio.start_server(_answer, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], ca
    finally:
        server.close()


async def test_a_provider_trusted_by_ssl_cert_file_answers_over_tls_on_one_connection(
    tls_port: tuple[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, ca = tls_port
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    client = Upstream(timeout_s=5.0, connect_timeout_s=5.0)
    await client.start()
    try:
        for n in range(3):
            response = await client.post(
                f"https://127.0.0.1:{port}/v1/x", {"content-type": "application/json"}, b"%d" % n
            )
            assert response.status == 200
            assert await response.read() == b'{"echo": %d}' % n
        assert len(client._connections) == 1  # the TLS connection is pooled, not renegotiated per call
    finally:
        await client.close()


async def test_an_untrusted_certificate_or_another_host_name_is_refused(
    tls_port: tuple[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, ca = tls_port
    client = Upstream(timeout_s=5.0, connect_timeout_s=5.0)
    await client.start()  # the system's trust store: the test CA is not in it
    try:
        with pytest.raises(UpstreamConnectionError) as untrusted:
            await client.post(f"https://127.0.0.1:{port}/v1/x", {}, b"{}")
        assert untrusted.value.message == "upstream connection failed: SSLCertVerificationError"
    finally:
        await client.close()
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    client = Upstream(timeout_s=5.0, connect_timeout_s=5.0)
    await client.start()
    try:
        with pytest.raises(UpstreamConnectionError) as misnamed:  # the certificate names 127.0.0.1 only
            await client.post(f"https://localhost:{port}/v1/x", {}, b"{}")
        assert misnamed.value.message == "upstream connection failed: SSLCertVerificationError"
    finally:
        await client.close()
