"""What every replay of one of our ctypes bindings over a fake C library shares.

A stand-in hands back a real binding whose library is a fake asking a :class:`Replayer`; the
codec rebuilds the binding's own structs and its :class:`StatusError`. Each vendor's stand-in
names what differs (structs, error class, missing-symbol code, handles) and uses these pieces.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from gpustack_simulator.recording import Raises, RowFilter
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
from gpustack_simulator.replay.engine import Replayer
from gpustack_vendors.bindings.calls import StatusError


def trim_zero_tails(value: Any) -> Any:
    """Drop the trailing zero elements of every array field inside an encoded struct."""
    if isinstance(value, list):
        return [trim_zero_tails(item) for item in value]
    if not isinstance(value, dict):
        return value
    trimmed: dict[str, Any] = {}
    for key, raw in value.items():
        item = trim_zero_tails(raw)
        if "_type" in value and isinstance(item, list):
            end = len(item)
            while end and _is_zero(item[end - 1]):
                end -= 1
            item = item[:end]
        trimmed[key] = item
    return trimmed


def _is_zero(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_is_zero(v) for k, v in value.items() if k != "_type")
    if isinstance(value, list):
        return not value
    return value in (0, "")


def struct_table(*classes: type[ctypes.Structure]) -> Mapping[str, type[ctypes.Structure]]:
    """A binding's struct classes by name, the ``_type`` a recording tags them with."""
    return {cls.__name__: cls for cls in classes}


class BindingCodec:
    """A codec for one of our ctypes bindings: its structs and its ``StatusError``.

    A subclass names :attr:`label` (for messages), :attr:`structs`, :attr:`error_type` and the
    code the binding raises for a missing symbol (:attr:`not_found_code`); :attr:`trim_tails`
    records fixed-size arrays only up to their last non-zero element. The handle methods here
    are for a binding that names devices by plain ints (:attr:`no_handles` says so); a binding
    with device handles overrides all four.
    """

    library_id: str
    init_functions: frozenset[str]
    filters: Mapping[str, RowFilter] = {}
    label: ClassVar[str]
    structs: ClassVar[Mapping[str, type[ctypes.Structure]]]
    error_type: ClassVar[type[StatusError]]
    not_found_code: ClassVar[int]
    trim_tails: ClassVar[bool] = False
    no_handles: ClassVar[str]
    """Why the handle methods are never called, e.g. ``"DCMI has no handles"``."""

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Structs with every field (zero array tails omitted if asked), sentinels kept raw."""
        encoded = encode_ctypes(value, handle_ref, self)
        return trim_zero_tails(encoded) if self.trim_tails else encoded

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild with the binding's own struct class."""
        cls = self.structs.get(type_name)
        if cls is None:
            raise KeyError(f"{self.label} binding has no struct {type_name!r}")
        struct = cls()
        fill_struct(struct, fields, self)
        return struct

    def error(self, raises: Raises) -> BaseException:
        """The binding's error with the code: the fake library turns it back into a status."""
        return self.error_type(raises.code)

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Only the binding's own error class is recorded; ``.value`` is the status."""
        if isinstance(exc, self.error_type):
            return Raises(type=type(exc).__name__, code=int(exc.value))
        return None

    def missing(self, fn: str) -> BaseException:
        """The binding's own code for a symbol the library lacks."""
        return self.error_type(self.not_found_code, fn)

    def is_handle(self, value: object) -> bool:
        """Devices are plain ints; nothing is a handle."""
        return False

    def handle_key(self, handle: object) -> Hashable:
        """Never called: the binding has no handles."""
        raise TypeError(self.no_handles)

    def make_handle(self, ref: str) -> object:
        """Never called: the binding has no handles."""
        raise TypeError(f"{self.no_handles} (asked for {ref!r})")

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """Never called: the binding has no handles."""
        raise TypeError(self.no_handles)


class ReplayAnswer:
    """A fake C library's callback: one replayed call per C call."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """Answer the C call ``name`` from the recording."""
        return self.replayer.invoke(name, args, {})


def replayer_behind(lib: object, lib_type: type, label: str) -> Replayer:
    """The replayer behind a binding's fake library ``lib`` of type ``lib_type``."""
    answer = getattr(lib, "answer", None)
    if not isinstance(lib, lib_type) or not isinstance(answer, ReplayAnswer):
        raise TypeError(f"not a replayed {label} binding")
    return answer.replayer


def binding_module(
    binding: object,
    name: str,
    doc: str,
    functions: Iterable[str],
    error_type: type[StatusError],
) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    module = types.ModuleType(name, doc=doc)
    for fn in functions:
        setattr(module, fn, getattr(binding, fn))
    module.__dict__[error_type.__name__] = error_type
    return module
