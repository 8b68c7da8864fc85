r"""Just enough of Kubernetes' protobuf encoding to read the reviews clients post.

client-go sends built-in kinds as ``application/vnd.kubernetes.protobuf`` and does not fall back
to JSON when refused, so ``kubectl auth can-i`` only works against a server that reads them. The
envelope is the magic ``k8s\0`` and a ``runtime.Unknown`` whose ``raw`` field holds the object;
we decode the wire format generically and pick the review fields by number.
"""

from __future__ import annotations

from typing import Any

MAGIC = b"k8s\x00"

Fields = dict[int, list[Any]]


class ProtobufError(ValueError):
    """Bytes that are not the protobuf the stand-in expects."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ProtobufError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data: bytes) -> Fields:
    """Decode one message into field number → values (varints as int, the rest as bytes)."""
    found: Fields = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            found.setdefault(number, []).append(value)
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise ProtobufError("truncated field")
            found.setdefault(number, []).append(data[at : at + length])
            at += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            found.setdefault(number, []).append(data[at : at + size])
            at += size
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return found


def _text(message: Fields, number: int) -> str:
    values = message.get(number)
    return values[-1].decode() if values else ""


def _texts(message: Fields, number: int) -> list[str]:
    return [value.decode() for value in message.get(number, [])]


def _message(message: Fields, number: int) -> Fields:
    values = message.get(number)
    return fields(values[-1]) if values else {}


def _resource_attributes(message: Fields) -> dict[str, str]:
    names = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
    return {name: _text(message, i) for i, name in enumerate(names, start=1) if _text(message, i)}


def decode_review(body: bytes) -> dict[str, Any]:
    """A (Self)SubjectAccessReview or TokenReview as the JSON dict the handlers expect."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic")
    envelope = fields(body[len(MAGIC) :])
    type_meta = _message(envelope, 1)
    kind, api_version = _text(type_meta, 2), _text(type_meta, 1)
    raw = envelope.get(2)
    obj = fields(raw[-1]) if raw else {}
    spec = _message(obj, 2)
    document: dict[str, Any] = {"kind": kind, "apiVersion": api_version, "spec": {}}
    if kind == "TokenReview":
        document["spec"] = {"token": _text(spec, 1)}
        return document
    attributes = _resource_attributes(_message(spec, 1))
    if attributes:
        document["spec"]["resourceAttributes"] = attributes
    if kind == "SubjectAccessReview":
        document["spec"]["user"] = _text(spec, 3)
        document["spec"]["groups"] = _texts(spec, 4)
    return document
