"""`tools`, `tool_choice` and `response_format` as OpenAI defines them, checked, and what the
engine is asked for: the calls to read and the constraint on the answer."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator, SchemaError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from core.types import Structured, Tool, ToolUse

NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}$"


def _schema(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and (problem := schema_problem(json.dumps(value, sort_keys=True))) is not None:
        raise ValueError(f"not a valid JSON Schema: {problem}")
    return value


_CHECKED_KEPT = 1024
_checked: OrderedDict[bytes, str | None] = OrderedDict()  # by the schema's digest: problem, or None
_checked_lock = threading.Lock()


def schema_problem(schema: str) -> str | None:
    """Checking a schema costs most of a millisecond (a large one, a tenth of a second); an agent
    sends the same tools every turn. Thread-safe: the API checks large schemas in a thread first."""
    digest = hashlib.sha256(schema.encode()).digest()
    with _checked_lock:
        if digest in _checked:
            _checked.move_to_end(digest)
            return _checked[digest]
    try:
        Draft202012Validator.check_schema(json.loads(schema))
        problem = None
    except SchemaError as exc:
        problem = exc.message
    with _checked_lock:
        _checked[digest] = problem
        while len(_checked) > _CHECKED_KEPT:
            _checked.popitem(last=False)
    return problem


JsonSchema = Annotated[dict[str, Any] | None, AfterValidator(_schema)]


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: JsonSchema = None
    strict: bool | None = None


class ToolDef(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: FunctionDef


class ChosenFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: ChosenFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    schema_: JsonSchema = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ToolParamError(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def check_tools(tools: list[ToolDef] | None, choice: ToolChoice | None) -> None:
    """What the field types cannot say on their own; OpenAI refuses these too."""
    names = [t.function.name for t in tools or ()]
    if len(set(names)) != len(names):
        raise ToolParamError("tools", "two tools have the same name")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        raise ToolParamError("tool_choice", f"tool_choice names {choice.function.name!r}, which is not among the tools")
    if choice == "required" and not names:
        raise ToolParamError("tool_choice", "tool_choice 'required' needs tools")


def tool_use(tools: list[ToolDef] | None, choice: ToolChoice | None, parallel: bool | None) -> ToolUse | None:
    """The calls the engine is to read, or None: no tools, or `tool_choice: "none"`."""
    if not tools or choice == "none":
        return None
    picked = choice.function.name if isinstance(choice, NamedToolChoice) else choice or "auto"
    return ToolUse(tuple(_tool(t.function) for t in tools), picked, parallel is not False)


def structured(response_format: ResponseFormat | None) -> Structured | None:
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return Structured()
    spec = response_format.json_schema
    return Structured((spec.schema_ if spec else None) or {"type": "object"})


def _tool(function: FunctionDef) -> Tool:
    parameters = function.parameters or {"type": "object", "properties": {}}
    return Tool(function.name, function.description or "", parameters, bool(function.strict))
