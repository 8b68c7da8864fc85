"""The operator Settings (gpustack_core.settings): keys, seeds, sources, refusals."""

from __future__ import annotations

import base64
import ipaddress
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.settings import (
    BY_NAME,
    KEYS,
    SettingError,
    Settings,
    backfill,
    decode_secret_data,
    defaults,
    encode_secret_data,
    parse_bool,
    parse_cidrs,
    resolve,
    seeds,
)


def test_the_reference_names_and_defaults() -> None:
    """shared/reference/instancetypes.md: both gates false by default, this key spelling."""
    assert BY_NAME["instance-privileged-allowed"].default == "false"
    assert BY_NAME["instance-host-path-volume-allowed"].default == "false"
    assert BY_NAME["instance-ssh-server-image"].deprecated == ("instance-sshd-image",)
    assert BY_NAME["instance-privileged-allowed"].env == "GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED"
    assert defaults() == Settings()
    assert len({k.name for k in KEYS}) == len(KEYS)


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("True", True), ("1", True), ("false", False), ("F", False), (" 0 ", False)],
)
def test_booleans_read_as_go_reads_them(text: str, value: bool) -> None:
    assert parse_bool(text) is value


@pytest.mark.parametrize("text", ["yes", "on", "", "tru"])
def test_anything_else_is_no_boolean(text: str) -> None:
    with pytest.raises(SettingError):
        parse_bool(text)


def test_cidrs_refuse_host_bits() -> None:
    assert parse_cidrs("10.244.0.0/16, fd00::/56") == (
        ipaddress.ip_network("10.244.0.0/16"),
        ipaddress.ip_network("fd00::/56"),
    )
    with pytest.raises(SettingError, match=r"10\.0\.0\.1/8"):
        parse_cidrs("10.0.0.1/8")


def test_seeds_come_from_the_environment_and_a_bad_one_seeds_the_default() -> None:
    values, problems = seeds({
        "GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED": "true",
        "GPUSTACK_INSTANCE_CPU_OVERCOMMIT": "half",
        "GPUSTACK_UNRELATED": "x",
    })  # fmt: skip
    assert values["instance-privileged-allowed"] == "true"
    assert values["instance-cpu-overcommit"] == "1"
    assert values["instance-host-path-volume-allowed"] == "false"
    assert set(values) == {k.name for k in KEYS}
    assert len(problems) == 1
    assert "GPUSTACK_INSTANCE_CPU_OVERCOMMIT" in problems[0]


def test_the_secret_wins_then_the_deprecated_configmap_then_the_seed() -> None:
    seeded, _ = seeds({})
    configmap = {"instance-sshd-image": "registry.example/sshd:1",
                 "instance-cpu-overcommit": "4"}  # fmt: skip
    secret = {"instance-cpu-overcommit": "2", "instance-host-path-volume-allowed": "true"}
    found = resolve(secret, configmap, seeded, Settings())
    assert found.settings.instance_ssh_server_image == "registry.example/sshd:1"
    assert found.settings.instance_cpu_overcommit == Fraction(2)
    assert found.settings.instance_host_path_volume_allowed is True
    assert found.settings.instance_privileged_allowed is False
    assert found.sources["instance-ssh-server-image"] == "configmap"
    assert found.sources["instance-cpu-overcommit"] == "secret"
    assert found.sources["instance-privileged-allowed"] == "seed"
    assert found.shadowed == ("instance-cpu-overcommit",)


def test_a_bad_value_keeps_the_previous_one_and_says_why() -> None:
    seeded, _ = seeds({})
    before = Settings(instance_privileged_allowed=True, instance_memory_overcommit=Fraction(2))
    found = resolve({"instance-privileged-allowed": "maybe", "instance-memory-overcommit": "0.5"},
                    None, seeded, before)  # fmt: skip
    assert found.settings == before
    assert len(found.problems) == 2
    assert "gpustack-settings instance-privileged-allowed" in found.problems[0]


def test_backfill_writes_only_what_is_missing_and_migrates_the_configmap() -> None:
    seeded, _ = seeds({"GPUSTACK_INSTANCE_HOST_PATH_VOLUME_ALLOWED": "true"})
    configmap = {"instance-isolation-pod-cidrs": "10.244.0.0/16", "instance-sshd-image": "a b"}
    missing = backfill({"instance-privileged-allowed": "true"}, configmap, seeded)
    assert "instance-privileged-allowed" not in missing  # held: never overwritten
    assert missing["instance-host-path-volume-allowed"] == "true"  # the seed
    assert missing["instance-isolation-pod-cidrs"] == "10.244.0.0/16"  # migrated
    assert missing["instance-ssh-server-image"] == ""  # the ConfigMap's value does not parse
    full = {k.name: k.default for k in KEYS}
    assert backfill(full, configmap, seeded) == {}


@given(st.dictionaries(st.sampled_from([k.name for k in KEYS]), st.text(max_size=40)))
def test_secret_data_round_trips_and_resolving_never_raises(values: dict[str, str]) -> None:
    data = encode_secret_data(values)
    decoded, problems = decode_secret_data(data)
    assert decoded == values
    assert problems == []
    seeded, _ = seeds({})
    resolution = resolve(decoded, None, seeded, Settings())
    assert isinstance(resolution.settings, Settings)


def test_undecodable_secret_values_are_named_not_read() -> None:
    data = {"instance-privileged-allowed": "!!not base64", "ok": base64.b64encode(b"x").decode(),
            "bytes": base64.b64encode(b"\xff").decode()}  # fmt: skip
    decoded, problems = decode_secret_data(data)
    assert decoded == {"ok": "x"}
    assert len(problems) == 2


def test_docs_settings_md_lists_every_key_with_its_default() -> None:
    """docs/settings.md's table is the served keys, in order, with their defaults."""
    document = (Path(__file__).resolve().parents[3] / "docs" / "settings.md").read_text()
    section = document.split("## Keys", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    assert [(r[0].strip("`"), r[1].strip("`")) for r in rows] == [
        (k.name, k.default if k.default else '""') for k in KEYS
    ]
