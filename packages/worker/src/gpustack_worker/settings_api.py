"""The ``Setting`` resource's I/O: read, patch and watch the Secret ``gpustack-settings``.

The routes (:mod:`gpustack_worker.api`) authenticate and authorize the caller (a
SubjectAccessReview for the verb on ``settings.gpustack.ai`` in the namespace) and validate the
name; this store then reads and writes the Secret with the worker's own account, which the
chart already grants exactly that (``list``, ``watch`` and ``patch`` of ``gpustack-settings``
by name). Nothing is cached: every answer is a fresh list of the Secret (by its
``metadata.name`` field selector, which the authorizer reads as the name), so what
``kubectl get settings`` shows is what the Secret holds now.

A write reads the Secret, renders the Setting, lets the route decide what is wanted from it
(:func:`gpustack_worker.settings_v1.wanted`) and patches the Secret's one key carrying the
``resourceVersion`` it decided on. A conflict with another writer is retried on a fresh read,
as an API server retries a patch, unless the caller gave its own ``resourceVersion``: then the
409 is the caller's answer.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from typing import Any, Final

from gpustack_core.settings import KEYS, SECRET, Key, source_of
from gpustack_core.status import StatusError
from gpustack_kube.client import ApiError, Conflict, KubeClient, KubeError
from gpustack_kube.paths import SECRETS
from gpustack_worker.settings_v1 import (
    QUALIFIED,
    Fields,
    SecretView,
    Wanted,
    bookmark,
    no_secret,
    secret_patch,
    secret_view,
    setting,
    setting_list,
    watch_events,
)

Texts = Callable[[Mapping[str, str] | None], Mapping[str, str]]
"""The Secret's texts → every key's text in force (``OperatorSettings.texts``)."""
CONFLICT_RETRIES: Final = 5
"""Fresh reads a patch without the caller's ``resourceVersion`` tries before it gives up."""


def default_texts(secret: Mapping[str, str] | None) -> dict[str, str]:
    """Every key's text: the Secret's, else its default (no ConfigMap, no seeds known)."""
    return {key.name: source_of(key, secret, None, {})[0] for key in KEYS}


class SettingsStore:
    """The Settings of ``namespace`` (the release's), backed by its Secret."""

    def __init__(self, client: KubeClient, namespace: str, texts: Texts = default_texts) -> None:
        self.client = client
        self.namespace = namespace
        self.texts = texts
        self.collection = SECRETS.path(namespace)
        self.selector = f"metadata.name={SECRET}"

    async def read(self) -> tuple[SecretView, str]:
        """The Secret as it is now, and the list's ``resourceVersion`` (to watch from)."""
        try:
            listed = await self.client.get(self.collection, {"fieldSelector": self.selector})
        except KubeError as exc:
            raise StatusError(
                503, f"the Secret {self.namespace}/{SECRET} cannot be read: {exc}"
            ) from exc
        items = listed.get("items")
        found = next(
            (
                item
                for item in (items if isinstance(items, list) else [])
                if isinstance(item, dict) and (item.get("metadata") or {}).get("name") == SECRET
            ),
            None,
        )
        version = (listed.get("metadata") or {}).get("resourceVersion", "")
        return secret_view(found), str(version)

    def render(self, key: Key, view: SecretView) -> dict[str, Any]:
        """The Setting ``key`` as ``view`` shows it."""
        return setting(key, view, self.namespace, self.texts(view.texts))

    async def get(self, key: Key) -> dict[str, Any]:
        """One Setting."""
        view, _ = await self.read()
        return self.render(key, view)

    async def list(self, fields: Fields) -> dict[str, Any]:
        """Every Setting ``fields`` selects, as a ``SettingList``."""
        view, version = await self.read()
        return setting_list(view, self.namespace, self.texts(view.texts), version, fields.keep)

    async def write(
        self, key: Key, decide: Callable[[dict[str, Any]], Wanted], *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Patch the Secret with what ``decide`` wants of the Setting as it is now."""
        for _ in range(CONFLICT_RETRIES):
            view, _version = await self.read()
            if view.texts is None:
                raise no_secret(self.namespace)
            want = decide(self.render(key, view))
            try:
                patched = await self.client.patch(
                    SECRETS.path(self.namespace, SECRET),
                    secret_patch(want, view.resource_version),
                    params={"dryRun": "All"} if dry_run else None,
                )
            except Conflict as exc:
                if want.resource_version:
                    raise _modified(key) from exc
                continue  # another writer moved the Secret: decide again on a fresh read
            except ApiError as exc:
                raise StatusError(
                    exc.status, f"writing the Secret {SECRET}: {exc.message}"
                ) from exc
            except KubeError as exc:
                raise StatusError(
                    503, f"the Secret {self.namespace}/{SECRET} cannot be written: {exc}"
                ) from exc
            return self.render(key, secret_view(patched))
        raise _modified(key)

    async def watch(
        self,
        fields: Fields,
        resource_version: str,
        timeout_seconds: int,
        bookmarks: bool,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events of the Settings ``fields`` selects, translated from the Secret's watch.

        Without a ``resourceVersion`` (or ``"0"``) every Setting is first sent ``ADDED`` and
        the watch starts where that read was; with one, it starts there and the first Secret
        event sends every selected Setting (what they were at the caller's version is not
        known here), each later one only the Settings whose text moved. An error of the
        Secret's watch (``410 Expired`` among them) ends the stream with an ``ERROR`` event.
        """
        previous: Mapping[str, str] | None = None
        start = resource_version
        if resource_version in ("", "0"):
            view, start = await self.read()
            previous = self.texts(view.texts)
            for key in KEYS:
                if fields.keep(key.name, self.namespace):
                    yield {"type": "ADDED", "object": self.render(key, view)}
        params: dict[str, str | int | bool] = {
            "fieldSelector": self.selector,
            "timeoutSeconds": timeout_seconds,
        }
        if start:
            params["resourceVersion"] = start
        if bookmarks:
            params["allowWatchBookmarks"] = True
        try:
            async with aclosing(self.client.watch(self.collection, params)) as events:
                async for event in events:
                    obj = event["object"]
                    if event["type"] == "BOOKMARK":
                        yield bookmark(str((obj.get("metadata") or {}).get("resourceVersion", "")))
                        continue
                    if event["type"] == "DELETED":  # every key falls back to its seed
                        meta = obj.get("metadata") or {}
                        view = SecretView(None, str(meta.get("resourceVersion", "")))
                    else:
                        view = secret_view(obj)
                    texts = self.texts(view.texts)
                    for out in watch_events(view, self.namespace, texts, previous, fields.keep):
                        yield out
                    previous = texts
        except ApiError as exc:
            yield {"type": "ERROR", "object": _status_object(exc)}
        except KubeError:
            return  # the store went away: the client watches again from its last version


def _modified(key: Key) -> StatusError:
    """409 in an API server's words for a write on a version that is no longer current."""
    return StatusError(
        409,
        f'Operation cannot be fulfilled on {QUALIFIED} "{key.name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        kind="settings",
        name=key.name,
        group=QUALIFIED.partition(".")[2],
        reason="Conflict",
    )


def _status_object(error: ApiError) -> dict[str, Any]:
    """The ``Status`` an ERROR event carries: the store's own, else one made from the error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": error.message or error.reason,
        "reason": error.reason,
        "code": error.status,
    }


__all__ = ["CONFLICT_RETRIES", "SettingsStore", "Texts", "default_texts"]
