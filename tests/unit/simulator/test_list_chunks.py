"""The stand-in's continue tokens: any text is a token or a clear 400, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.status import StatusError
from gpustack_simulator.cluster.paging import ListChunks, Token, parse_limit


def _pod(namespace: str, name: str) -> dict[str, object]:
    return {"metadata": {"namespace": namespace, "name": name}}


def _outcome(text: str) -> object:
    try:
        return Token.decode(text)
    except StatusError as exc:
        return exc.code


@given(st.text(max_size=80))
def test_any_text_is_a_token_or_a_400(text: str) -> None:
    outcome = _outcome(text)
    assert isinstance(outcome, Token) or outcome == 400


@given(st.integers(min_value=0, max_value=10**6), st.tuples(st.text(), st.text()))
def test_a_token_decodes_to_what_was_encoded(version: int, after: tuple[str, str]) -> None:
    namespace, name = after
    if "/" in namespace or "\x00" in name:
        return  # not a Kubernetes key: namespaces hold no slash, names no NUL
    token = Token(7, version, (namespace, name))
    assert Token.decode(token.encode()) == token


def test_chunks_cover_the_list_once_in_order_and_forget_a_list_read_to_its_end() -> None:
    objects = [_pod(f"ns-{i // 4}", f"p-{i % 4}") for i in range(10)]
    chunks = ListChunks()
    chunk = chunks.first(("Pod", ""), objects, 42, 4)  # type: ignore[arg-type]
    seen = list(chunk.objects)
    while chunk.token:
        assert chunk.version == 42
        chunk = chunks.next(("Pod", ""), chunk.token, 4)
        seen += chunk.objects
    assert seen == objects
    assert len(chunks) == 0


def test_only_so_many_lists_are_kept() -> None:
    chunks = ListChunks(limit=2)
    objects = [_pod("a", f"p-{i}") for i in range(3)]
    tokens = [chunks.first(("Pod", ""), objects, v, 1).token for v in (1, 2, 3)]  # type: ignore[arg-type]
    with pytest.raises(StatusError) as gone:
        chunks.next(("Pod", ""), tokens[0], 1)
    assert gone.value.code == 410
    assert chunks.next(("Pod", ""), tokens[2], 1).objects == [objects[1]]


@pytest.mark.parametrize(("text", "limit"), [(None, 0), ("", 0), ("0", 0), ("-3", 0), ("500", 500)])
def test_limit_reads_as_kube_apiserver_reads_it(text: str | None, limit: int) -> None:
    assert parse_limit(text) == limit


def test_a_limit_that_is_no_number_is_a_400() -> None:
    with pytest.raises(StatusError) as bad:
        parse_limit("many")
    assert bad.value.code == 400
