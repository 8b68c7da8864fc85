"""The operator Settings, read live from the Secret ``gpustack-settings`` and seeded there.

Which keys exist, what they mean and which source wins is :mod:`gpustack_core.settings`; this
module does the I/O. Two informers follow the system namespace, each narrowed to one object by
a ``metadata.name`` field selector (so RBAC can name it with ``resourceNames``): the Secret, and
the deprecated ConfigMap ``gpustack-operator-settings``. Every change to either re-resolves the
Settings and tells the handlers (the Instance controller re-renders; the Instance webhook reads
:attr:`OperatorSettings.current` at each review), so a ``kubectl patch secret`` takes effect
without a restart.

**Seeding.** Once the Secret has been listed, a Secret that does not exist is created with
every key (``GPUSTACK_<UPPER_SNAKE>`` or the default; a key the deprecated ConfigMap holds
takes its value from there, so an upgrade keeps what was set), and one that lacks keys gets
only those, by a merge patch carrying the ``resourceVersion`` it was decided on. Nothing a
Secret holds is ever overwritten. Two replicas starting together race harmlessly: the loser's
create is ``AlreadyExists`` and its patch a ``Conflict``, after which it looks again.

Until the Secret has been read the defaults are in force, which keep both node-escape gates
closed: an Instance that needs one is refused until the worker knows better, never admitted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

from gpustack_core.settings import (
    DEPRECATED_CONFIGMAP,
    KEYS,
    SECRET,
    Resolution,
    Settings,
    backfill,
    decode_secret_data,
    encode_secret_data,
    resolve,
    seeds,
    source_of,
)
from gpustack_kube.client import AlreadyExists, ApiError, Conflict, KubeClient, KubeError
from gpustack_kube.informer import Informer, Key
from gpustack_kube.paths import CONFIGMAPS, SECRETS

log = logging.getLogger("gpustack.worker.settings")

CONFIGMAP_WAIT: Final = 5.0
"""Seconds seeding waits for the deprecated ConfigMap's first list (its values seed first)."""
SEED_RETRY: Final = 2.0
"""Seconds between seeding attempts the API server could not answer."""
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "gpustack-operator"}


class OperatorSettings:
    """The Settings now in force; run :meth:`run` in the worker's nursery."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        *,
        environ: Mapping[str, str] | None = None,
        configmap_wait: float = CONFIGMAP_WAIT,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.configmap_wait = configmap_wait
        self.secrets: Informer[dict[str, Any]] = Informer(
            client, SECRETS.path(namespace), field_selector=f"metadata.name={SECRET}"
        )
        self.configmaps: Informer[dict[str, Any]] = Informer(
            client,
            CONFIGMAPS.path(namespace),
            field_selector=f"metadata.name={DEPRECATED_CONFIGMAP}",
        )
        self.seeded, self.seed_problems = seeds(os.environ if environ is None else environ)
        self.resolution: Resolution = resolve(None, None, self.seeded, Settings())
        self.read = trio.Event()
        """Set once the Secret has been listed (it may not exist): the Settings are known."""
        self.seeding_error: str | None = None
        """Why the last seeding attempt failed, ``None`` once seeded."""
        self._handlers: list[Callable[[Settings], None]] = []
        self._said: set[str] = set()
        self.secrets.add_handler(self._changed)
        self.configmaps.add_handler(self._changed)

    @property
    def current(self) -> Settings:
        """The Settings in force now (the defaults until the Secret is read)."""
        return self.resolution.settings

    def texts(self, secret: Mapping[str, str] | None) -> dict[str, str]:
        """Every key's text in force, given the Secret's texts ``secret`` (``None``: no Secret).

        What the ``Setting`` resource serves (:mod:`gpustack_worker.settings_api`): the
        Secret's text, else the deprecated ConfigMap's, else this worker's seed — the text
        :func:`~gpustack_core.settings.resolve` parses, so a key deleted from the Secret shows
        what the worker applies for it.
        """
        configmap = self._configmap_data()
        return {key.name: source_of(key, secret, configmap, self.seeded)[0] for key in KEYS}

    def add_handler(self, handler: Callable[[Settings], None]) -> None:
        """Call ``handler`` with the new Settings whenever a value changes."""
        self._handlers.append(handler)

    # -- reading ----------------------------------------------------------------------------

    def _secret(self) -> dict[str, Any] | None:
        return self.secrets.get(self.namespace, SECRET)

    def _secret_data(self) -> dict[str, str] | None:
        found = self._secret()
        if found is None:
            return None
        data, problems = decode_secret_data(found.get("data"))
        for problem in problems:
            self._say(logging.WARNING, problem)
        return data

    def _configmap_data(self) -> dict[str, str] | None:
        found = self.configmaps.get(self.namespace, DEPRECATED_CONFIGMAP)
        if found is None:
            return None
        data = found.get("data")
        if not isinstance(data, Mapping):
            return {}
        return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}

    def _changed(self, _key: Key | None = None) -> None:
        configmap = self._configmap_data()
        secret = self._secret_data()
        fresh = resolve(secret, configmap, self.seeded, self.current)
        for problem in fresh.problems:
            self._say(logging.WARNING, f"Setting refused: {problem}")
        if configmap is not None:
            self._deprecation(configmap, secret or {})
        before, self.resolution = self.current, fresh
        if fresh.settings != before:
            changed = [k.name for k in KEYS if getattr(before, k.attribute) != getattr(
                fresh.settings, k.attribute)]  # fmt: skip
            log.info("Settings changed: %s", ", ".join(changed))
            for handler in self._handlers:
                handler(fresh.settings)

    def _deprecation(self, configmap: Mapping[str, str], secret: Mapping[str, str]) -> None:
        """Say the ConfigMap is deprecated (once), and each value there the Secret overrides.

        Each overridden value is said once, so nobody wonders why an edit there does nothing.
        """
        self._say(
            logging.WARNING,
            f"the ConfigMap {self.namespace}/{DEPRECATED_CONFIGMAP} is deprecated: Settings live "
            f"in the Secret {self.namespace}/{SECRET} (kubectl -n {self.namespace} patch secret "
            f'{SECRET} --type=merge -p \'{{"data":{{"<key>":"<base64>"}}}}\'). Its '
            "keys are read only where the Secret lacks them (a first start copies them there); "
            "move them to the Secret and delete it",
        )
        for key in KEYS:
            for old in key.deprecated:
                if (
                    old in configmap
                    and key.name in secret
                    and configmap[old].strip() != secret[key.name].strip()
                ):
                    self._say(
                        logging.WARNING,
                        f"{DEPRECATED_CONFIGMAP} {old}={configmap[old]!r} is not applied: "
                        f"the Secret {SECRET} holds {key.name}={secret[key.name]!r}",
                    )

    def _say(self, level: int, message: str) -> None:
        """Log each distinct message once (a relist re-delivers the same objects)."""
        if message in self._said:
            return
        if len(self._said) > 1024:
            self._said.clear()
        self._said.add(message)
        log.log(level, "%s", message)

    # -- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow both objects, seed the Secret once it has been listed. Never returns."""
        for problem in self.seed_problems:
            log.warning("%s", problem)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.configmaps.run)
            await nursery.start(self.secrets.run)
            with trio.move_on_after(self.configmap_wait):
                while not self.configmaps.synced:
                    await self.configmaps.wait_changed()
            self._changed()
            self.read.set()
            await self.seed()

    async def seed(self) -> None:
        """Create the Secret or add the keys it lacks; return once nothing is missing."""
        while True:
            found = self._secret()
            data = self._secret_data()
            missing = backfill(data, self._configmap_data(), self.seeded)
            if not missing:
                self.seeding_error = None
                return
            try:
                if found is None:
                    await self.client.create(SECRETS.path(self.namespace), self._body(missing))
                    log.info("created the Secret %s/%s with %s", self.namespace, SECRET,
                             ", ".join(sorted(missing)))  # fmt: skip
                else:
                    version = str(found.get("metadata", {}).get("resourceVersion", ""))
                    patch = {"metadata": {"resourceVersion": version},
                             "data": encode_secret_data(missing)}  # fmt: skip
                    await self.client.patch(SECRETS.path(self.namespace, SECRET), patch)
                    log.info("added %s to the Secret %s/%s", ", ".join(sorted(missing)),
                             self.namespace, SECRET)  # fmt: skip
                self.seeding_error = None
            except (AlreadyExists, Conflict):
                pass  # another replica wrote it first: look again once the view moves
            except ApiError as exc:
                self.seeding_error = str(exc)
                log.warning("cannot seed the Secret %s/%s (%s); the Settings read now stay in "
                            "force", self.namespace, SECRET, exc)  # fmt: skip
                await trio.sleep(SEED_RETRY * 30)
                continue
            except KubeError as exc:
                self.seeding_error = str(exc)
                await trio.sleep(SEED_RETRY)
                continue
            with trio.move_on_after(SEED_RETRY):
                await self.secrets.wait_changed()

    def _body(self, values: Mapping[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": self.namespace, "labels": dict(MANAGED_BY)},
            "type": "Opaque",
            "data": encode_secret_data(values),
        }


__all__ = ["CONFIGMAP_WAIT", "OperatorSettings"]
