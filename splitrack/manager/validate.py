"""The trust boundary: a request's JSON checked against its schema (openapi.py).

    check(body, JOB_REQUEST, "body")    # ApiError(400, "body.procs: expected an
                                        #   integer, got a string") if it does not fit

Nothing the service did not check reaches the manager. The schemas use a small
part of JSON Schema, and this checks exactly that part: type (one or a list),
enum, pattern, minimum, maximum, minItems, items, properties, required,
additionalProperties (false, or the schema of every other value). A JSON true
is no integer here, although Python's bool is an int.
"""

import re
from typing import Any

from splitrack.manager.errors import ApiError

_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
               "array": list, "object": dict, "null": type(None)}
_ARTICLE = {"integer": "an integer", "array": "an array", "object": "an object",
            "null": "null"}


def check(value: Any, schema: dict[str, Any], where: str) -> None:
    _type(value, schema, where)
    if "enum" in schema and value not in schema["enum"]:
        raise ApiError(400, f"{where}: {value!r} is not one of "
                            f"{', '.join(map(str, schema['enum']))}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"],
                                                                         value):
        raise ApiError(400, f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        _bounds(value, schema, where)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            raise ApiError(400, f"{where}: at least {schema['minItems']} item(s) needed")
        for i, item in enumerate(value):
            check(item, schema.get("items", {}), f"{where}[{i}]")
    if isinstance(value, dict):
        _object(value, schema, where)


def _type(value: Any, schema: dict[str, Any], where: str) -> None:
    if "type" not in schema:
        return
    names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    for name in names:
        is_bool = isinstance(value, bool)
        if isinstance(value, _JSON_TYPES[name]) and (name == "boolean" or not is_bool):
            return
    wanted = " or ".join(_ARTICLE.get(n, f"a {n}") for n in names)
    raise ApiError(400, f"{where}: expected {wanted}, got {_describe(value)}")


def _bounds(value: float, schema: dict[str, Any], where: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise ApiError(400, f"{where}: {value} is less than {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise ApiError(400, f"{where}: {value} is more than {schema['maximum']}")


def _object(value: dict[str, Any], schema: dict[str, Any], where: str) -> None:
    known = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            raise ApiError(400, f"{where}: missing field {name!r}")
    others = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in known:
            check(item, known[name], f"{where}.{name}")
        elif others is False:
            raise ApiError(400, f"{where}: unknown field {name!r} (fields: "
                                f"{', '.join(known)})")
        elif isinstance(others, dict):
            check(item, others, f"{where}.{name}")


def _describe(value: Any) -> str:
    for name, types in _JSON_TYPES.items():
        if isinstance(value, types) and not (isinstance(value, bool) and name != "boolean"):
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
            return f"{_ARTICLE.get(name, f'a {name}')} ({shown})" if name != "null" else "null"
    return repr(value)
