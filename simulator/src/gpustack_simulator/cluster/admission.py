"""Admission webhooks, called the way kube-apiserver calls them.

``MutatingWebhookConfiguration`` and ``ValidatingWebhookConfiguration`` objects written to
the stand-in are checked and defaulted as the ``admissionregistration.k8s.io/v1`` strategy
does, and every create, update (a patch is an ``UPDATE``) and delete through the API that a
webhook's ``rules``, ``namespaceSelector`` and ``objectSelector`` select is sent to it as an
``admission.k8s.io/v1`` ``AdmissionReview`` over HTTPS, the server certificate verified
against ``clientConfig.caBundle`` (the system roots when it is empty, as kube-apiserver does).
Mutating webhooks run one after another, configurations in name order and webhooks in list
order, each seeing the previous one's JSON patch; validating webhooks run concurrently on the
final object, and the first denial in that same order is the one reported.

Failures are the API server's: a denial is its ``Status`` (code 403 and reason ``Forbidden``
when the webhook gives none, 400 for a code below 400), its message prefixed ``<resource>
"<name>" is forbidden: admission webhook "<webhook>" denied the request:``; a webhook that
cannot be called, times out or answers something that is not a valid review is a 500
``InternalError`` naming it under ``failurePolicy: Fail`` and is skipped under ``Ignore``.

What the stand-in does differently, and why nothing here depends on it:

- ``clientConfig.service`` is resolved first through :attr:`ClusterState.webhook_services`
  (``(namespace, name, port)`` → ``host:port``, set by a test holding the state), then through
  the Service's ``Endpoints`` in the store (first ready address, the Service port's target
  port); cluster IPs are not routable here. Either way the certificate is verified for
  ``<name>.<namespace>.svc``, the name kube-apiserver verifies.
- ``admissionReviewVersions`` must include ``v1``: the stand-in speaks no ``v1beta1``.
- ``matchPolicy: Equivalent`` matches the request's own group and version only (the stand-in
  serves one version per resource), ``matchConditions`` are not evaluated, and response
  ``warnings`` reach the client only with a successful write (a refusal's are dropped).
- Only writes that arrive through the API are admitted: the node simulator's binding and
  status updates, garbage collection and the Endpoints controller write the store directly.
- Webhook configurations themselves are never admitted, as on a cluster (no webhook can lock
  itself in).
"""

from __future__ import annotations

import base64
import binascii
import copy
import errno
import ssl
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import msgspec
import trio

from gpustack_core.status import StatusError
from gpustack_simulator.cluster import patch as patching
from gpustack_simulator.cluster.selectors import SelectorError, match_label_selector

if TYPE_CHECKING:
    from gpustack_simulator.cluster.resources import Resource
    from gpustack_simulator.cluster.state import ClusterState

GROUP = "admissionregistration.k8s.io"
MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"
CONFIGURATION_KINDS = frozenset({MUTATING, VALIDATING})
REVIEW_VERSION = "admission.k8s.io/v1"
DEFAULT_TIMEOUT = 10
MAX_TIMEOUT = 30
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label kube-apiserver puts on every Namespace; a namespace the stand-in has no object
for is taken to carry just this one."""

Cause = tuple[str, str, str]
"""(field path, message, reason), as ``apiserver.invalid`` lists them."""


# -- the configurations ------------------------------------------------------------------------


def default_configuration(kind: str, obj: dict[str, Any]) -> None:
    """The v1 defaults the API server stores, so a read-back shows what will be applied."""
    for webhook in obj.get("webhooks") or ():
        if not isinstance(webhook, dict):
            continue
        webhook.setdefault("failurePolicy", "Fail")
        webhook.setdefault("matchPolicy", "Equivalent")
        webhook.setdefault("namespaceSelector", {})
        webhook.setdefault("objectSelector", {})
        webhook.setdefault("timeoutSeconds", DEFAULT_TIMEOUT)
        if kind == MUTATING:
            webhook.setdefault("reinvocationPolicy", "Never")
        service = (webhook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)
        for rule in webhook.get("rules") or ():
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def check_configuration(kind: str, obj: Mapping[str, Any]) -> list[Cause]:
    """What the v1 validation refuses in a webhook configuration, each with its field path."""
    causes: list[Cause] = []
    webhooks = obj.get("webhooks") or []
    if not isinstance(webhooks, list):
        return [("webhooks", "Invalid value: must be a list", "FieldValueInvalid")]
    seen: set[str] = set()
    for i, webhook in enumerate(webhooks):
        at = f"webhooks[{i}]"
        if not isinstance(webhook, Mapping):
            causes.append((at, "Invalid value: must be an object", "FieldValueInvalid"))
            continue
        causes += _check_webhook(kind, at, webhook, seen)
    return causes


def _check_name(at: str, name: Any, seen: set[str]) -> list[Cause]:
    if not isinstance(name, str) or not name:
        return [(f"{at}.name", "Required value", "FieldValueRequired")]
    if name.count(".") < 2:
        return [
            (
                f"{at}.name",
                f'Invalid value: "{name}": should be a domain with at least three segments '
                "separated by dots",
                "FieldValueInvalid",
            )
        ]
    if name in seen:
        return [(f"{at}.name", f'Duplicate value: "{name}"', "FieldValueDuplicate")]
    seen.add(name)
    return []


def _check_webhook(kind: str, at: str, webhook: Mapping[str, Any], seen: set[str]) -> list[Cause]:
    causes = _check_name(at, webhook.get("name"), seen)
    causes += _check_client(f"{at}.clientConfig", webhook.get("clientConfig"))
    versions = webhook.get("admissionReviewVersions")
    if not versions:
        causes.append(
            (
                f"{at}.admissionReviewVersions",
                "Required value: must specify one of v1",
                "FieldValueRequired",
            )
        )
    elif "v1" not in versions:
        causes.append(
            (
                f"{at}.admissionReviewVersions",
                f"Invalid value: {list(versions)}: must include v1 (the stand-in sends "
                "admission.k8s.io/v1 reviews only)",
                "FieldValueInvalid",
            )
        )
    side = webhook.get("sideEffects")
    if side not in {"None", "NoneOnDryRun"}:
        causes.append(
            (
                f"{at}.sideEffects",
                "Required value: must specify one of None, NoneOnDryRun"
                if side is None
                else f'Unsupported value: "{side}": supported values: "None", "NoneOnDryRun"',
                "FieldValueRequired" if side is None else "FieldValueNotSupported",
            )
        )
    policy = webhook.get("failurePolicy", "Fail")
    if policy not in {"Fail", "Ignore"}:
        causes.append(
            (
                f"{at}.failurePolicy",
                f'Unsupported value: "{policy}": supported values: "Fail", "Ignore"',
                "FieldValueNotSupported",
            )
        )
    timeout = webhook.get("timeoutSeconds", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30:
        causes.append(
            (
                f"{at}.timeoutSeconds",
                f"Invalid value: {timeout}: the timeout value must be between 1 and "
                f"{MAX_TIMEOUT} seconds",
                "FieldValueInvalid",
            )
        )
    for j, rule in enumerate(webhook.get("rules") or ()):
        causes += _check_rule(f"{at}.rules[{j}]", rule)
    for key in ("namespaceSelector", "objectSelector"):
        try:
            match_label_selector(webhook.get(key) or {}, {})
        except SelectorError as exc:
            causes.append((f"{at}.{key}", f"Invalid value: {exc}", "FieldValueInvalid"))
    if kind == MUTATING and webhook.get("reinvocationPolicy", "Never") not in {
        "Never",
        "IfNeeded",
    }:
        causes.append(
            (
                f"{at}.reinvocationPolicy",
                f'Unsupported value: "{webhook.get("reinvocationPolicy")}": supported values: '
                '"IfNeeded", "Never"',
                "FieldValueNotSupported",
            )
        )
    return causes


def _check_client(at: str, client: Any) -> list[Cause]:
    if not isinstance(client, Mapping) or ("url" in client) == ("service" in client):
        return [
            (at, "Required value: exactly one of url or service is required", "FieldValueRequired")
        ]
    if "url" in client:
        url = str(client["url"])
        parts = urlsplit(url)
        if parts.scheme != "https":
            return [
                (
                    f"{at}.url",
                    f"Invalid value: \"{url}\": 'https' is the only allowed URL scheme",
                    "FieldValueInvalid",
                )
            ]
        if not parts.hostname:
            return [
                (
                    f"{at}.url",
                    f'Invalid value: "{url}": host must be specified',
                    "FieldValueInvalid",
                )
            ]
        if parts.fragment or parts.query:
            return [
                (
                    f"{at}.url",
                    f'Invalid value: "{url}": query and fragment parameters are not accepted',
                    "FieldValueInvalid",
                )
            ]
        return []
    service = client["service"]
    causes: list[Cause] = []
    if not isinstance(service, Mapping):
        return [(f"{at}.service", "Invalid value: must be an object", "FieldValueInvalid")]
    for key in ("namespace", "name"):
        if not service.get(key):
            causes.append(
                (
                    f"{at}.service.{key}",
                    "Required value: service " + key + " is required",
                    "FieldValueRequired",
                )
            )
    port = service.get("port", 443)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        causes.append(
            (
                f"{at}.service.port",
                f"Invalid value: {port}: port is not valid: must be between 1 and 65535, inclusive",
                "FieldValueInvalid",
            )
        )
    path = service.get("path")
    if path is not None and not str(path).startswith("/"):
        causes.append(
            (
                f"{at}.service.path",
                f"Invalid value: \"{path}\": must start with a '/'",
                "FieldValueInvalid",
            )
        )
    return causes


def _check_rule(at: str, rule: Any) -> list[Cause]:
    if not isinstance(rule, Mapping):
        return [(at, "Invalid value: must be an object", "FieldValueInvalid")]
    causes: list[Cause] = []
    for key in ("operations", "apiGroups", "apiVersions", "resources"):
        if not rule.get(key):
            causes.append((f"{at}.{key}", "Required value", "FieldValueRequired"))
    for op in rule.get("operations") or ():
        if op != "*" and op not in OPERATIONS:
            causes.append(
                (
                    f"{at}.operations",
                    f'Unsupported value: "{op}": supported values: "*", "CONNECT", "CREATE", '
                    '"DELETE", "UPDATE"',
                    "FieldValueNotSupported",
                )
            )
    scope = rule.get("scope", "*")
    if scope not in {"*", "Cluster", "Namespaced"}:
        causes.append(
            (
                f"{at}.scope",
                f'Unsupported value: "{scope}": supported values: "*", "Cluster", "Namespaced"',
                "FieldValueNotSupported",
            )
        )
    return causes


# -- one request and who it goes to ------------------------------------------------------------


@dataclass
class Attributes:
    """What admission knows of one write: kube-apiserver's ``admission.Attributes``."""

    resource: Resource
    operation: str
    namespace: str
    name: str
    subresource: str
    obj: dict[str, Any] | None
    """The object as it will be stored (``None`` for DELETE); mutating webhooks change it."""
    old: dict[str, Any] | None
    """The stored object the write replaces or deletes (``None`` for CREATE)."""
    options: dict[str, Any]
    user: Mapping[str, Any] = field(default_factory=dict)
    dry_run: bool = False
    """``?dryRun=All``: webhooks are told, and nothing is stored (``sideEffects`` in v1 are
    always ``None`` or ``NoneOnDryRun``, so every webhook may be called)."""
    warnings: list[str] = field(default_factory=list)
    """The webhooks' response ``warnings``, in call order, for the client's Warning headers."""


@dataclass(frozen=True)
class Hook:
    """One webhook entry, with the configuration it came from."""

    configuration: str
    spec: Mapping[str, Any]
    mutating: bool

    @property
    def name(self) -> str:
        """The webhook's own name, the one errors and logs quote."""
        return str(self.spec.get("name", ""))

    @property
    def timeout(self) -> float:
        """``timeoutSeconds``, defaulted and capped as the API server does."""
        raw = self.spec.get("timeoutSeconds", DEFAULT_TIMEOUT)
        return float(min(max(int(raw), 1), MAX_TIMEOUT))

    @property
    def ignore_failures(self) -> bool:
        """``failurePolicy: Ignore``: a webhook that cannot be called lets the write through."""
        return bool(self.spec.get("failurePolicy", "Fail") == "Ignore")


def _rule_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """kube-apiserver's ``rules.Matcher``: operation, group, version, resource/sub, scope."""
    resource = attrs.resource
    operations = rule.get("operations") or ()
    if "*" not in operations and attrs.operation not in operations:
        return False
    groups = rule.get("apiGroups") or ()
    if "*" not in groups and resource.group not in groups:
        return False
    versions = rule.get("apiVersions") or ()
    if "*" not in versions and resource.version not in versions:
        return False
    wanted = False
    for entry in rule.get("resources") or ():
        res, _, sub = str(entry).partition("/")
        if (res in {"*", resource.plural}) and sub in {"*", attrs.subresource}:
            wanted = True
            break
    if not wanted:
        return False
    scope = rule.get("scope", "*")
    is_namespace = resource.group == "" and resource.plural == "namespaces"
    if scope == "Namespaced":
        return not is_namespace and attrs.namespace != ""
    if scope == "Cluster":
        return is_namespace or attrs.namespace == ""
    return True


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    if obj is None:
        return None
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


class Admission:
    """The admission chain of the stand-in's write path: find the webhooks, call them."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def hooks(self, kind: str) -> list[Hook]:
        """Every webhook of one configuration kind, configurations in name order."""
        found = []
        for config in self.state.store.list(kind):  # the store lists by name already
            for webhook in config.get("webhooks") or ():
                found.append(Hook(config["metadata"]["name"], webhook, kind == MUTATING))
        return found

    def selected(self, hook: Hook, attrs: Attributes) -> bool:
        """Whether ``hook`` is called for ``attrs``: rules, then both selectors."""
        if attrs.resource.kind in CONFIGURATION_KINDS and attrs.resource.group == GROUP:
            return False
        if not any(_rule_matches(r, attrs) for r in hook.spec.get("rules") or ()):
            return False
        objects = hook.spec.get("objectSelector") or {}
        if objects:
            candidates = [x for x in (_labels(attrs.obj), _labels(attrs.old)) if x is not None]
            if not any(match_label_selector(objects, labels) for labels in candidates):
                return False
        namespaces = hook.spec.get("namespaceSelector") or {}
        if namespaces:
            labels = self._namespace_labels(attrs)
            if labels is not None and not match_label_selector(namespaces, labels):
                return False
        return True

    def _namespace_labels(self, attrs: Attributes) -> Mapping[str, str] | None:
        """The labels ``namespaceSelector`` is read against; ``None``: it does not apply.

        A cluster-scoped object other than a Namespace is selected whatever the selector
        says; a Namespace is judged by its own labels; anything else by its namespace's.
        """
        resource = attrs.resource
        if resource.group == "" and resource.plural == "namespaces":
            own = dict(_labels(attrs.obj if attrs.obj is not None else attrs.old) or {})
            own[NAMESPACE_NAME_LABEL] = attrs.name  # the server's, never the request's
            return own
        if not attrs.namespace:
            return None
        stored = self.state.store.get("Namespace", "", attrs.namespace)
        labels = dict(_labels(stored) or {})
        labels[NAMESPACE_NAME_LABEL] = attrs.namespace  # whatever a stored object carries
        return labels

    # -- the two phases ----------------------------------------------------------------------

    async def mutate(self, attrs: Attributes) -> None:
        """Run the mutating webhooks in order, applying each one's patch to ``attrs.obj``.

        Selection is judged on the object as the earlier webhooks left it. A webhook with
        ``reinvocationPolicy: IfNeeded`` is called once more, in a second pass in the same
        order, when a webhook after it changed the object, as kube-apiserver re-invokes it.
        """
        after: dict[int, Any] = {}
        hooks = self.hooks(MUTATING)
        for index, hook in enumerate(hooks):
            if not self.selected(hook, attrs):
                continue
            await self._mutate_once(hook, attrs)
            if hook.spec.get("reinvocationPolicy") == "IfNeeded":
                after[index] = copy.deepcopy(attrs.obj)
        for index, hook in enumerate(hooks):
            if index in after and attrs.obj != after[index] and self.selected(hook, attrs):
                await self._mutate_once(hook, attrs)

    async def _mutate_once(self, hook: Hook, attrs: Attributes) -> None:
        response = await self._call_or_fail(hook, attrs)
        if response is None:
            return
        attrs.warnings += _warnings(response)
        if not response.get("allowed"):
            raise denied(hook.name, response.get("status"), attrs)
        raw = response.get("patch")
        if not raw:
            return
        if attrs.obj is None:
            raise internal(
                f'admission webhook "{hook.name}" attempted to modify the object, which '
                "is not supported for this operation"
            )
        try:
            operations = msgspec.json.decode(base64.b64decode(raw, validate=True))
            patched = patching.json_patch(attrs.obj, operations)
        except (binascii.Error, msgspec.DecodeError, patching.PatchError, TypeError) as exc:
            raise internal(
                f'admission webhook "{hook.name}" returned a patch that cannot be applied: {exc}'
            ) from exc
        if not isinstance(patched, dict):
            raise internal(f'admission webhook "{hook.name}" patched the object into a non-object')
        attrs.obj = patched

    async def validate(self, attrs: Attributes) -> None:
        """Run the validating webhooks concurrently; the first denial in order is raised."""
        hooks = [h for h in self.hooks(VALIDATING) if self.selected(h, attrs)]
        if not hooks:
            return
        outcomes: list[StatusError | None] = [None] * len(hooks)
        warned: list[list[str]] = [[] for _ in hooks]

        async def one(index: int, hook: Hook) -> None:
            try:
                response = await self._call_or_fail(hook, attrs)
            except StatusError as error:
                outcomes[index] = error
                return
            if response is None:
                return
            warned[index] = _warnings(response)
            if not response.get("allowed"):
                outcomes[index] = denied(hook.name, response.get("status"), attrs)

        async with trio.open_nursery() as nursery:
            for index, hook in enumerate(hooks):
                nursery.start_soon(one, index, hook)
        for found in warned:
            attrs.warnings += found
        for outcome in outcomes:
            if outcome is not None:
                raise outcome

    async def _call_or_fail(self, hook: Hook, attrs: Attributes) -> dict[str, Any] | None:
        """The webhook's ``response``; ``None`` when it failed and ``Ignore`` lets it pass."""
        try:
            return await self.call(hook, attrs)
        except WebhookCallError as exc:
            if hook.ignore_failures:
                return None
            raise internal(str(exc)) from exc

    # -- one call ----------------------------------------------------------------------------

    async def call(self, hook: Hook, attrs: Attributes) -> dict[str, Any]:
        """POST one ``AdmissionReview`` and return its checked ``response``."""
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": REVIEW_VERSION,
            "kind": "AdmissionReview",
            "request": _request(uid, attrs),
        }
        target = self._target(hook)
        timeout = hook.timeout
        url = f"{target.url}?timeout={int(timeout)}s"
        try:
            context = _ssl_context(target.ca_bundle)
        except ValueError as exc:
            raise WebhookCallError(hook.name, f"could not get REST client: {exc}") from exc
        body = msgspec.json.encode(review)
        try:
            with trio.fail_after(timeout):
                async with httpx.AsyncClient(
                    verify=context, trust_env=False, timeout=timeout
                ) as http:
                    answer = await http.post(
                        url,
                        content=body,
                        headers={
                            "Content-Type": "application/json",
                            "Accept": "application/json",
                            **({"Host": target.host_header} if target.host_header else {}),
                        },
                        extensions={"sni_hostname": target.server_name}
                        if target.server_name
                        else {},
                    )
                    payload = answer.content
        except (trio.TooSlowError, httpx.TimeoutException) as exc:
            raise WebhookCallError(
                hook.name, f'failed to call webhook: Post "{url}": context deadline exceeded'
            ) from exc
        except httpx.HTTPError as exc:
            raise WebhookCallError(
                hook.name, f'failed to call webhook: Post "{url}": {_transport_reason(exc, target)}'
            ) from exc
        if answer.status_code != 200:
            raise WebhookCallError(
                hook.name,
                f"failed to call webhook: the server responded with the status code "
                f"{answer.status_code} but did not return more information",
            )
        return _check_response(hook, uid, payload)

    def _target(self, hook: Hook) -> Target:
        config = hook.spec.get("clientConfig") or {}
        ca = str(config.get("caBundle") or "")
        if config.get("url"):
            return Target(str(config["url"]), ca)
        service = config.get("service") or {}
        namespace, name = str(service.get("namespace")), str(service.get("name"))
        port = int(service.get("port") or 443)
        path = str(service.get("path") or "")
        server_name = f"{name}.{namespace}.svc"
        address = self.state.webhook_services.get((namespace, name, port))
        if address is None:
            address = self._endpoint(hook, namespace, name, port)
        return Target(
            f"https://{address}{path}",
            ca,
            server_name=server_name,
            host_header=f"{server_name}:{port}",
        )

    def _endpoint(self, hook: Hook, namespace: str, name: str, port: int) -> str:
        """The first ready address behind the Service port, from its Endpoints object."""
        service = self.state.store.get("Service", namespace, name)
        if service is None:
            raise WebhookCallError(hook.name, f'failed to call webhook: service "{name}" not found')
        ports = [p for p in (service.get("spec") or {}).get("ports") or () if p.get("port") == port]
        if not ports:
            raise WebhookCallError(
                hook.name,
                f"failed to call webhook: service {namespace}/{name}:{port} has no such port",
            )
        wanted = ports[0]
        endpoints = self.state.store.get("Endpoints", namespace, name) or {}
        for subset in endpoints.get("subsets") or ():
            addresses = subset.get("addresses") or ()
            for candidate in subset.get("ports") or ():
                same_name = wanted.get("name") and candidate.get("name") == wanted.get("name")
                same_port = candidate.get("port") == (wanted.get("targetPort") or port)
                if addresses and (same_name or same_port):
                    host = str(addresses[0].get("ip"))
                    host = f"[{host}]" if ":" in host else host
                    return f"{host}:{candidate['port']}"
        raise WebhookCallError(
            hook.name,
            f'failed to call webhook: no endpoints available for service "{namespace}/{name}"',
        )


@dataclass(frozen=True)
class Target:
    """Where one review goes and what its certificate must prove."""

    url: str
    ca_bundle: str
    server_name: str = ""
    """The TLS name to verify when the URL holds a resolved address (``svc`` names)."""
    host_header: str = ""


class WebhookCallError(Exception):
    """The webhook could not be called or answered no valid review (``failurePolicy`` decides)."""

    def __init__(self, webhook: str, reason: str) -> None:
        super().__init__(f'failed calling webhook "{webhook}": {reason}')


def _ssl_context(ca_bundle: str) -> ssl.SSLContext:
    """A verifying context trusting ``caBundle`` (base64 PEM), or the system roots if empty."""
    if not ca_bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(
            f"unable to load root certificates: caBundle is not base64 PEM ({exc})"
        ) from exc
    try:
        return ssl.create_default_context(cadata=pem)
    except ssl.SSLError as exc:
        raise ValueError(
            f"unable to load root certificates: unable to parse bytes as PEM block ({exc})"
        ) from exc


def _transport_reason(exc: BaseException, target: Target) -> str:
    """Name the cause as Go's client would: a refused dial, an unverifiable certificate."""
    pending: list[BaseException] = [exc]
    while pending:
        seen = pending.pop(0)
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"tls: failed to verify certificate: {seen.verify_message}"
        if isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED:
            parts = urlsplit(target.url)
            return f"dial tcp {parts.hostname}:{parts.port or 443}: connect: connection refused"
        if isinstance(seen, BaseExceptionGroup):  # trio's happy eyeballs: one per address
            pending += seen.exceptions
        if (cause := seen.__cause__ or seen.__context__) is not None:
            pending.append(cause)
    return str(exc) or type(exc).__name__


def _request(uid: str, attrs: Attributes) -> dict[str, Any]:
    resource = attrs.resource
    kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    gvr = {"group": resource.group, "version": resource.version, "resource": resource.plural}
    request: dict[str, Any] = {
        "uid": uid,
        "kind": kind,
        "resource": gvr,
        "requestKind": dict(kind),
        "requestResource": dict(gvr),
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": dict(attrs.user),
        "object": copy.deepcopy(attrs.obj),
        "oldObject": copy.deepcopy(attrs.old),
        "dryRun": attrs.dry_run,
        "options": dict(attrs.options),
    }
    if attrs.subresource:
        request["subResource"] = request["requestSubResource"] = attrs.subresource
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    return request


def _warnings(response: Mapping[str, Any]) -> list[str]:
    """The response's ``warnings``, each as the text kube-apiserver forwards to the client."""
    found = response.get("warnings") or []
    return [str(w) for w in found] if isinstance(found, list) else []


def _check_response(hook: Hook, uid: str, payload: bytes) -> dict[str, Any]:
    """The review's ``response``, after the checks kube-apiserver makes of it."""
    try:
        review = msgspec.json.decode(payload)
    except msgspec.DecodeError as exc:
        raise WebhookCallError(
            hook.name, f"failed to call webhook: the response is not JSON: {exc}"
        ) from exc
    if not isinstance(review, dict):
        raise WebhookCallError(hook.name, "received invalid webhook response: not an object")
    if review.get("apiVersion") != REVIEW_VERSION or review.get("kind") != "AdmissionReview":
        raise WebhookCallError(
            hook.name,
            f"received invalid webhook response: expected webhook response of "
            f"{REVIEW_VERSION}, Kind=AdmissionReview, got {review.get('apiVersion')}, "
            f"Kind={review.get('kind')}",
        )
    response = review.get("response")
    if not isinstance(response, dict):
        raise WebhookCallError(hook.name, "received invalid webhook response: response is absent")
    if response.get("uid") != uid:
        raise WebhookCallError(
            hook.name,
            f'received invalid webhook response: expected response.uid="{uid}", '
            f'got "{response.get("uid", "")}"',
        )
    if response.get("patch"):
        if not hook.mutating:
            raise WebhookCallError(
                hook.name,
                "received invalid webhook response: validating webhook may not "
                "return response.patch",
            )
        patch_type = response.get("patchType")
        if not patch_type:
            raise WebhookCallError(
                hook.name,
                "received invalid webhook response: webhook returned response.patch but not "
                "response.patchType",
            )
        if patch_type != "JSONPatch":
            raise WebhookCallError(
                hook.name,
                f"received invalid webhook response: webhook returned invalid "
                f'response.patchType of "{patch_type}"',
            )
    return response


# -- the Statuses a client sees ----------------------------------------------------------------


def internal(message: str) -> StatusError:
    """``apierrors.NewInternalError``: 500, ``Internal error occurred: …``, one cause."""
    error = StatusError(500, f"Internal error occurred: {message}", reason="InternalError")
    error.details["causes"] = [{"message": message}]
    return error


def denied(webhook: str, status: Any, attrs: Attributes) -> StatusError:
    """A denial as the API server words it, the webhook's code and reason kept."""
    result: Mapping[str, Any] = status if isinstance(status, Mapping) else {}
    raw = result.get("code")
    # None given is the 403 kube-apiserver answers; a success code on a refusal is a 400.
    code = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw else 403
    code = max(code, 400)
    by = f'admission webhook "{webhook}" denied the request'
    if result.get("message"):
        text = f"{by}: {result['message']}"
    elif result.get("reason"):
        text = f"{by}: {result['reason']}"
    else:
        text = f"{by} without explanation"
    resource = attrs.resource
    qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    name = attrs.name or "Unknown"
    prefix = "Internal error occurred" if code == 500 else f'{qualified} "{name}" is forbidden'
    reason = str(result.get("reason") or ("InternalError" if code == 500 else "Forbidden"))
    error = StatusError(
        code,
        f"{prefix}: {text}",
        kind="" if code == 500 else resource.plural,
        name="" if code == 500 else name,
        group="" if code == 500 else resource.group,
        reason=reason,
    )
    if code == 500:
        error.details["causes"] = [{"message": text}]
    else:
        # The webhook's own field causes pass through, as kube-apiserver keeps the Status the
        # webhook gave: kubectl lists them under a 422 ("The … is invalid: * spec.x: …").
        details = result.get("details")
        causes = details.get("causes") if isinstance(details, Mapping) else None
        if isinstance(causes, list) and all(isinstance(c, Mapping) for c in causes):
            error.details["causes"] = [
                {k: str(v) for k, v in c.items() if k in {"reason", "message", "field"}}
                for c in causes
            ]
    return error


def options_for(
    operation: str,
    patch: bool,
    given: Mapping[str, Any] | None = None,
    *,
    dry_run: bool = False,
) -> dict[str, Any]:
    """The ``options`` a review carries: the write's own ``*Options`` object."""
    kind = {"CREATE": "CreateOptions", "DELETE": "DeleteOptions"}.get(
        operation, "PatchOptions" if patch else "UpdateOptions"
    )
    options = {**(given or {}), "kind": kind, "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        options["dryRun"] = ["All"]
    return options


__all__: Sequence[str] = (
    "Admission",
    "Attributes",
    "WebhookCallError",
    "check_configuration",
    "default_configuration",
    "denied",
    "internal",
    "options_for",
)
