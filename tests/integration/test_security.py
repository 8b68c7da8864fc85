"""The probe matrix of the running daemons, replayed as tests.

Every refusal the worker's authentication gave stays a refusal; every path trick is answered
before anything upstream is read for it; an unparseable ``Host`` is a 400 on both daemons, never
a 500 with a traceback; ``/debug`` is decided on the socket's peer; and upstream figures that
cannot be true (a snapshot from the future, a usage larger than the card, a clock pushed past
what a date can hold) are refused rather than published. Each case is counted in ``CASES`` so
the matrix's size is visible in the test ids.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from worker_stack import WorkerStack, open_worker_stack, serving_snapshot

from patience import HANG

V1 = "/apis/worker.gpustack.ai/v1"
METRICS = f"{V1}/namespaces/team-a/instances/llama-70b/metrics"
ADMIN = [("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")]
DAY = dt.timedelta(days=1)


@pytest.fixture
async def mixed(tmp_path: Path) -> AsyncIterator[WorkerStack]:
    async with open_worker_stack("nvidia-mixed", tmp_path) as stack:
        yield stack


# -- a raw HTTPS request: httpx would normalise the dot segments away ---------------------------


async def raw_request(
    url: str,
    target: str,
    headers: list[tuple[str, str]],
    *,
    context: ssl.SSLContext,
    host: str | None = None,
) -> tuple[int, bytes]:
    """Send ``GET target`` byte for byte over TLS; return the status and the body."""
    address = url.removeprefix("https://")
    hostname, port = address.rsplit(":", 1)
    stream = await trio.open_tcp_stream(hostname, int(port))
    tls = trio.SSLStream(stream, context, server_hostname=hostname)
    lines = [f"GET {target} HTTP/1.1", f"Host: {host if host is not None else address}"]
    lines += [f"{k}: {v}" for k, v in headers]
    lines += ["Connection: close", "", ""]
    with trio.fail_after(HANG):
        await tls.send_all("\r\n".join(lines).encode("latin-1"))
        received = bytearray()
        while True:
            try:
                chunk = await tls.receive_some(65536)
            except trio.BrokenResourceError:
                break
            if not chunk:
                break
            received += chunk
    await tls.aclose()
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunk(body)
    return status, body


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


def _front_proxy_context(stack: WorkerStack, cert: Path | None = None) -> ssl.SSLContext:
    return stack.tls(cert=cert if cert is not None else stack.cluster.state.pki.front_proxy_client)


# -- authentication: every refusal the probe found must stay a refusal -------------------------


def _issue(
    stack: WorkerStack,
    name: str,
    *,
    ca: trustme.CA | None = None,
    cn: str = "front-proxy-client",
    usages: tuple[x509.ObjectIdentifier, ...] = (ExtendedKeyUsageOID.CLIENT_AUTH,),
    valid: tuple[dt.datetime, dt.datetime] | None = None,
) -> Path:
    """A client certificate signed by the front-proxy CA (or ``ca``) with exactly these traits."""
    pki = stack.cluster.state.pki
    if ca is None:
        ca_cert = x509.load_pem_x509_certificate(pki.front_proxy_ca.read_bytes())
        ca_key = serialization.load_pem_private_key(pki.front_proxy_ca_key.read_bytes(), None)
    else:
        ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
        ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    now = dt.datetime.now(dt.UTC)
    not_before, not_after = valid or (now - dt.timedelta(hours=1), now + dt.timedelta(hours=1))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    path = stack.tmp / f"{name}.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + cert.public_bytes(serialization.Encoding.PEM)
    )
    return path


async def test_every_authentication_refusal_is_a_401_status(mixed: WorkerStack) -> None:
    now = dt.datetime.now(dt.UTC)
    cases: dict[str, tuple[Path | None, list[tuple[str, str]]]] = {
        "no certificate, identity headers": (None, ADMIN),
        "certificate from another CA": (_issue(mixed, "foreign", ca=trustme.CA()), ADMIN),
        "right CA, CN not allowed": (_issue(mixed, "intruder", cn="intruder"), ADMIN),
        "expired front-proxy certificate": (
            _issue(
                mixed, "expired", valid=(now - dt.timedelta(days=2), now - dt.timedelta(days=1))
            ),
            ADMIN,
        ),
        "not yet valid front-proxy certificate": (
            _issue(mixed, "future", valid=(now + DAY, now + 2 * DAY)),
            ADMIN,
        ),
        "serverAuth-only EKU": (
            _issue(mixed, "server-only", usages=(ExtendedKeyUsageOID.SERVER_AUTH,)),
            ADMIN,
        ),
        "front-proxy certificate without X-Remote-User": (
            mixed.cluster.state.pki.front_proxy_client,
            [("X-Remote-Group", "system:masters")],
        ),
        "spoofed identity headers, no certificate": (
            None,
            [*ADMIN, ("X-Remote-Extra-Scopes", "all")],
        ),
        "bogus bearer token": (None, [("Authorization", "Bearer not-a-token")]),
        "bearer token with spoofed identity headers": (
            None,
            [("Authorization", "Bearer not-a-token"), *ADMIN],
        ),
        "bearer scheme without a token": (None, [("Authorization", "Bearer")]),
        "basic auth": (None, [("Authorization", "Basic YWRtaW46YWRtaW4=")]),
    }
    for case, (cert, headers) in cases.items():
        answer = await mixed.request(METRICS, cert=cert, headers=headers)
        assert answer.status_code == 401, case
        status = answer.json()
        assert (status["kind"], status["reason"], status["code"]) == ("Status", "Unauthorized", 401)
        assert "sample" not in status, case
    ok = await mixed.request(
        METRICS, cert=mixed.cluster.state.pki.front_proxy_client, headers=ADMIN
    )
    assert ok.status_code == 200
    assert len(cases) == 12


# -- path tricks: validated before authorization, never reaching upstream ----------------------

PATH_TRICKS: dict[str, tuple[str, set[int]]] = {
    # case: (the raw request target, the acceptable answers)
    "escaped # cuts the name upstream": (
        f"{V1}/namespaces/team-a/instances/llama-70b%23/metrics",
        {404},
    ),
    "escaped ? injects a query": (
        f"{V1}/namespaces/team-a/instances/llama-70b%3Fwatch=1/metrics",
        {404},
    ),
    "escaped NUL": (f"{V1}/namespaces/team-a/instances/llama-70b%00/metrics", {400}),
    "escaped slash in the name": (f"{V1}/namespaces/team-a/instances/llama%2F70b/metrics", {400}),
    "escaped dot-dot as the name": (f"{V1}/namespaces/team-a/instances/%2e%2e/metrics", {400}),
    "escaped percent": (f"{V1}/namespaces/team-a/instances/llama%2570b/metrics", {400}),
    "dot-dot walking to another namespace": (
        f"{V1}/namespaces/team-b/../team-a/instances/llama-70b/metrics",
        {400, 404},
    ),
    "dot as the namespace": (f"{V1}/namespaces/./instances/llama-70b/metrics", {400}),
    "empty name": (f"{V1}/namespaces/team-a/instances//metrics", {400, 404}),
    "double slash before the group": (
        "/apis//worker.gpustack.ai/v1/namespaces/team-a/instances/llama-70b/metrics",
        {404},
    ),
    "trailing segments": (f"{METRICS}/extra", {404}),
    "uppercase name": (f"{V1}/namespaces/team-a/instances/LLAMA-70B/metrics", {404}),
    "uppercase namespace": (f"{V1}/namespaces/TEAM-A/instances/llama-70b/metrics", {404}),
    "name over 253 characters": (f"{V1}/namespaces/team-a/instances/{'a' * 254}/metrics", {404}),
    "namespace over 63 characters": (f"{V1}/namespaces/{'a' * 64}/instances/x/metrics", {404}),
    "invalid UTF-8 escape": (f"{V1}/namespaces/team-a/instances/%ff%fe/metrics", {400}),
}


async def test_path_tricks_are_refused_before_anything_is_read(mixed: WorkerStack) -> None:
    reviews_before = mixed.cluster.state.expanded.users  # the stand-in is untouched by refusals
    assert reviews_before
    context = _front_proxy_context(mixed)
    for case, (target, expected) in PATH_TRICKS.items():
        status, body = await raw_request(mixed.url, target, ADMIN, context=context)
        assert status in expected, f"{case}: {status} {body[:200]!r}"
        decoded = json.loads(body)
        assert decoded["kind"] == "Status", case
        assert decoded["code"] == status, case
        assert "sample" not in decoded, case
        assert "\x00" not in decoded["message"], case
    # the genuine name still answers, so the refusals above are about the names alone
    status, body = await raw_request(mixed.url, METRICS, ADMIN, context=context)
    assert status == 200
    assert json.loads(body)["metadata"]["name"] == "llama-70b"


async def test_escaped_names_through_the_aggregator_never_read_another_object(
    mixed: WorkerStack,
) -> None:
    """``kubectl get --raw`` with an escaped name: the stand-in forwards the raw path."""
    for suffix, expected in (("%23", 404), ("%3Fwatch=1", 404), ("%00", 400), ("%2F", 400)):
        answer = await mixed.through_cluster(
            f"{V1}/namespaces/team-a/instances/llama-70b{suffix}/metrics"
        )
        assert answer.status_code == expected, (suffix, answer.text)
        assert answer.json()["kind"] == "Status"
        assert "sample" not in answer.json()


async def test_instance_reads_validate_names_too(mixed: WorkerStack) -> None:
    for target, expected in (
        (f"{V1}/namespaces/team-a/instances/llama-70b%23", 404),
        (f"{V1}/namespaces/team-a/instances/llama-70b%3Flimit=1", 404),
        (f"{V1}/namespaces/Team-A/instances", 404),
        (f"{V1}/namespaces/team-a%2Fx/instances", 400),
    ):
        answer = await mixed.as_aggregator(target)
        assert answer.status_code == expected, (target, answer.text)


# -- Host: 400 on both daemons, never a 500 or a traceback -------------------------------------

BAD_HOSTS = [
    "a" * 64,  # a label over 63 characters: the probe's 500
    "a" * 64 + ".example.com",
    "x." * 127 + "x",  # over 253 characters in all
    "[::1",
    "[not-an-address]",
    "::1",  # an IPv6 address must be bracketed
    "host:99999",
    "host:port",
    "exa mple",
    "a..b",
    "-leading.example",
]


async def test_an_unparseable_host_is_400_on_both_daemons(
    mixed: WorkerStack, caplog: pytest.LogCaptureFixture
) -> None:
    [dm] = mixed.device_managers
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    with caplog.at_level(logging.INFO):
        for host in BAD_HOSTS:
            status, body = await raw_request(
                mixed.url, "/healthz", ADMIN, context=_front_proxy_context(mixed), host=host
            )
            assert status == 400, (host, body)
            assert json.loads(body)["reason"] == "BadRequest"
            status, body = await raw_request(dm.url, "/readyz", [], context=insecure, host=host)
            assert status == 400, (host, body)
            assert body.startswith(b"400 Bad Request: invalid Host header")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "Traceback" not in dm.log.read_text()
    # and a good Host still answers on each, bracketed IPv6 included
    for host in ("localhost", "[::1]:32443", "gpu-node-1.example:32443", "10.0.0.7"):
        status, _ = await raw_request(dm.url, "/readyz", [], context=insecure, host=host)
        assert status == 200, host


async def test_debug_decides_on_the_peer_not_the_host(mixed: WorkerStack) -> None:
    """From a loopback peer any Host is local; the non-loopback peer is in the unit tests."""
    [dm] = mixed.device_managers
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    for host in ("[::1]", "[::1]:32443", "gpu-node-1.example"):
        status, body = await raw_request(dm.url, "/debug/state", [], context=insecure, host=host)
        assert status == 200, host
        assert json.loads(body)["podsSynced"] in (True, False)


# -- malformed upstream answers ------------------------------------------------------------------


async def _live_snapshot(stack: WorkerStack, *, with_slices: bool = False) -> dict[str, Any]:
    """The Device Manager's own snapshot; with ``with_slices``, one taken once its Pods synced."""
    [running] = stack.device_managers
    async with httpx.AsyncClient(verify=False, trust_env=False) as client:
        with trio.fail_after(HANG):
            while True:
                answer = await client.get(running.url + "/monitor/snapshot")
                snapshot: dict[str, Any] = answer.json()
                if not with_slices or (snapshot.get("slices") or {}).get("usages"):
                    return snapshot
                await trio.sleep(0.2)


async def _metrics_with(stack: WorkerStack, snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    [dm] = stack.cluster.state.expanded.device_managers
    async with serving_snapshot(json.dumps(snapshot).encode(), stack.tmp / "double-dm") as port:
        stack.cluster.state.bind_pod_address(dm.namespace, dm.name, "127.0.0.1", port)
        answer = await stack.metrics("team-a", name)
    assert answer.status_code == 200, answer.text
    sample: dict[str, Any] = answer.json()["sample"]
    return sample


def _stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_a_snapshot_from_the_future_is_not_fresh(mixed: WorkerStack) -> None:
    snapshot = await _live_snapshot(mixed)
    snapshot["timestamp"] = "2999-01-01T00:00:00Z"
    sample = await _metrics_with(mixed, snapshot, "llama-70b")
    assert "accelerators" not in sample
    assert sample["cpuUsedMilliCores"] > 0  # the rest of the sample still answers


async def test_a_huge_stated_period_keeps_nothing_alive(mixed: WorkerStack) -> None:
    snapshot = await _live_snapshot(mixed)
    snapshot["timestamp"] = _stamp(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    snapshot["periodSeconds"] = 10**9
    sample = await _metrics_with(mixed, snapshot, "llama-70b")
    assert "accelerators" not in sample


async def test_usage_beyond_the_card_is_invalid_data_not_a_figure(mixed: WorkerStack) -> None:
    snapshot = await _live_snapshot(mixed, with_slices=True)
    snapshot["timestamp"] = _stamp(dt.datetime.now(dt.UTC))
    usages = snapshot["slices"]["usages"]
    assert usages, "the scenario has a Sliced Instance with usage"
    for row in usages:
        row["memoryUsedMiB"] = 10**12
    sample = await _metrics_with(mixed, snapshot, "qwen-a")  # the scenario's 50 % slice
    [entry] = sample["accelerators"]
    assert "memoryUsedMiB" not in entry  # absent, never 10^12 on a 40 GiB slice
    assert entry["memoryTotalMiB"] > 0


async def test_the_stand_in_clock_refuses_what_no_date_can_hold(mixed: WorkerStack) -> None:
    token = next(u.token for u in mixed.cluster.state.expanded.users if u.name == "admin")
    context = ssl.create_default_context(cafile=str(mixed.cluster.state.pki.ca))
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(verify=context, trust_env=False, headers=headers) as client:
        for value in (1e308, 1e12, 10 * 366 * 86400.0 + 1):
            refused = await client.post(
                mixed.cluster.url + "/simulator/v1/clock", json={"advanceSeconds": value}
            )
            assert refused.status_code == 400, value
        summary = await client.get(
            mixed.cluster.url + "/api/v1/nodes/gpu-node-1/proxy/stats/summary"
        )
        assert summary.status_code == 200
        moved = await client.post(
            mixed.cluster.url + "/simulator/v1/clock", json={"advanceSeconds": 60}
        )
        assert moved.status_code == 200
