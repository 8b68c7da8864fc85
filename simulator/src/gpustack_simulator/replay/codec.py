"""How one binding's values cross the recording boundary, in both directions.

Each stand-in has a codec: it turns the binding's return values (ctypes structs, attribute bags,
handles, dicts) into the recording's JSON shape and back into **the binding's own types**, and
rebuilds the binding's own exceptions from numeric codes. The replay engine and the recorder
are generic over it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol

from gpustack_simulator.recording import Raises, RowFilter


class Codec(Protocol):
    """The binding-specific half of replay and recording."""

    library_id: str
    init_functions: frozenset[str]
    """Calls that (re)start the replay clock: time in a recording counts from init."""
    filters: Mapping[str, RowFilter]

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Turn a binding value into the recording's JSON shape."""
        ...

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild a tagged struct (``{"_type": …}``) as the binding's own type."""
        ...

    def error(self, raises: Raises) -> BaseException:
        """Rebuild the binding's exception from its numeric code."""
        ...

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Record a binding exception; ``None`` for anything that is not the binding's."""
        ...

    def missing(self, fn: str) -> BaseException:
        """The binding's own "function not found" error, for a call the recording lacks."""
        ...

    def is_handle(self, value: object) -> bool:
        """Whether a value is one of the binding's device handles."""
        ...

    def handle_key(self, handle: object) -> Hashable:
        """A stable identity for a live handle (the address it points at)."""
        ...

    def make_handle(self, ref: str) -> object:
        """Mint a fresh handle object of the binding's handle type for a replayed ref."""
        ...

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """Name a newly seen handle from the call that produced it (``gpu0``, ``gpu0/mig3``).

        ``args`` are already encoded, so a parent handle appears as ``{"_handle": ref}``.
        """
        ...


class HandleRef(Protocol):
    """Looks up the symbolic ref of a live handle while encoding arguments."""

    def __call__(self, handle: object) -> str:
        """The ref of ``handle``; raises if it was never issued."""
        ...


def encode_ctypes(value: object, handle_ref: HandleRef, codec: Codec) -> Any:
    """Encode ctypes structs (every ``_fields_`` entry, recursively), arrays, bytes and scalars.

    Sentinels are kept raw (``0xFFFFFFFF`` stays 4294967295): converting them is the backend's
    job, and a recording that pre-converted them could not test that the backend does.
    """
    if codec.is_handle(value):
        return {"_handle": handle_ref(value)}
    if isinstance(value, ctypes.Structure):
        fields: dict[str, Any] = {"_type": type(value).__name__}
        for spec in value._fields_:
            name = spec[0]
            fields[name] = encode_ctypes(getattr(value, name), handle_ref, codec)
        return fields
    if isinstance(value, ctypes.Array):
        return [encode_ctypes(item, handle_ref, codec) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list | tuple):
        return [codec.encode(item, handle_ref) for item in value]
    if isinstance(value, dict):
        return {str(k): codec.encode(v, handle_ref) for k, v in value.items()}
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    raise TypeError(f"{codec.library_id}: cannot record a value of type {type(value).__name__}")


def fill_struct(struct: ctypes.Structure, fields: Mapping[str, Any], codec: Codec) -> None:
    """Set a struct's fields from recorded values, rebuilding nested structs and char arrays."""
    types = {spec[0]: spec[1] for spec in struct._fields_}
    for name, value in fields.items():
        if name == "_type":
            continue
        if name not in types:
            raise KeyError(f"{type(struct).__name__} has no field {name!r}")
        ctype = types[name]
        if isinstance(value, dict) and "_type" in value:
            setattr(struct, name, codec.build(str(value["_type"]), value))
        elif isinstance(value, str) and issubclass(ctype, ctypes.Array):
            setattr(struct, name, value.encode())
        elif isinstance(value, list) and issubclass(ctype, ctypes.Array):
            array = ctype()
            for i, item in enumerate(value):
                array[i] = codec.build(str(item["_type"]), item) if isinstance(item, dict) else item
            setattr(struct, name, array)
        else:
            setattr(struct, name, value)
