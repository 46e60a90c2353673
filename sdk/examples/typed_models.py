"""The kinds of params model a typed task takes, and params refused before anything is sent.
It needs no server (pydantic models need pydantic installed; the SDK does not require it)::

    python sdk/examples/typed_models.py
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec
import pydantic

from orbit_sdk import PayloadError, task_ref


class ResizeStruct(msgspec.Struct, frozen=True):  # msgspec Struct
    url: str
    width: int


@dataclass(frozen=True)
class ResizeDataclass:  # dataclass
    url: str
    width: int


class ResizeDict(TypedDict):  # TypedDict: plain dicts, checked by the type checker
    url: str
    width: int


class ResizeModel(pydantic.BaseModel):  # pydantic model, with its own validators
    url: str
    width: int = pydantic.Field(gt=0)


class Thumbnail(msgspec.Struct, frozen=True):
    url: str


by_struct = task_ref(queue="images", type="resize", params=ResizeStruct, result=Thumbnail)
by_dataclass = task_ref(queue="images", type="resize", params=ResizeDataclass, result=Thumbnail)
by_dict = task_ref(queue="images", type="resize", params=ResizeDict, result=Thumbnail)
by_model = task_ref(queue="images", type="resize", params=ResizeModel, result=Thumbnail)


def main() -> None:
    # request() is what submit() sends: the params encoded as JSON and checked.
    print(by_struct.request(ResizeStruct(url="a.png", width=64)).params)
    print(by_dataclass.request(ResizeDataclass(url="a.png", width=64)).params)
    print(by_dict.request({"url": "a.png", "width": 64}).params)
    print(by_model.request(ResizeModel(url="a.png", width=64)).params)

    # Untyped input (a web form, say) slips past the type checker; submit() and request()
    # refuse it before anything is sent.
    form: dict[str, Any] = {"url": "a.png", "width": "wide"}
    try:
        by_dataclass.request(ResizeDataclass(**form))
    except PayloadError as error:
        print(error.code, error.message)
    try:
        by_model.request(ResizeModel.model_construct(url="a.png", width=0))
    except PayloadError as error:
        print(error.code, error.details)


if __name__ == "__main__":
    main()
