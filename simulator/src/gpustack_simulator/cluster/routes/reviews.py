"""SubjectAccessReview, SelfSubjectAccessReview and TokenReview, decided from scenario RBAC."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec
from quart import Response, request

from gpustack_core.status import StatusError
from gpustack_simulator.cluster import protobuf
from gpustack_simulator.cluster.routes.base import Caller, RouteBase, json_response


class ReviewRoutes(RouteBase):
    """The reviews the worker posts to authenticate and authorize its callers."""

    async def _review_body(self) -> dict[str, Any]:
        raw = await request.get_data(as_text=False)
        data = raw if isinstance(raw, bytes) else raw.encode()
        try:
            if "protobuf" in request.headers.get("Content-Type", ""):
                body: dict[str, Any] = protobuf.decode_review(data)
            else:
                body = msgspec.json.decode(data)
        except (msgspec.DecodeError, protobuf.ProtobufError, UnicodeDecodeError) as exc:
            raise StatusError(400, f"the request body is not a review: {exc}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise StatusError(400, "the review has no spec")
        return body

    async def sar(self, caller: Caller) -> Response:
        """A SubjectAccessReview, decided for the user and groups it names."""
        self.require_method("POST")
        self.authorize(caller, "create", "subjectaccessreviews", group="authorization.k8s.io")
        body = await self._review_body()
        spec = body["spec"]
        user = str(spec.get("user", ""))
        groups = tuple(spec.get("groups") or ())
        return json_response(self._decide(body, user, groups, spec.get("resourceAttributes") or {}))

    async def self_sar(self, caller: Caller) -> Response:
        """A SelfSubjectAccessReview, decided for the caller (``kubectl auth can-i``)."""
        self.require_method("POST")
        body = await self._review_body()
        return json_response(
            self._decide(
                body, caller.name, caller.groups, body["spec"].get("resourceAttributes") or {}
            )
        )

    def _decide(
        self,
        body: dict[str, Any],
        user: str,
        groups: tuple[str, ...],
        attributes: Mapping[str, Any],
    ) -> dict[str, Any]:
        allowed, reason = self.state.expanded.allowed(
            user,
            groups,
            verb=str(attributes.get("verb", "")),
            group=str(attributes.get("group", "")),
            resource=str(attributes.get("resource", "")),
            subresource=str(attributes.get("subresource", "")),
            namespace=str(attributes.get("namespace", "")),
            name=str(attributes.get("name", "")),
        )
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        if not allowed:
            status["denied"] = False  # no rule denies explicitly; RBAC only allows
        review = copy.deepcopy(body)
        review["status"] = status
        review.setdefault("metadata", {})["creationTimestamp"] = None
        return review

    async def token_review(self, caller: Caller) -> Response:
        """A TokenReview: the scenario user a token belongs to, with its groups."""
        self.require_method("POST")
        self.authorize(caller, "create", "tokenreviews", group="authentication.k8s.io")
        body = await self._review_body()
        user = self.state.user_for_token(str(body["spec"].get("token", "")))
        review = copy.deepcopy(body)
        review["status"] = (
            {
                "authenticated": True,
                "user": {"username": user.name, "groups": [*user.groups, "system:authenticated"]},
            }
            if user is not None
            else {"authenticated": False, "error": "invalid bearer token"}
        )
        return json_response(review)
