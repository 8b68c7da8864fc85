"""Real kubectl writes against the cluster stand-in: apply, get, patch, label, delete.

kubectl validates against the server's OpenAPI, which the stand-in does not publish, so each
write passes ``--validate=false`` (docs/scenarios.md says so).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.testing import cluster_standin
from patience import HANG

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed here")

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: selected
  namespace: default
spec:
  nodeSelector:
    kubernetes.io/hostname: {node}
  containers:
    - name: app
      image: busybox
"""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[RunningCluster]:
    async with cluster_standin("nvidia-mixed", tmp_path) as running:
        yield running


async def kubectl(cluster: RunningCluster, *args: str) -> str:
    assert KUBECTL is not None
    done = await trio.run_process(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def test_apply_runs_the_pod_on_the_selected_node_and_delete_removes_it(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    nodes = json.loads(await kubectl(cluster, "get", "nodes", "-o", "json"))["items"]
    node = nodes[-1]["metadata"]["name"]
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD.format(node=node))
    await kubectl(cluster, "apply", "--validate=false", "-f", str(manifest))
    with trio.fail_after(HANG):
        while True:
            pod = json.loads(await kubectl(cluster, "get", "pod", "selected", "-o", "json"))
            if pod["status"].get("phase") == "Running":
                break
            await trio.sleep(0.2)
    assert pod["spec"]["nodeName"] == node
    await kubectl(cluster, "label", "pod", "selected", "tier=gold")
    await kubectl(cluster, "annotate", "pod", "selected", "note=hi")
    await kubectl(
        cluster,
        "patch",
        "pod",
        "selected",
        "--type",
        "merge",
        "-p",
        '{"metadata":{"labels":{"m":"1"}}}',
    )
    await kubectl(
        cluster,
        "patch",
        "pod",
        "selected",
        "--type",
        "json",
        "-p",
        '[{"op":"add","path":"/metadata/labels/j","value":"2"}]',
    )
    await kubectl(
        cluster,
        "patch",
        "pod",
        "selected",
        "--type",
        "strategic",
        "-p",
        '{"metadata":{"labels":{"s":"3"}}}',
    )
    shown = json.loads(await kubectl(cluster, "get", "pod", "selected", "-o", "json"))
    assert {"tier": "gold", "m": "1", "j": "2", "s": "3"}.items() <= shown["metadata"][
        "labels"
    ].items()
    assert shown["metadata"]["annotations"]["note"] == "hi"
    assert "kubectl.kubernetes.io/last-applied-configuration" in shown["metadata"]["annotations"]
    await kubectl(cluster, "delete", "pod", "selected", "--wait=true", "--timeout=10s")
    listed = await kubectl(cluster, "get", "pods", "-n", "default", "-o", "name")
    assert "pod/selected" not in listed


async def test_a_pod_owned_by_a_deleted_configmap_is_collected(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    # From a manifest: `kubectl create configmap` posts protobuf, which the stand-in refuses.
    owner_file = tmp_path / "owner.json"
    owner_file.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "owner", "namespace": "default"},
            }
        )
    )
    await kubectl(cluster, "create", "--validate=false", "-f", str(owner_file))
    owner = json.loads(
        await kubectl(cluster, "get", "configmap", "owner", "-n", "default", "-o", "json")
    )
    manifest = tmp_path / "owned.json"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "owned",
                    "namespace": "default",
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "name": "owner",
                            "uid": owner["metadata"]["uid"],
                        }
                    ],
                },
                "spec": {"containers": [{"name": "app", "image": "busybox"}]},
            }
        )
    )
    await kubectl(cluster, "create", "--validate=false", "-f", str(manifest))
    await kubectl(cluster, "delete", "configmap", "owner", "-n", "default")
    listed = await kubectl(cluster, "get", "pods", "-n", "default", "-o", "name")
    assert "pod/owned" not in listed
