"""Reading a Pod container out of ``/proc/<pid>/cgroup``: every driver, runtime and doubt."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpus_paths import corpus_dir, needs_corpus
from gpustack_core.reasons import AttributionReason
from gpustack_devicemanager.cgroup import CgroupIdentity, parse_cgroup

R = AttributionReason
UID = "0b9f3c1e-2d4a-4e6b-8c7d-9e0f1a2b3c4d"
UID_ = UID.replace("-", "_")
OTHER_UID = "11111111-2222-4333-8444-555555555555"
STATIC = "d066eacd240995c42fa187b900a52115"  # a static Pod's UID: its manifest hash
CID = "5dab0ec4aebed0b17e8b783c11b859f43da98335fd4973a396ed7bbdab6659f3"
OTHER_CID = "2b78f9fa3929001b038625607be8a97af3fb9066246513e5c15343fb52dd99d9"
ME = CgroupIdentity(pod_uid=UID, container_id=CID)

PROC_CGROUP = "proc-cgroup"


def v1(path: str) -> str:
    """A cgroup v1 file: one line per hierarchy, all in the same cgroup, plus v2's ``0::/``."""
    controllers = ["cpuset", "cpu,cpuacct", "memory", "devices", "pids", "name=systemd"]
    lines = [
        f"{n}:{c}:{path}" for n, c in zip(range(len(controllers), 0, -1), controllers, strict=True)
    ]
    return "\n".join([*lines, "0::/"]) + "\n"


def v2(path: str) -> str:
    return f"0::{path}\n"


# -- every way a kubelet and a runtime name a container's cgroup ------------------------------

NAMED = {
    "cgroupfs burstable": f"/kubepods/burstable/pod{UID}/{CID}",
    "cgroupfs guaranteed (no QoS level)": f"/kubepods/pod{UID}/{CID}",
    "cgroupfs nested kubepods": f"/kubepods/kubepods/besteffort/pod{UID}/{CID}",
    "kind node (cgroupfs under docker)": f"/docker/pod{UID}/{CID}",
    "systemd containerd": (
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope"
    ),
    "systemd guaranteed": f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
    "systemd CRI-O": (
        f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/"
        f"crio-{CID}.scope"
    ),
    "systemd docker": f"/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CID}.scope",
    "systemd plain containerd": f"/kubepods.slice/kubepods-pod{UID_}.slice/containerd-{CID}.scope",
    "containerd slice:runtime:id": f"/kubepods-burstable-pod{UID_}.slice:cri-containerd:{CID}",
    "containerd slice:runtime:id under containerd.service": (
        f"/system.slice/containerd.service/kubepods-burstable-pod{UID_}.slice:cri-containerd:{CID}"
    ),
    "systemd slice spelled with dashes": f"/kubepods-burstable-pod{UID}.slice:cri-containerd:{CID}",
    "node in a container (minikube)": (
        f"/system.slice/docker-{OTHER_CID}.scope/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope"
    ),
    "cgroups made inside the container": f"/kubepods/burstable/pod{UID}/{CID}/init.scope/x",
}


@pytest.mark.parametrize("path", NAMED.values(), ids=NAMED.keys())
@pytest.mark.parametrize("render", [v1, v2], ids=["v1", "v2"])
def test_each_layout_names_the_pod_and_container(path: str, render: Callable[[str], str]) -> None:
    assert parse_cgroup(render(path)) == ME


@pytest.mark.parametrize(
    "path",
    [
        f"/kubepods/besteffort/pod{STATIC}/{CID}",
        f"/kubepods.slice/kubepods-pod{STATIC}.slice/crio-{CID}.scope",
    ],
    ids=["cgroupfs", "systemd"],
)
def test_static_pod_hash_is_a_pod_uid(path: str) -> None:
    assert parse_cgroup(v2(path)) == CgroupIdentity(pod_uid=STATIC, container_id=CID)


def test_systemd_uid_is_given_back_with_dashes_as_the_api_server_writes_it() -> None:
    parsed = parse_cgroup(v2(NAMED["systemd containerd"]))
    assert isinstance(parsed, CgroupIdentity)
    assert parsed.pod_uid == UID
    assert "_" not in parsed.pod_uid


def test_container_id_floor_is_eight_hex_digits() -> None:
    assert parse_cgroup(v2(f"/kubepods/pod{UID}/{CID[:8]}")) == CgroupIdentity(UID, CID[:8])
    assert parse_cgroup(v2(f"/kubepods/pod{UID}/{CID[:7]}")) == R.NO_CONTAINER_COMPONENT


# -- what cannot be placed ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "0::/\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        v1("/system.slice/nvidia-persistenced.service"),
        v2(f"/system.slice/docker-{CID}.scope"),  # a container, but no Pod
        v2(f"/docker/{CID}"),
        v2(f"/kubepods/besteffort/{CID}"),  # the QoS level, no Pod below it
        v2(f"/kubepods/besteffort/pod{UID[:-1]}/{CID}"),  # 35 characters: not a UID
        v2(f"/kubepods/besteffort/pod{STATIC}0/{CID}"),  # 33 hex: neither form
        v2(f"/kubepods/besteffort/pod{UID.upper()}/{CID}"),  # the kubelet writes lowercase
        v2(f"/kubepods.slice/kubepods-xpod{UID_}.slice/{CID}"),  # "xpod" is not "-pod"
        v2(f"/kubepods/burstable/mypod{UID}/{CID}"),
        v2(f"/machine.slice/machine-libpod_pod_{CID}.slice/libpod-{CID}.scope"),  # podman
    ],
)
def test_no_pod_component(text: str) -> None:
    assert parse_cgroup(text) == R.NO_POD_COMPONENT


@pytest.mark.parametrize(
    "path",
    [
        f"/kubepods/burstable/pod{UID}",  # the Pod's own cgroup
        f"/kubepods.slice/kubepods-pod{UID_}.slice",
        f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{CID}.scope",  # CRI-O's monitor
        f"/kubepods/burstable/pod{UID}/not-a-container",
        f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.service",
        f"/kubepods.slice/kubepods-pod{UID_}.slice/runc-{CID}.scope",  # an unknown runtime
        f"/kubepods/burstable/pod{UID}/{CID.upper()}",
        f"/kubepods-burstable-pod{UID_}.slice:cri-containerd:xyz",
    ],
)
def test_no_container_component(path: str) -> None:
    assert parse_cgroup(v2(path)) == R.NO_CONTAINER_COMPONENT


def test_lines_naming_different_pods_are_ambiguous() -> None:
    text = f"4:memory:/kubepods/pod{UID}/{CID}\n3:cpu:/kubepods/pod{OTHER_UID}/{CID}\n"
    assert parse_cgroup(text) == R.AMBIGUOUS_POD


def test_two_pods_in_one_path_are_ambiguous() -> None:
    nested = f"/kubepods/pod{OTHER_UID}/{OTHER_CID}/kubepods/pod{UID}/{CID}"
    assert parse_cgroup(v2(nested)) == R.AMBIGUOUS_POD


def test_the_same_pod_named_twice_in_a_path_is_not_ambiguous() -> None:
    path = f"/kubepods.slice/kubepods-pod{UID_}.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope"
    assert parse_cgroup(v2(path)) == ME


def test_lines_naming_different_containers_are_ambiguous() -> None:
    text = f"4:memory:/kubepods/pod{UID}/{CID}\n3:cpu:/kubepods/pod{UID}/{OTHER_CID}\n"
    assert parse_cgroup(text) == R.AMBIGUOUS_CONTAINER


def test_a_line_at_pod_level_does_not_contradict_one_naming_the_container() -> None:
    text = f"4:memory:/kubepods/pod{UID}\n3:cpu:/kubepods/pod{UID}/{CID}\n"
    assert parse_cgroup(text) == ME


def test_lines_outside_any_pod_do_not_contradict() -> None:
    text = f"5:rdma:/\n4:memory:/kubepods/pod{UID}/{CID}\n0::/\n"
    assert parse_cgroup(text) == ME


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "some invalid line\n",
        f"memory:/kubepods/pod{UID}/{CID}\n",  # no hierarchy id
        f"x:memory:/kubepods/pod{UID}/{CID}\n",
        f"4:memory:kubepods/pod{UID}/{CID}\n",  # path not absolute
        f"4:memory:/kubepods/pod{UID}/{CID}\ngarbage\n",  # one bad line spoils the read
    ],
)
def test_text_that_is_not_a_cgroup_file_is_unreadable(text: str) -> None:
    assert parse_cgroup(text) == R.UNREADABLE


def test_only_newline_separates_lines() -> None:
    """The kernel writes ``\\n``; a form feed inside a name must not split a line into two."""
    assert parse_cgroup(f"0::/kubepods/pod{UID}/{CID}\x0c\n") == R.NO_CONTAINER_COMPONENT


# -- properties ---------------------------------------------------------------------------------

HEX = "0123456789abcdef"
uuids = st.uuids().map(str)
statics = st.text(HEX, min_size=32, max_size=32)
container_ids = st.text(HEX, min_size=8, max_size=64)


def render_path(uid: str, cid: str, driver: str, runtime: str, qos: str) -> str:
    if driver == "cgroupfs":
        qos_part = f"/{qos}" if qos else ""
        return f"/kubepods{qos_part}/pod{uid}/{cid}"
    scope = f"{runtime}-{cid}.scope" if runtime else cid
    slug = uid.replace("-", "_")
    if qos:
        return f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{slug}.slice/{scope}"
    return f"/kubepods.slice/kubepods-pod{slug}.slice/{scope}"


@given(
    uid=uuids | statics,
    cid=container_ids,
    driver=st.sampled_from(["cgroupfs", "systemd"]),
    runtime=st.sampled_from(["", "cri-containerd", "containerd", "crio", "docker"]),
    qos=st.sampled_from(["", "burstable", "besteffort"]),
    version=st.sampled_from([v1, v2]),
)
def test_every_rendered_layout_reads_back(
    uid: str, cid: str, driver: str, runtime: str, qos: str, version: Callable[[str], str]
) -> None:
    text = version(render_path(uid, cid, driver, runtime, qos))
    assert parse_cgroup(text) == CgroupIdentity(pod_uid=uid, container_id=cid)


@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    assert isinstance(parse_cgroup(text), CgroupIdentity | AttributionReason)


SEGMENTS = st.sampled_from(
    [
        "", "kubepods", "kubepods.slice", "burstable", f"pod{UID}", f"pod{OTHER_UID}",
        f"kubepods-pod{UID_}.slice", f"kubepods-besteffort-pod{UID_}.slice", CID, OTHER_CID,
        f"crio-{CID}.scope", f"docker-{OTHER_CID}.scope", f"crio-conmon-{CID}.scope",
        f"kubepods-pod{UID_}.slice:cri-containerd:{CID}", "pod", "-pod.slice", ".slice", ":",
        "pod_.slice", "system.slice", "x" * 40,
    ]
)  # fmt: skip
lines = st.builds(
    lambda n, ctl, segs: f"{n}:{ctl}:/" + "/".join(segs),
    st.integers(0, 20),
    st.sampled_from(["", "memory", "cpu,cpuacct", "name=systemd"]),
    st.lists(SEGMENTS, max_size=8),
)


@given(st.lists(lines, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_answer_does_not_depend_on_line_order(text_lines: list[str], rnd: random.Random) -> None:
    """Pod-shaped noise: whatever the answer, it is one of the two types and order-free."""
    first = parse_cgroup("\n".join(text_lines))
    assert isinstance(first, CgroupIdentity | AttributionReason)
    rnd.shuffle(text_lines)
    assert parse_cgroup("\n".join(text_lines)) == first


@given(st.lists(lines, min_size=1, max_size=6))
def test_an_identity_is_always_named_by_the_text(text_lines: list[str]) -> None:
    parsed = parse_cgroup("\n".join(text_lines))
    if isinstance(parsed, CgroupIdentity):
        text = "\n".join(text_lines)
        assert parsed.container_id in text
        assert parsed.pod_uid in text or parsed.pod_uid.replace("-", "_") in text


def test_a_huge_hostile_segment_is_read_quickly() -> None:
    """No regex backtracking blow-up: the kernel caps a path, a fuzzer does not."""
    segment = "kubepods-" + "-pod" * 50_000 + "x.slice"
    assert parse_cgroup(v2(f"/{segment}/{CID}")) == R.NO_POD_COMPONENT


# -- the corpus of real files -------------------------------------------------------------------

# What each real file reads as, in full. Docker, ECS, Fargate, Cloud Foundry, LXC and plain
# hosts have no Pod; the mountinfo files are not cgroup files at all.
CORPUS_EXPECTED: dict[str, CgroupIdentity | AttributionReason] = {
    "container-info-mixed-k8s-cgroup.txt": R.AMBIGUOUS_POD,  # different Pods per line, on purpose
    "libdatadog-cgroup.docker.txt": R.NO_POD_COMPONENT,
    "libdatadog-cgroup.ecs.txt": R.NO_POD_COMPONENT,
    "libdatadog-cgroup.edge_cases.txt": R.UNREADABLE,  # holds "some invalid line"
    "libdatadog-cgroup.fargate.1.4.txt": R.NO_POD_COMPONENT,
    "libdatadog-cgroup.fargate.txt": R.NO_POD_COMPONENT,
    "libdatadog-cgroup.kubernetes.txt": CgroupIdentity(
        "3d274242-8ee0-11e9-a8a6-1e68d864ef1a",
        "3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1",
    ),
    "libdatadog-cgroup.multiple_controllers.txt": R.NO_POD_COMPONENT,
    "libdatadog-cgroup.pcf.txt": R.NO_POD_COMPONENT,
    "libdatadog-cgroup.v2_custom_path.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-docker-0.9.1.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-docker-1.0.0.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-docker-1.1.2-lxc-driver.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-docker-1.1.2-native-driver-fs.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-docker-1.1.2-native-driver-systemd.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-docker-1.3.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-docker-custom-prefix.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-heroku.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-invalid-length.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-ubuntu-14.04-lxc-container.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-ubuntu-14.04-no-container.txt": R.NO_POD_COMPONENT,
    "nr-cross-agent-v2-docker-24.0.2-mountinfo.txt": R.UNREADABLE,
    "otel-ebpf-buildkit.txt": R.NO_POD_COMPONENT,
    "otel-ebpf-cgroupv1altkubernetes.txt": CgroupIdentity(
        "4ae91c13-1bb1-4baa-b7c3-ce86ddcf944b",
        "af24eca41b7e02d7f8991153fbc255cb7e9b79e812bdbe6d8b95538b59417e2b",
    ),
    "otel-ebpf-cgroupv1crikubernetes.txt": CgroupIdentity(
        "d8559883-9d60-478a-8cb5-cc238a63d908",
        "5dab0ec4aebed0b17e8b783c11b859f43da98335fd4973a396ed7bbdab6659f3",
    ),
    "otel-ebpf-cgroupv1crikubernetes3.txt": CgroupIdentity(
        "515352eb-790e-4efd-a555-45d6692fa81e",
        "2b78f9fa3929001b038625607be8a97af3fb9066246513e5c15343fb52dd99d9",
    ),
    "otel-ebpf-cgroupv1docker.txt": R.NO_POD_COMPONENT,
    "otel-ebpf-cgroupv1dockerpods.txt": CgroupIdentity(
        "a9c80282-3f6b-4d5b-84d5-a137a6668011",
        "dd89697807a981b82f6245ac3a13be232c1e13435d52bc3f53060d61babe1997",
    ),
    "otel-ebpf-cgroupv1kubernetes.txt": CgroupIdentity(
        "a9c80282-3f6b-4d5b-84d5-a137a6668011",
        "ed89697807a981b82f6245ac3a13be232c1e13435d52bc3f53060d61babe1997",
    ),
    "otel-ebpf-cgroupv2altkubernetes.txt": CgroupIdentity(
        "7ee511e9-1393-4000-a524-12b0ad30a6b3",
        "6fb31c47139f555a77f6dea60260eb38006755059cec4dfac8766310306dd3ee",
    ),
    "otel-ebpf-cgroupv2docker.txt": R.NO_POD_COMPONENT,
    "otel-ebpf-cgroupv2dockerpods.txt": CgroupIdentity(
        "a9c80282-3f6b-4d5b-84d5-a137a6668011",
        "dd89697807a981b82f6245ac3a13be232c1e13435d52bc3f53060d61babe1997",
    ),
    "otel-ebpf-cgroupv2kubernetes.txt": CgroupIdentity(
        "a9c80282-3f6b-4d5b-84d5-a137a6668011",
        "ed89697807a981b82f6245ac3a13be232c1e13435d52bc3f53060d61babe1997",
    ),
    "otel-ebpf-cgroupv2minikube-docker.txt": CgroupIdentity(
        "7099802f-73fa-458a-9941-d3aaae7df23d",
        "b2c7024b6f161fb48efb73804d46c9cd4fa22c09c115976e311b5d3667955819",
    ),
    "otel-ebpf-containerdRedis.txt": R.NO_POD_COMPONENT,
    "otel-ebpf-lxcpayload.txt": R.NO_POD_COMPONENT,
    "otel-java-containerd-mountinfo.txt": R.UNREADABLE,
    "otel-java-crio-openshift-mountinfo.txt": R.UNREADABLE,
}


@needs_corpus(PROC_CGROUP)
def test_every_text_file_of_the_corpus_is_pinned() -> None:
    """A file added to the corpus must be looked at, not silently parsed into anything."""
    names = {p.name for p in corpus_dir(PROC_CGROUP).glob("*.txt")}
    assert names == set(CORPUS_EXPECTED)


@needs_corpus(PROC_CGROUP)
@pytest.mark.parametrize("name", sorted(CORPUS_EXPECTED))
def test_corpus_file(name: str) -> None:
    text = (corpus_dir(PROC_CGROUP) / name).read_text()
    assert parse_cgroup(text) == CORPUS_EXPECTED[name]


@needs_corpus(PROC_CGROUP)
@pytest.mark.parametrize("path", sorted(p.name for p in corpus_dir(PROC_CGROUP).glob("*")))
def test_every_corpus_file_parses_without_raising(path: str) -> None:
    text = (corpus_dir(PROC_CGROUP) / path).read_bytes().decode("utf-8", "replace")
    assert isinstance(parse_cgroup(text), CgroupIdentity | AttributionReason)


def kubepods_lines() -> list[tuple[str, str]]:
    """Every real ``/proc/<pid>/cgroup`` line of the corpus that mentions ``kubepods``."""
    found: list[tuple[str, str]] = []
    folder = corpus_dir(PROC_CGROUP)
    if not folder.is_dir():
        return found
    for file in sorted(folder.glob("*.txt")):
        if "mountinfo" in file.name:
            continue
        found.extend(
            (f"{file.name}:{n}", line)
            for n, line in enumerate(file.read_text().splitlines(), 1)
            if "kubepods" in line
        )
    return found


@needs_corpus(PROC_CGROUP)
@pytest.mark.parametrize(("where", "line"), kubepods_lines())
def test_every_real_kubepods_line_names_a_pod_and_container(where: str, line: str) -> None:
    assert isinstance(parse_cgroup(line), CgroupIdentity), where


@needs_corpus(PROC_CGROUP)
def test_the_corpus_has_kubepods_lines_to_check() -> None:
    assert len(kubepods_lines()) >= 40


# container-info's per-line expectations (test/fixtures/result.js upstream, 14-line revision).
# Upstream keeps the systemd slice's underscores in the Pod id; the API server's UID has dashes.
MIXED_BY_LINE = {
    "14": ("0e886e9a-3879-45f9-b44d-86ef9df03224",
           "244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4"),
    "13": ("5eadac96-ab58-11ea-b82b-0242ac110009",
           "7fe41c8a2d1da09420117894f11dd91f6c3a44dfeb7d125dc594bd53468861df"),
    "12": ("22949dce-fd8b-11ea-8ede-98f2b32c645c",
           "b15a5bdedd2e7645c3be271364324321b908314e4c77857bbfd32a041148c07f"),
    **{
        str(n): ("74c13223-5a00-11e9-b385-42010a80018d",
                 "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376")
        for n in range(1, 12)
    },
}  # fmt: skip


@needs_corpus(PROC_CGROUP)
def test_mixed_file_line_by_line_matches_upstream() -> None:
    text = (corpus_dir(PROC_CGROUP) / "container-info-mixed-k8s-cgroup.txt").read_text()
    seen = set()
    for line in text.splitlines():
        hierarchy = line.split(":", 1)[0]
        pod, container = MIXED_BY_LINE[hierarchy]
        assert parse_cgroup(line) == CgroupIdentity(pod, container), line
        seen.add(hierarchy)
    assert seen == set(MIXED_BY_LINE)


def elastic_cases() -> list[tuple[str, dict[str, object]]]:
    file = corpus_dir(PROC_CGROUP) / "elastic-apm-container-metadata-discovery.json"
    if not file.is_file():
        return []
    return sorted(json.loads(file.read_text()).items())


@needs_corpus(PROC_CGROUP)
@pytest.mark.parametrize(("name", "case"), elastic_cases())
def test_elastic_cross_agent_case(name: str, case: dict[str, object]) -> None:
    files = case["files"]
    assert isinstance(files, dict)
    parsed = parse_cgroup("\n".join(files["/proc/self/cgroup"]) + "\n")
    pod = case["podId"]
    if pod is None:
        # A Docker container, an ECS task, a desktop session: nothing a kubelet made.
        assert parsed == R.NO_POD_COMPONENT, name
    else:
        assert isinstance(pod, str)
        assert parsed == CgroupIdentity(pod.replace("_", "-"), str(case["containerId"])), name


@needs_corpus(PROC_CGROUP)
def test_elastic_cases_include_pods() -> None:
    assert sum(case["podId"] is not None for _, case in elastic_cases()) == 3


_MOUNT = re.compile(r"\S+ \S+ \S+ (?P<root>\S+) \S+ .* - (?P<fstype>cgroup2?) ")


def cgroup_mount_roots(mountinfo: str) -> list[str]:
    """The root of each cgroup mount: inside a container, its own cgroup as the host names it."""
    return [m["root"] for m in map(_MOUNT.match, mountinfo.splitlines()) if m]


MOUNTINFO_EXPECTED = {
    "otel-java-containerd-mountinfo.txt": CgroupIdentity(
        "321c09bf-282b-44e4-a467-39daf144ef1f",
        "f2a44bc8e090f93a2b4d7f510bdaff0615ad52906e3287ee956dcf5aa5012a91",
    ),
    "otel-java-crio-openshift-mountinfo.txt": CgroupIdentity(
        "8f215fa2-6177-4ab9-b1f4-c802d19657bc",
        "f23ec1d4b715c6531a17e9c549222fbbe1f7ffff697a29a2212b3b4cdc37f52e",
    ),
    "nr-cross-agent-v2-docker-24.0.2-mountinfo.txt": R.NO_POD_COMPONENT,  # plain docker, root "/"
}


@needs_corpus(PROC_CGROUP)
@pytest.mark.parametrize("name", sorted(MOUNTINFO_EXPECTED))
def test_cgroup_paths_revealed_by_mountinfo(name: str) -> None:
    """What the host's ``/proc/<pid>/cgroup`` would say for these containers' processes."""
    roots = cgroup_mount_roots((corpus_dir(PROC_CGROUP) / name).read_text())
    assert roots, name
    text = "".join(f"{n}:x:{root}\n" for n, root in enumerate(roots, 1))
    assert parse_cgroup(text) == MOUNTINFO_EXPECTED[name]


@needs_corpus(PROC_CGROUP)
def test_gardener_mountinfo_agrees_with_its_expected_ids() -> None:
    case = dict(elastic_cases())["gardener"]
    files = case["files"]
    assert isinstance(files, dict)
    roots = cgroup_mount_roots("\n".join(files["/proc/self/mountinfo"]))
    assert parse_cgroup("".join(f"0::{root}\n" for root in roots)) == CgroupIdentity(
        "121157b5-c67d-4c3e-9052-cb27bbb711fb",
        "1cd3449e930b8a28c7595240fa32ba20c84f36d059e5fbe63104ad40057992d1",
    )


def nr_cases() -> list[tuple[str, str | None]]:
    file = corpus_dir(PROC_CGROUP) / "nr-cross-agent-cases.json"
    if not file.is_file():
        return []
    folder = file.parent
    return [
        (case["filename"], case["containerId"])
        for case in json.loads(file.read_text())
        if (folder / f"nr-cross-agent-{case['filename']}").is_file()
    ]


@needs_corpus(PROC_CGROUP)
@pytest.mark.parametrize(("name", "expected"), nr_cases())
def test_new_relic_container_ids_under_a_pod(name: str, expected: str | None) -> None:
    """New Relic's Docker-host files, each cgroup's last component moved under a Pod.

    On their own these hosts have no Pod (pinned above); transplanted, they check that the
    container component is read as New Relic expects. One known divergence: New Relic rejects
    a 12-hex ID as too short, while the operator reference sets the floor at 8 hex digits; such
    an ID can still only match a container the Pod's status lists, so it cannot misplace a row.
    """
    text = (corpus_dir(PROC_CGROUP) / f"nr-cross-agent-{name}").read_text()
    moved = "".join(
        f"{n}:x:/kubepods/besteffort/pod{UID}/{line.rsplit('/', 1)[-1]}\n"
        for n, line in enumerate(text.splitlines(), 1)
    )
    parsed = parse_cgroup(moved)
    if name == "invalid-length.txt":
        assert parsed == CgroupIdentity(UID, "47cbd16b77c5")
    elif expected is None:
        assert parsed == R.NO_CONTAINER_COMPONENT
    else:
        assert parsed == CgroupIdentity(UID, expected)


@needs_corpus(PROC_CGROUP)
def test_new_relic_cases_are_found() -> None:
    assert len(nr_cases()) == 11


# cAdvisor's id labels are real cgroup paths of the very nodes the kubelet summaries come from.
CADVISOR = [
    ("nri-k8s-1.16-kubelet-metrics-cadvisor.txt", "nri-k8s-1.16-summary.json"),  # docker, systemd
    ("nri-k8s-1.19-kubelet-metrics-cadvisor.txt", "nri-k8s-1.19-summary.json"),  # containerd, fs
]
_SERIES = re.compile(r'\{[^}]*\bid="(?P<id>/kubepods[^"]*)"[^}]*\}')
_LABEL = re.compile(r'(?P<key>\w+)="(?P<value>[^"]*)"')


@needs_corpus("other")
@needs_corpus("kubelet-summary")
@pytest.mark.parametrize(("cadvisor", "summary"), CADVISOR)
def test_cadvisor_cgroup_paths_name_the_summary_pods(cadvisor: str, summary: str) -> None:
    pods = {
        p["podRef"]["uid"]: (p["podRef"]["namespace"], p["podRef"]["name"])
        for p in json.loads((corpus_dir("kubelet-summary") / summary).read_text())["pods"]
    }
    containers: dict[str, set[str]] = {}
    named: dict[str, set[tuple[str, str]]] = {}
    for match in _SERIES.finditer((corpus_dir("other") / cadvisor).read_text()):
        labels = {m["key"]: m["value"] for m in _LABEL.finditer(match[0])}
        parsed = parse_cgroup(f"0::{match['id']}\n")
        if isinstance(parsed, CgroupIdentity):
            named.setdefault(parsed.pod_uid, set()).add((labels["namespace"], labels["pod"]))
            if re.fullmatch("[0-9a-f]{64}", labels.get("name", "")):
                assert parsed.container_id == labels["name"]
            containers.setdefault(parsed.pod_uid, set()).add(parsed.container_id)
        elif re.search("(^|-)pod[0-9a-f]", match["id"].rsplit("/", 1)[-1]):
            assert parsed == R.NO_CONTAINER_COMPONENT, match["id"]
        else:
            assert parsed == R.NO_POD_COMPONENT, match["id"]
            assert match["id"].count("/") <= 2
    # Each UID read from a path is the one cAdvisor labels with that Pod's name, and every
    # Pod of the summary is among them (cAdvisor also saw two short-lived CronJob Pods in 1.19).
    assert all(len(names) == 1 for names in named.values())
    assert {uid: names.pop() for uid, names in named.items() if uid in pods} == pods
    assert all(len(containers[uid]) >= 2 for uid in pods)
