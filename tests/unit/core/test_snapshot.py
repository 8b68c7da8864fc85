"""The snapshot envelope: parsing, absence, freshness and schema gating."""

import contextlib
import json
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.decoding import ContractError
from gpustack_core.snapshot import (
    DEFAULT_FRESHNESS_POLICY,
    ZERO_TIME,
    Freshness,
    MonitorSnapshot,
    SliceSection,
    encode_snapshot,
    is_fresh,
    parse_snapshot,
    slices_readable,
)

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)

FULL = {
    "timestamp": "2026-11-29T09:00:00Z",
    "periodSeconds": 15,
    "groups": [
        {
            "manufacturer": "nvidia",
            "timestamp": "2026-11-29T09:00:00Z",
            "accelerators": [
                {
                    "id": "GPU-0",
                    "memory": 81559,
                    "memoryUsage": 100,
                    "memoryUtilization": 1,
                    "coresUtilization": 0,
                    "temperature": 33,
                    "powerUsage": 69.9,
                    "unhealthy": False,
                }
            ],
        }
    ],
    "slices": {
        "schemaVersion": 1,
        "truncated": True,
        "usages": [
            {
                "manufacturer": "nvidia",
                "podUID": "p",
                "container": "main",
                "deviceID": "GPU-0",
                "memoryUsedMiB": 5,
            }
        ],
        "devices": [
            {
                "manufacturer": "nvidia",
                "deviceID": "GPU-0",
                "coresReason": "unsupported",
                "rowsReturned": 2,
                "rowsAttributed": 1,
                "rowsNonInstance": 1,
            }
        ],
        "partitions": [
            {
                "manufacturer": "nvidia",
                "podUID": "p",
                "container": "main",
                "deviceID": "GPU-0",
                "id": "MIG-1",
                "memoryTotalMiB": 9856,
                "memoryUsedMiB": 0,
            }
        ],
    },
}


def test_round_trip_keeps_every_key() -> None:
    snapshot = parse_snapshot(json.dumps(FULL))
    again = json.loads(encode_snapshot(snapshot))
    assert again["slices"]["usages"] == FULL["slices"]["usages"]
    assert again["slices"]["partitions"] == FULL["slices"]["partitions"]
    assert again["slices"]["devices"][0]["coresReason"] == "unsupported"
    assert "memoryReason" not in again["slices"]["devices"][0]  # empty reason = answered
    assert again["groups"][0]["accelerators"] == FULL["groups"][0]["accelerators"]
    assert again["periodSeconds"] == 15
    assert snapshot.slices is not None
    assert snapshot.slices.truncated


def test_absent_slices_differs_from_empty_slices() -> None:
    without = parse_snapshot(json.dumps({**FULL, "slices": None}))
    assert without.slices is None
    missing = parse_snapshot(json.dumps({k: v for k, v in FULL.items() if k != "slices"}))
    assert missing.slices is None
    assert "slices" not in json.loads(encode_snapshot(missing))
    empty = parse_snapshot(json.dumps({**FULL, "slices": {"schemaVersion": 1}}))
    assert empty.slices == SliceSection(schema_version=1)


def test_card_figures_may_be_absent() -> None:
    doc = {
        "groups": [
            {"manufacturer": "amd", "accelerators": [{"id": "0000:8a:00.0", "unhealthy": False}]}
        ]
    }
    card = parse_snapshot(json.dumps(doc)).groups[0].accelerators[0]
    assert card.memory_usage is None
    assert card.cores_utilization is None
    assert card.temperature is None


def test_before_the_first_tick_is_never_fresh() -> None:
    first = parse_snapshot(b'{"timestamp": "0001-01-01T00:00:00Z", "groups": []}')
    assert first.timestamp == ZERO_TIME
    assert not is_fresh(first, T0)


@pytest.mark.parametrize(
    ("period", "age", "fresh"),
    [
        (15, timedelta(seconds=45), True),
        (15, timedelta(seconds=46), False),
        (10, timedelta(seconds=30), True),  # a shorter stated period is taken: stricter
        (10, timedelta(seconds=31), False),
        (60, timedelta(seconds=45), True),  # a longer stated period is not believed
        (60, timedelta(seconds=46), False),
        (10**9, timedelta(days=1), False),  # periodSeconds: 1e9 keeps nothing alive
        (0, timedelta(seconds=45), True),  # unstated period: ours
        (0, timedelta(seconds=46), False),
        (15, timedelta(seconds=-10), True),  # a producer's clock slightly ahead of ours
        (15, timedelta(seconds=-11), False),  # beyond the accepted skew
    ],
)
def test_freshness_is_three_of_the_consumers_periods(
    period: int, age: timedelta, fresh: bool
) -> None:
    snapshot = MonitorSnapshot(timestamp=T0, period_seconds=period)
    assert is_fresh(snapshot, T0 + age) is fresh


def test_a_snapshot_stamped_far_in_the_future_is_never_fresh() -> None:
    future = MonitorSnapshot(timestamp=datetime(2999, 1, 1, tzinfo=UTC), period_seconds=15)
    assert not is_fresh(future, T0)
    problem = DEFAULT_FRESHNESS_POLICY.problem(future, T0)
    assert problem is not None
    assert "ahead of this clock" in problem


def test_the_consumers_configured_period_sets_the_bound() -> None:
    minute = Freshness(timedelta(minutes=1))
    snapshot = MonitorSnapshot(timestamp=T0, period_seconds=60)
    assert minute.is_fresh(snapshot, T0 + timedelta(seconds=180))
    assert not minute.is_fresh(snapshot, T0 + timedelta(seconds=181))


@pytest.mark.parametrize("period", [timedelta(0), timedelta(seconds=-1), timedelta(minutes=6)])
def test_a_consumer_period_outside_the_cap_is_refused(period: timedelta) -> None:
    with pytest.raises(ValueError, match="monitor period"):
        Freshness(period)


def test_schema_version_gate() -> None:
    assert slices_readable(SliceSection(schema_version=1))
    assert not slices_readable(SliceSection(schema_version=2))
    assert not slices_readable(None)


@pytest.mark.parametrize(
    ("doc", "complaint"),
    [
        ({"periodSeconds": "15"}, "$.periodSeconds"),
        ({"groups": [{"accelerators": []}]}, "missing required field `manufacturer`"),
        (
            {"groups": [{"manufacturer": "nvidia", "accelerators": [{"id": "x", "memory": -1.5}]}]},
            "$.groups[0].accelerators[0].memory",
        ),
        ({"timestamp": "2026-11-29T09:00:00"}, "time zone"),
        ({"slices": {"usages": []}}, "missing required field `schemaVersion`"),
        (
            {"groups": [{"manufacturer": "amd", "accelerators": [{"id": "x"}]}]},
            "missing required field `unhealthy`",
        ),
    ],
)
def test_malformed_snapshot_names_the_field(doc: dict[str, object], complaint: str) -> None:
    with pytest.raises(ContractError) as excinfo:
        parse_snapshot(json.dumps(doc))
    assert complaint in str(excinfo.value)
    assert "monitor snapshot" in str(excinfo.value)


@given(st.binary(max_size=300))
def test_fuzz_bytes(data: bytes) -> None:
    with contextlib.suppress(ContractError):
        parse_snapshot(data)


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=8),
        lambda c: (
            st.lists(c, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "timestamp",
                        "periodSeconds",
                        "groups",
                        "slices",
                        "manufacturer",
                        "accelerators",
                        "id",
                        "memory",
                        "schemaVersion",
                        "usages",
                    ]
                ),
                c,
                max_size=4,
            )
        ),
        max_leaves=25,
    )
)
def test_fuzz_structure(value: object) -> None:
    try:
        parsed = parse_snapshot(msgspec.json.encode(value))
    except ContractError:
        return
    assert isinstance(parsed, MonitorSnapshot)


# -- how long a consumer may hold a snapshot without asking again ------------------------------

_STAMP = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("stated", "age_s", "expected_s"),
    [
        (15, 0, 15),  # just stored: nothing newer for a whole period
        (15, 4, 11),  # the next tick is 11 s away
        (15, 15, 0),  # due now: ask
        (15, 400, 0),  # long overdue: ask (and freshness decides on what comes back)
        (15, -30, 15),  # the producer's clock is ahead: never more than one period
        (5, 2, 3),  # a shorter stated period is believed (a stricter bound)
        (3600, 2, 13),  # a longer one is not: the consumer's 15 s period caps the wait
        (0, 2, 13),  # no stated period: the consumer's
    ],
)
def test_a_snapshot_is_unchanged_until_its_producers_next_tick(
    stated: int, age_s: float, expected_s: float
) -> None:
    policy = Freshness(timedelta(seconds=15))
    snapshot = MonitorSnapshot(timestamp=_STAMP, period_seconds=stated)
    held = policy.unchanged_for(snapshot, _STAMP + timedelta(seconds=age_s))
    assert held == timedelta(seconds=expected_s)


def test_a_snapshot_before_any_tick_is_never_held() -> None:
    assert Freshness().unchanged_for(MonitorSnapshot(), _STAMP) == timedelta(0)
