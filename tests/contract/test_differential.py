"""The stand-in answers as kube-apiserver does: the same requests, the same reduced answers.

The expected answers are the real server's (``golden/``, recorded from kube-apiserver built
from its Go module, see :mod:`differential`). Against the stand-in they are the main suite's
check that it is no more lenient than Kubernetes; against the real control plane
(``./dev e2e-real``) they check the recording still holds, or, with
``GPUSTACK_RECORD_GOLDEN=1``, are recorded afresh.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from contract_target import Server
from differential import CASES, Case, run_case

from gpustack_simulator.testing import cluster_standin

GOLDEN = Path(__file__).parent / "golden" / "kube-apiserver.json"
"""``{"serverVersion": …, "cases": {name: [answer, …]}}``, recorded from the real server."""
RECORD = os.environ.get("GPUSTACK_RECORD_GOLDEN") == "1"


def golden() -> dict[str, Any]:
    recorded: dict[str, Any] = (
        json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {"serverVersion": "", "cases": {}}
    )
    return recorded


@pytest.fixture
async def standin(tmp_path: Path) -> AsyncIterator[Server]:
    async with cluster_standin("nvidia-mixed", tmp_path) as cluster:
        token = next(u.token for u in cluster.state.expanded.users if u.name == "admin")
        context = ssl.create_default_context(cafile=str(cluster.state.pki.ca))
        yield Server(cluster.url, context, token)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_the_standin_answers_as_kube_apiserver(case: Case, standin: Server) -> None:
    expected = golden()["cases"].get(case.name)
    if expected is None:
        pytest.fail(f"no recorded answer for {case.name!r} in {GOLDEN.name}: record it (./dev "
                    "e2e-real with GPUSTACK_RECORD_GOLDEN=1)")  # fmt: skip
    answers = await run_case(case, standin.url, standin.context, standin.token,
                             await standin.namespace())  # fmt: skip
    assert answers == expected


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_kube_apiserver_answers_as_recorded(case: Case, real_server: Server) -> None:
    answers = await run_case(case, real_server.url, real_server.context, real_server.token,
                             await real_server.namespace())  # fmt: skip
    recorded = golden()
    if RECORD:
        recorded["serverVersion"] = real_server.version
        recorded["cases"][case.name] = answers
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return
    assert recorded["serverVersion"] == real_server.version, "re-record for this release"
    assert answers == recorded["cases"].get(case.name)
