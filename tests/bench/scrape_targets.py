"""The scrape benchmark's targets, each run in its own process as its users run it.

``python scrape_targets.py KIND CERT KEY`` prints its URL on stdout, then reads commands on
stdin, one a line, each answered ``ok``: ``prepare N`` builds round ``N``'s figures (the
harness does not count it: it stands for the compose, measured on its own), ``round N`` makes
them current as each target's users do (counted); end of input stops it. Kinds:

* ``ours``: the Device Manager's own app (``server.build_app``, hypercorn, TLS) and an
  :class:`ExpositionHolder`; a round is published as families and rendered when scraped;
* ``static``: the same server handing over one constant body of the same size (the floor);
* ``prometheus_client``: labelled ``Gauge`` children set each round and served by
  ``prometheus_client.start_http_server`` with TLS, which renders and gzips per scrape.

Every kind serves the same 10,010 series (:func:`round_families`): 770 Instances, 13 series
each; the 8 of 13 families whose figures move between rounds (used, utilization, temperature,
power) change every round, the others (totals, ``unhealthy``) stay.
"""

from __future__ import annotations

import sys
from pathlib import Path

INSTANCES = 770
POD_FAMILIES = (
    ("cpu_total_millicores", False),
    ("cpu_used_millicores", True),
    ("memory_total_mib", False),
    ("memory_used_mib", True),
    ("storage_total_mib", False),
    ("storage_used_mib", True),
)
ACCELERATOR_FAMILIES = (
    ("memory_total_mib", False),
    ("memory_used_mib", True),
    ("memory_utilization_percent", True),
    ("cores_utilization_percent", True),
    ("temperature_celsius", True),
    ("power_usage_watts", True),
    ("unhealthy", False),
)
POD_LABELS = ("namespace", "instance_name", "instance_uid", "node")
ACCELERATOR_LABELS = (*POD_LABELS, "id", "index", "manufacturer", "mode")

Series = list[tuple[tuple[str, ...], float]]
Families = list[tuple[str, str, tuple[str, ...], Series]]


def round_families(round_number: int, instances: int = INSTANCES) -> Families:
    """Round ``round_number``'s families as (name, help, label names, samples)."""
    found: Families = []
    for suffix, moves in POD_FAMILIES:
        samples: Series = []
        for i in range(instances):
            labels = (
                f"team-{i % 17}",
                f"instance-{i:05d}",
                f"{i:08x}-1111-4222-8333-{i:012x}",
                f"gpu-node-{i % 8}",
            )
            base = 1024.0 * (len(found) + 1) + i
            samples.append((labels, base + (round_number % 97) * 3 if moves else base))
        found.append(
            (f"gpustack_instance_{suffix}", f"The Instance's {suffix}.", POD_LABELS, samples)
        )
    for suffix, moves in ACCELERATOR_FAMILIES:
        samples = []
        for i in range(instances):
            card = i % 8
            accelerator = (
                f"team-{i % 17}",
                f"instance-{i:05d}",
                f"{i:08x}-1111-4222-8333-{i:012x}",
                f"gpu-node-{i % 8}",
                f"GPU-8d2f4a61-3c7e-4b19-a5d0-{card:012x}",
                str(card),
                "nvidia",
                ("Exclusive", "Shared", "Sliced", "Partitioned")[i % 4],
            )
            base = float((i * 7 + len(found)) % 100)
            samples.append((accelerator, base + (round_number % 89) * 0.25 if moves else base))
        found.append(
            (
                f"gpustack_instance_accelerator_{suffix}",
                f"The accelerator's {suffix}.",
                ACCELERATOR_LABELS,
                samples,
            )
        )
    return found


def _commands() -> list[str] | None:
    line = sys.stdin.readline()
    return line.split() if line else None


def _answer(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_prometheus_client(cert: Path, key: Path) -> None:
    """As its users run it: gauges set in their own loop, its own server rendering per scrape."""
    # Imported here, not at the top: each target process loads only its own stack, so the
    # peer's collector does not walk our modules' objects.
    from prometheus_client import CollectorRegistry, Gauge, start_http_server  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    gauges = [
        (Gauge(name, text, labels, registry=registry), samples)
        for name, text, labels, samples in round_families(0)
    ]
    for gauge, samples in gauges:
        for values, value in samples:
            gauge.labels(*values).set(value)
    server, _ = start_http_server(
        0, "127.0.0.1", registry=registry, certfile=str(cert), keyfile=str(key)
    )
    _answer(f"https://127.0.0.1:{server.server_port}/metrics")
    figures = round_families(0)
    while (command := _commands()) is not None:
        if command[0] == "prepare":
            figures = round_families(int(command[1]))
        else:
            for (gauge, _), (_, _, _, samples) in zip(gauges, figures, strict=True):
                for values, value in samples:
                    gauge.labels(*values).set(value)
        _answer("ok")


def run_quart(kind: str, cert: Path, key: Path) -> None:
    """Ours, or the constant floor, on the Device Manager's server stack."""
    # Imported here: the prometheus_client target must not carry this stack (see above).
    import trio  # noqa: PLC0415
    from hypercorn.config import Config  # noqa: PLC0415
    from hypercorn.trio import serve  # noqa: PLC0415
    from quart import Response, request  # noqa: PLC0415

    from gpustack_devicemanager.encoded import accepts_gzip  # noqa: PLC0415
    from gpustack_devicemanager.exposition import ExpositionHolder, Family  # noqa: PLC0415
    from gpustack_devicemanager.health import Liveness  # noqa: PLC0415
    from gpustack_devicemanager.holder import SnapshotHolder  # noqa: PLC0415
    from gpustack_devicemanager.server import build_app  # noqa: PLC0415

    def families(round_number: int) -> list[Family]:
        made = []
        for name, text, labels, samples in round_families(round_number):
            family = Family(name, text, labels)
            family.samples.extend(samples)
            made.append(family)
        return made

    exposition = ExpositionHolder()
    exposition.publish(families(0))
    fixed = ExpositionHolder()  # round 0 for good, both formats and encodings made up front
    fixed.publish(families(0))
    for openmetrics in (False, True):
        for gzipped in (False, True):
            fixed.current.make(openmetrics, gzipped)
    app = build_app(SnapshotHolder(15), Liveness(15.0, 0.0), lambda: 0.0, dict, exposition)

    @app.route("/constant")
    async def constant() -> Response:
        body, content_type = fixed.negotiate(request.headers.get("Accept", ""))
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            headers = {"Content-Encoding": "gzip"}
            return Response(body.gzipped, content_type=content_type, headers=headers)
        return Response(body.identity, content_type=content_type)

    prepared = families(0)

    async def main() -> None:
        nonlocal prepared
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.certfile, config.keyfile = str(cert), str(key)
        config.accesslog = config.errorlog = None
        stdin = trio.lowlevel.FdStream(0)
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                lambda task_status: serve(app, config, task_status=task_status)
            )
            path = "/metrics" if kind == "ours" else "/constant"
            _answer(binds[0].replace("http://", "https://") + path)
            buffered = b""
            while True:
                chunk = await stdin.receive_some()
                if not chunk:
                    break
                buffered += chunk
                while b"\n" in buffered:
                    line, buffered = buffered.split(b"\n", 1)
                    command, number = line.split()
                    if command == b"prepare":
                        prepared = families(int(number))
                    elif kind == "ours":
                        exposition.publish(prepared)
                    _answer("ok")
            nursery.cancel_scope.cancel()

    trio.run(main)


def main() -> None:
    """``KIND CERT KEY``."""
    kind, cert, key = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if kind == "prometheus_client":
        run_prometheus_client(cert, key)
    else:
        run_quart(kind, cert, key)


if __name__ == "__main__":
    main()
