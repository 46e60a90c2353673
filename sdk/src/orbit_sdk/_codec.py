"""How a typed task's params and result cross the wire, for each kind of model.

A :class:`Codec` turns a value into JSON-ready builtins and back, validating on both ways:
``encode`` checks that what it produced decodes as the model again (a dataclass or a TypedDict
does not check its own field types), ``decode`` builds the model from what JSON carried. msgspec
does the work for Structs, dataclasses, TypedDicts and plain types (``int``, ``list[str]``,
``None``, ...); pydantic models use their own ``model_validate`` and ``model_dump``, so pydantic
is never imported here and never required.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final, Generic, Literal, TypeAlias, TypeVar, cast, is_typeddict

import msgspec
import msgspec.inspect

from orbit_sdk._errors import OrbitError

__all__ = [
    "INVALID_PARAMS",
    "INVALID_RESULT",
    "Codec",
    "ModelKind",
    "PayloadError",
    "model_kind",
]

T = TypeVar("T")

ModelKind: TypeAlias = Literal["struct", "dataclass", "typeddict", "pydantic", "value"]
OBJECT_KINDS: Final = frozenset({"struct", "dataclass", "typeddict", "pydantic"})
INVALID_PARAMS: Final = "invalid_params"
INVALID_RESULT: Final = "invalid_result"


class PayloadError(OrbitError, ValueError):
    """A typed task's params or result do not fit its model.

    ``code`` is ``invalid_params`` or ``invalid_result``; ``details`` names the ``task``
    (``queue/type``) and the ``model``, and ``message`` says which field is wrong
    (``Expected `int`, got `str` - at `$.a```). Raised before anything is sent by ``submit``
    and when ``wait`` reads a result; on a worker it fails the attempt without retry.
    """

    _default_code = INVALID_PARAMS
    _default_category = "protocol"


def model_kind(model: Any) -> ModelKind:
    """Which kind of model ``model`` is; ``"value"`` for anything else msgspec handles."""
    if isinstance(model, type):
        if issubclass(model, msgspec.Struct):
            return "struct"
        if callable(getattr(model, "model_validate", None)) and callable(
            getattr(model, "model_dump", None)
        ):
            return "pydantic"  # pydantic v2's BaseModel, found without importing pydantic
    if dataclasses.is_dataclass(model) and isinstance(model, type):
        return "dataclass"
    if is_typeddict(model):
        return "typeddict"
    return "value"


def _name(model: Any) -> str:
    return getattr(model, "__qualname__", None) or repr(model)


class Codec(Generic[T]):
    """Encodes and decodes values of ``model`` for the task named ``task``.

    ``code`` is the error code of a value that does not fit (``invalid_params`` or
    ``invalid_result``). Raises ``TypeError`` at once for a model msgspec cannot handle, or
    when ``require_object`` and the model is not a Struct, dataclass, TypedDict or pydantic
    model (a task's params are a JSON object).
    """

    def __init__(self, model: Any, *, task: str, code: str, require_object: bool) -> None:
        self.model = model
        self.kind = model_kind(model)
        self.task = task
        self.code = code
        if require_object and self.kind not in OBJECT_KINDS:
            raise TypeError(
                f"{task}: params must be a msgspec Struct, a dataclass, a TypedDict or a "
                f"pydantic model, not {_name(model)}"
            )
        if self.kind != "pydantic":
            _check_supported(model, task)

    def __repr__(self) -> str:
        return f"Codec({_name(self.model)}, kind={self.kind!r})"

    def encode(self, value: T) -> Any:
        """``value`` as JSON-ready builtins, checked against the model."""
        if self.kind == "pydantic":
            instance = self._validate_pydantic(value)
            return instance.model_dump(mode="json")
        try:
            builtins = msgspec.to_builtins(value)
        except (TypeError, ValueError) as exc:
            raise self._error(f"cannot be encoded as JSON: {exc}") from exc
        self.decode(builtins)  # a dataclass or TypedDict built with the wrong field types
        return builtins

    def decode(self, raw: Any) -> T:
        """The model's value from JSON-decoded ``raw``."""
        if self.kind == "pydantic":
            return cast("T", self._validate_pydantic(raw))
        try:
            return cast("T", msgspec.convert(raw, type=self.model))
        except msgspec.ValidationError as exc:
            raise self._error(str(exc)) from exc

    def _validate_pydantic(self, value: Any) -> Any:
        try:
            # model_validate of an instance returns it unchecked (model_construct builds one
            # without checks), so check its dump instead; the check below says what is wrong.
            is_model = isinstance(value, self.model)
            data = value.model_dump(mode="json", warnings=False) if is_model else value
            return self.model.model_validate(data)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise self._error(_first_line(exc)) from exc

    def _error(self, reason: str) -> PayloadError:
        what = "params do" if self.code == INVALID_PARAMS else "result does"
        return PayloadError(
            f"{self.task}: the {what} not fit {_name(self.model)}: {reason}",
            code=self.code,
            details={"task": self.task, "model": _name(self.model)},
        )


def _check_supported(model: Any, task: str) -> None:
    """Fail now, not at the first task, for a model JSON cannot carry (msgspec would take an
    arbitrary class as a custom type and refuse every value at run time)."""
    try:
        info = msgspec.inspect.type_info(model)
    except TypeError as exc:
        raise TypeError(f"{task}: {_name(model)} cannot be a task's model: {exc}") from exc
    if isinstance(info, msgspec.inspect.CustomType):
        raise TypeError(
            f"{task}: {_name(model)} cannot be a task's model: use a msgspec Struct, a "
            "dataclass, a TypedDict, a pydantic model or a JSON type"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return " ".join(line.strip() for line in text.splitlines()[:3])
