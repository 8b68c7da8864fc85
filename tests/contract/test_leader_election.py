"""Leader election on a Lease: one leader at a time, and a hand-over within the lease time.

Runs against the stand-in, or a real cluster with ``GPUSTACK_CONTRACT_KUBECONFIG``. Durations
are short (a 1.5 s lease) so the hand-over is observed in a few seconds of real time.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable

import pytest
import trio
from contract_target import Target

from gpustack_kube.leader import ElectionConfig, LeaderElector


def config(target: Target, identity: str) -> ElectionConfig:
    return ElectionConfig(
        namespace=target.namespace,
        name="contract-election",
        identity=identity,
        lease_duration=1.5,
        renew_deadline=1.0,
        retry_period=0.2,
    )


# The leader is killed mid-renewal on purpose: the request it was sending is abandoned, as a
# crashed process's would be, and httpx's body generator is collected unexhausted.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_one_leader_at_a_time_and_a_hand_over(target: Target) -> None:
    if target.simulated:
        await target.client.create("/api/v1/namespaces", {"metadata": {"name": target.namespace}})
    leading: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    electors = {name: LeaderElector(target.client, config(target, name)) for name in ("a", "b")}

    def lead_as(name: str) -> Callable[[], Awaitable[None]]:
        async def lead() -> None:
            leading.append(name)
            while True:  # leads until its election scope is cancelled
                now = tuple(n for n, e in electors.items() if e.leading)
                if len(now) > 1:
                    overlaps.append(now)
                await trio.sleep(0.05)

        return lead

    async with trio.open_nursery() as outer:
        scopes = {}
        for name, elector in electors.items():
            scope = trio.CancelScope()
            scopes[name] = scope

            async def run(elector: LeaderElector = elector, name: str = name,
                          scope: trio.CancelScope = scope) -> None:  # fmt: skip
                with scope:
                    await elector.run(lead_as(name))

            outer.start_soon(run)
        with trio.fail_after(5):
            while not leading:
                await trio.sleep(0.05)
        first = leading[0]
        await trio.sleep(1.0)  # renewals keep the first leader; the other stays a follower
        assert leading == [first]
        scopes[first].cancel()  # the leader dies without releasing the lease
        with trio.fail_after(5):  # the follower takes over once the lease expires
            while len(leading) < 2:
                await trio.sleep(0.05)
        assert leading[1] != first
        outer.cancel_scope.cancel()
    assert overlaps == []
    lease = await target.client.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{target.namespace}/leases/contract-election"
    )
    assert lease["spec"]["holderIdentity"] == leading[1]
    assert lease["spec"]["leaseTransitions"] == 1
    gc.collect()  # finalize the abandoned request here, not in a later test
