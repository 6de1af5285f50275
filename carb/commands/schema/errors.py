"""Pydantic's errors as CARB's one-line config errors: ``<dotted.key>: <what is wrong>; allowed: ...``,
the allowed values or range read from the type the schema declares at that key (:func:`describe`)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

def error_line(schema: type[BaseModel], config: Any, err: dict[str, Any]) -> str:
    """``<dotted.key>: <what is wrong>; allowed: ...`` for one pydantic error of ``schema`` on ``config``."""
    kind, loc = err["type"], list(err["loc"])
    if "[key]" in loc:                 # a mapping's key that is not allowed (model.per_target.<target>)
        parts, tp, _ = _locate(schema, config, loc[:loc.index("[key]") - 1])
        keys = get_args(_strip(tp))
        allowed = _choices(keys[0]) if keys else None
        return f"{'.'.join(parts)}: key {loc[loc.index('[key]') - 1]!r} is not allowed; allowed: {allowed}"
    parts, tp, value = _locate(schema, config, loc)
    key = ".".join(parts) or "config"
    if kind in ("union_tag_invalid", "union_tag_not_found"):      # importer.name
        ctx = err.get("ctx") or {}
        return f"{key}.name: {ctx.get('tag')!r} is not allowed; allowed: [{ctx.get('expected_tags', '')}]"
    if kind == "extra_forbidden":
        return f"{key}: unknown key; allowed: {_fields(tp)}"
    if kind == "missing":
        return f"{key}: missing; must be {describe(tp)}"
    if kind == "carb":   # a model validator's error has no location: its ctx may name the key ({"key": "k"})
        named = None if parts else (err.get("ctx") or {}).get("key")
        return f"{named or key}: {err['msg']}"
    choices = _choices(tp)
    if choices is not None:
        return f"{key}: {value!r} is not allowed; allowed: {choices}"
    items = _list_item(tp)
    if items is not None and _choices(items) is not None and isinstance(value, list) and value:
        bad = [v for v in value if v not in _choices(items)]
        if bad:
            return f"{key}: {bad} not allowed; give {describe(tp)}"   # [] too where the list may be empty
    return f"{key}: must be {describe(tp)}, got {value!r}{_list_hint(key, tp, value)}"


def _list_hint(key: str, tp: Any, value: Any) -> str:
    """`` (a list: key=[value])`` when a list key got one value that would do as its item
    (``space.models=tv:resnet18`` for ``space.models=[tv:resnet18]``), else ``""``."""
    items = _list_item(tp)
    if items is None or value is None or isinstance(value, (list, dict, bool)):
        return ""
    choices = _choices(items)
    fits = (value in choices) if choices is not None else (
        isinstance(value, str) if _strip(items) is str else isinstance(value, (int, float)) and value > 0)
    return f" (a list: {key}=[{value}])" if fits else ""


def _locate(schema: type[BaseModel], config: Any, loc: list[Any]) -> tuple[list[str], Any, Any]:
    """``(key parts, type, value)`` of the config node an error ``loc`` points at. A list item's error
    is reported on the whole list; an extra key on its parent (whose type lists the allowed keys)."""
    parts: list[str] = []
    tp: Any = schema
    value = config
    for i, part in enumerate(loc):
        base = _strip(tp)
        if isinstance(part, int) or _list_item(tp) is not None:
            break
        if isinstance(base, type) and issubclass(base, BaseModel):
            field = _field(base, str(part))
            if field is None:          # an unknown key (or a discriminated union's tag)
                if _union(tp) and i + 1 < len(loc):
                    continue
                parts.append(str(part))
                return parts, base, value.get(part) if isinstance(value, dict) else None
            tp = _annotated(field)
        elif _union(tp):
            tp = next((m for m in _union(tp) if getattr(_strip(m), "__name__", "") == part
                       or _tag(m) == part), tp)
            continue
        elif get_origin(base) is dict:
            tp = get_args(base)[1]
        parts.append(str(part))
        value = value.get(part) if isinstance(value, dict) else None
    return parts, tp, value


def _field(model: type[BaseModel], name: str) -> Any:
    """The field of ``model`` named ``name`` in the config (its alias when it has one), or None."""
    for fname, f in model.model_fields.items():
        if (f.alias or fname) == name:
            return f
    return None


def _annotated(field: Any) -> Any:
    """A field's type with its constraints, as ``Annotated[type, *metadata]``."""
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


def _strip(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and without a ``None`` alternative."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    args = [a for a in get_args(tp) if a is not type(None)]
    if _is_union(tp) and len(args) == 1:
        return _strip(args[0])
    return tp


def _is_union(tp: Any) -> bool:
    """Whether ``tp`` is a union (``X | Y`` or ``Union[X, Y]``)."""
    import types

    return get_origin(tp) in (Union, types.UnionType)


def _union(tp: Any) -> list[Any]:
    """The members of a union of models (``importer``), else []."""
    base = _strip(tp)
    if not _is_union(base):
        return []
    return [a for a in get_args(base) if a is not type(None)]


def _tag(tp: Any) -> Any:
    """The ``name`` literal of a union member (``csv`` of :class:`CsvImporter`) or its discriminator ``Tag``
    (``resnet`` / ``zoo`` of a space), else None."""
    from pydantic import Tag

    if get_origin(tp) is Annotated:
        for meta in get_args(tp)[1:]:
            if isinstance(meta, Tag):
                return meta.tag
    m = _strip(tp)
    if isinstance(m, type) and issubclass(m, BaseModel) and "name" in m.model_fields:
        return (get_args(m.model_fields["name"].annotation) or (None,))[0]
    return None


def _list_item(tp: Any) -> Any:
    """The item type of a list type, else None."""
    base = _strip(tp)
    return get_args(base)[0] if get_origin(base) is list else None


def _choices(tp: Any) -> list[Any] | None:
    """The allowed values of a ``Literal`` type, else None."""
    base = _strip(tp)
    return list(get_args(base)) if get_origin(base) is Literal else None


def _fields(tp: Any) -> list[str]:
    """The config keys of a model type (aliases where given), else []."""
    base = _strip(tp)
    if isinstance(base, type) and issubclass(base, BaseModel):
        return [f.alias or n for n, f in base.model_fields.items()]
    return []


def _bounds(tp: Any) -> dict[str, Any]:
    """The ``ge``/``gt``/``le``/``lt`` and length constraints on ``tp`` (through ``Annotated``)."""
    out: dict[str, Any] = {}
    while get_origin(tp) is Annotated:
        tp, *meta = get_args(tp)
        for m in meta:
            for item in [m, *getattr(m, "metadata", [])]:
                for name in ("ge", "gt", "le", "lt", "min_length", "max_length"):
                    if getattr(item, name, None) is not None:
                        out.setdefault(name, getattr(item, name))
    return out


def describe(tp: Any) -> str:
    """What a value of type ``tp`` must be, in words (``null or an integer >= 1``)."""
    nullable = _is_union(_unannotated(tp)) and type(None) in get_args(_unannotated(tp))
    base, b = _strip(tp), _bounds(tp)
    inner = _unannotated(tp)
    if nullable:
        inner = next(a for a in get_args(inner) if a is not type(None))
        b = {**b, **_bounds(inner)}
    prefix = "null or " if nullable else ""
    members = [a for a in get_args(_unannotated(inner)) if a is not type(None)] \
        if _is_union(_unannotated(inner)) else []
    if len(members) > 1:       # a number or a word (transfer.precision_shrink: a number >= 0 or 'auto')
        return prefix + " or ".join(_member(m) for m in members)
    if base is bool:
        return prefix + "true or false"
    if base in (int, float):
        what = "an integer" if base is int else "a number"
        if b.get("gt") == 0 and "le" not in b:
            return prefix + ("a positive " + ("integer" if base is int else "number"))
        lo, hi = b.get("ge", b.get("gt")), b.get("le", b.get("lt"))
        if lo is not None and hi is not None:
            return prefix + f"{what} in {'[' if 'ge' in b else '('}{lo}, {hi}]"
        if lo is not None:
            return prefix + f"{what} {'>=' if 'ge' in b else '>'} {lo}"
        return prefix + what
    if base is str:
        return prefix + "a text"
    if get_origin(base) is Literal:
        return prefix + f"one of {list(get_args(base))}"
    if get_origin(base) is list:
        lo, hi = b.get("min_length"), b.get("max_length")
        size = "a non-empty list of" if lo == 1 and hi is None else "a list of"
        if lo and hi:
            size = f"a list of {lo}" if lo == hi else f"a list of {lo} to {hi}"
        elif lo and lo > 1:
            size = f"a list of at least {lo}"
        return prefix + f"{size} {_plural(get_args(base)[0])}"
    if isinstance(base, type) and issubclass(base, BaseModel):
        return prefix + f"a mapping of {_fields(base)}"
    if get_origin(base) is dict:
        return prefix + "a mapping"
    return prefix + "a valid value"


def _member(tp: Any) -> str:
    """:func:`describe` of one alternative of a union; a one-value ``Literal`` as the value itself (``'auto'``)."""
    choices = _choices(tp)
    if choices is not None and len(choices) == 1:
        return repr(choices[0])
    return describe(tp)


def _unannotated(tp: Any) -> Any:
    """``tp`` without ``Annotated`` (a ``None`` alternative kept)."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _plural(tp: Any) -> str:
    """``describe`` of a list's items, as a plural (``integers >= 1``, ``['fp32', 'fp16', 'bf16']``)."""
    if _choices(tp) is not None:
        return str(_choices(tp))
    words = describe(tp)
    for one, many in (("an integer", "integers"), ("a positive number", "positive numbers"),
                      ("a positive integer", "positive integers"), ("a number", "numbers"),
                      ("a text", "texts"), ("true or false", "true/false values")):
        if words.startswith(one):
            return many + words[len(one):]
    return words
