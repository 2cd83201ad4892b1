"""Validation against `schema/recipe.schema.json`, with messages a person can act on.

The first violation in file order (product before bases) is raised as
`file:line:column: key.path: expected <what>; got <value>`, plus the nearest valid word for
an unknown key or a misspelt choice. Two schema keywords are our own: `x-expected` (the phrase
for what a value should be) and `powerOfTwo`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema

from etbuild.errors import did_you_mean
from etbuild.recipe.config import SCHEMA, resolve
from etbuild.recipe.parse import Doc
from etbuild.recipe.places import KeyPath, Location, located_error, show


def _power_of_two(
    validator: Any, enabled: bool, instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """The `powerOfTwo` keyword."""
    if enabled and validator.is_type(instance, "integer") and not _is_power_of_two(instance):
        yield jsonschema.ValidationError(f"{instance!r} is not a power of two")


def _is_power_of_two(number: int) -> bool:
    return number >= 1 and not number & (number - 1)


_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"powerOfTwo": _power_of_two})
_VALIDATOR = _Validator(SCHEMA)


def validator(schema: dict[str, Any]) -> Any:
    """A validator for another document kind's schema (a release file), with our keywords.
    Such a schema keeps its choices inline (`enum`, `const`): `$ref`s resolve against the recipe's."""
    return _Validator(schema)

_TYPE_PHRASES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _type_phrase(types: str | list[str]) -> str:
    names = [types] if isinstance(types, str) else types
    return " or ".join(_TYPE_PHRASES[name] for name in names)


def _bound_phrase(schema: dict[str, Any], op: str, bound: Any) -> str:
    types = schema.get("type", "number")
    kind = types if isinstance(types, str) else next(t for t in types if t != "null")
    return f"{_type_phrase(kind)} {op} {bound}"


_EXPECTED = {
    "type": lambda schema, value: _type_phrase(value),
    "minimum": lambda schema, value: _bound_phrase(schema, ">=", value),
    "exclusiveMinimum": lambda schema, value: _bound_phrase(schema, ">", value),
    "maximum": lambda schema, value: _bound_phrase(schema, "<=", value),
    "minItems": lambda schema, value: f"a list of at least {value} item{'s' * (value != 1)}",
    "minProperties": lambda schema, value: f"a mapping of at least {value} key{'s' * (value != 1)}",
    "minLength": lambda schema, value: f"a string of at least {value} character(s)",
    "pattern": lambda schema, value: f"a string matching {value}",
    "powerOfTwo": lambda schema, value: "a power of two",
}


def validate(doc: Doc, against: Any = _VALIDATOR) -> None:
    """Raise the first schema violation in file order (product first) as a RecipeError."""
    order = list(doc.files)
    found = [_describe(error, doc) for error in against.iter_errors(doc.data)]
    if found:
        where, path, message = min(found, key=lambda f: (order.index(f[0].file), f[0].line, f[0].column))
        raise located_error(where, path, message)


def _describe(error: jsonschema.ValidationError, doc: Doc) -> tuple[Location, KeyPath, str]:
    """Where a schema violation is, its key path, and the message for it."""
    inner = _mapping_branch(error)
    if inner is not None:
        return _describe(inner, doc)
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties":
        known = list(error.schema.get("properties", {}))
        key = next(k for k in error.instance if k not in known)
        return doc.where((*path, key)), (*path, key), _unknown_key(key, known)
    if error.validator == "required":
        key = next(k for k in error.validator_value if k not in error.instance)
        return doc.values[path], (*path, key), f"missing required key '{key}'"
    if "propertyNames" in error.relative_schema_path:
        path = (*path, error.instance)
        return doc.where(path), path, _expected(error)
    return doc.values[path], path, _expected(error)


def _mapping_branch(error: jsonschema.ValidationError) -> jsonschema.ValidationError | None:
    """For a mapping that fails an `anyOf` with a branch for mappings: that branch's first violation."""
    if error.validator != "anyOf" or not isinstance(error.instance, dict):
        return None
    for index, branch in enumerate(error.validator_value):
        if resolve(branch).get("type") == "object":
            return next((e for e in error.context or () if e.relative_schema_path[0] == index), None)
    return None


def _unknown_key(key: str, known: list[str]) -> str:
    hint = did_you_mean(key, known)
    if hint:
        return f"unknown key '{key}'{hint}"
    return f"unknown key '{key}'; expected one of {', '.join(known)}"


def _expected(error: jsonschema.ValidationError) -> str:
    """`expected <what>; got <value>[ — did you mean <choice>?]` for one violated keyword."""
    choices = _choices(error.schema)
    phrase = error.schema.get("x-expected")
    if phrase is None and choices is not None:
        phrase = "one of " + ", ".join(map(_choice, choices))
    if phrase is None and error.validator in _EXPECTED:
        phrase = _EXPECTED[str(error.validator)](error.schema, error.validator_value)
    if phrase is None:
        phrase = f"a value that satisfies '{error.validator}' ({error.message})"
    message = f"expected {phrase}; got {show(error.instance)}"
    if choices is not None and isinstance(error.instance, str):
        message += did_you_mean(error.instance, [str(choice) for choice in choices])
    return message


def _choices(schema: dict[str, Any]) -> list[Any] | None:
    """The values a schema admits when it admits only listed values (`enum`, `const`, and
    `anyOf` of those, through `$ref`s; an `anyOf` branch for mappings is not a choice), else None."""
    schema = resolve(schema)
    if "enum" in schema:
        return list(schema["enum"])
    if "const" in schema:
        return [schema["const"]]
    if "anyOf" in schema:
        branches = [_choices(branch) for branch in schema["anyOf"] if resolve(branch).get("type") != "object"]
        if all(branch is not None for branch in branches):
            return [choice for branch in branches for choice in branch or ()]
    return None


def _choice(value: Any) -> str:
    return value if isinstance(value, str) else show(value)
