"""CEL device selectors in the environment Kubernetes DRA gives them.

Who calls it: the API models (to refuse a bad expression when an object is loaded) and the
allocator (to test devices). Pure; imports the `cel` library (a Rust CEL core) and
aipaas.api.quantity.

The environment: one variable, ``device``, with ``driver`` (string),
``allowMultipleAllocations`` (bool), ``attributes`` (a map of
domain to a map of name to int/bool/string/semver) and ``capacity`` (a map of domain to a map of
name to quantity); ``quantity()``/``semver()`` and their methods (``compareTo``, ``isGreaterThan``,
``isLessThan``, ``sign``, ``add``, ``sub``, ``asInteger``, ``major``...); the cel-go strings
extension (``lowerAscii``, ``split``...).

What the CEL library does not do, and what this module does instead:

* Type checking: it has no checker. :mod:`aipaas.devices.cel_types` checks the expression
  against Kubernetes' typed DRA environment when it is compiled (a result that cannot be a bool,
  an unknown device field, an operand of the wrong type: ``device.driver == 1``, which the
  library would answer ``false``), and this module refuses undeclared identifiers and unknown
  functions; all with their line and column.
* Cost limit: it has none and cannot be interrupted. This module estimates a cost from the
  token stream before it accepts an expression: every token costs 1, and a token inside a
  comprehension macro (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) costs
  ``COMPREHENSION_BOUND`` times more per level of nesting, because device maps hold at most 32
  entries and literal lists are bounded by the expression's length. Expressions over
  ``COST_LIMIT`` or ``MAX_EXPRESSION_LENGTH`` are refused. Quadratic macro nesting is therefore
  bounded (two levels pass when small; three levels never do).
* Missing domains: Kubernetes answers an empty map for an attribute domain the device does not
  have; here every domain named by the expression is pre-filled with an empty map.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import cel
from cel import stdlib as cel_stdlib

from aipaas.api.quantity import QuantityError, parse_quantity
from aipaas.devices.cel_types import CelTypeError, check_selector_types

__all__ = [
    "COST_LIMIT",
    "MAX_EXPRESSION_LENGTH",
    "CelError",
    "CelEvalError",
    "CompiledSelector",
    "Path",
    "compile_selector",
    "make_quantity",
    "make_semver",
]

MAX_EXPRESSION_LENGTH: Final = 10 * 1024
COST_LIMIT: Final = 1_000_000
COMPREHENSION_BOUND: Final = 64

QUANTITY_KEY: Final = "__quantity__"
SEMVER_KEY: Final = "__semver__"

Path = tuple[str, ...]
"""What a selector reads: ("driver",), ("attributes", domain, name), ("attributes", domain),
("capacity", domain, name), ("capacity", domain), ("attributes",) or ("capacity",)."""


class CelError(ValueError):
    """An expression that cannot be accepted: syntax, undeclared name, unknown function, cost."""

    def __init__(self, expression: str, reason: str, line: int = 0, column: int = 0) -> None:
        self.expression = expression
        self.reason = reason
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(f"CEL {where}{reason}")


class CelEvalError(RuntimeError):
    """Evaluating an accepted expression failed on one device (missing key, no overload...)."""


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A compiled, checked expression; evaluate it with :meth:`evaluate`.

    ``paths`` is what the expression reads of a device, or None when it reads the device in a
    way this module cannot follow (then every device is its own cache entry).
    """

    expression: str
    program: cel.Program
    paths: tuple[Path, ...] | None
    cost: int
    context: cel.Context
    domains: tuple[str, ...] = ()
    """Strings the expression indexes with (``x["gpu.nvidia.com"]``): the attribute domains a
    device without them must still answer with an empty map."""

    def evaluate(self, device: Mapping[str, Any]) -> bool:
        """Evaluate on a CEL device value (see :func:`device_value`); True when selected.

        Raises:
            CelEvalError: evaluation failed, or the result is not a bool.
        """
        try:
            # Re-binding the variable of a per-expression context is the cheapest way to call
            # the library (a context holding only the functions this expression uses).
            self.context.add_variable("device", device)
            result = self.program.execute(self.context)
        except Exception as err:  # the library raises KeyError, TypeError, RuntimeError, ...
            raise CelEvalError(_eval_message(err)) from err
        if not isinstance(result, bool):
            raise CelEvalError(
                f"expression must evaluate to a bool, got {type(result).__name__} {result!r}"
            )
        return result


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> CompiledSelector:
    """Compile and check a selector once; the same text returns the same object.

    Raises:
        CelError: with line and column for syntax errors, undeclared identifiers and unknown
            functions; without position for an expression that is too long or too costly.
    """
    if not expression.strip():
        raise CelError(expression, "expression must not be empty")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelError(
            expression,
            f"expression is {len(expression)} characters long, at most "
            f"{MAX_EXPRESSION_LENGTH} are allowed",
        )
    try:
        program = cel.compile(expression)
    except ValueError as err:
        raise _syntax_error(expression, str(err)) from err
    tokens = _tokenize(expression)
    _check_names(expression, tokens)
    for literal in _literal_calls(tokens):
        _check_literal(expression, literal)
    try:
        check_selector_types(tokens, len(expression))
    except CelTypeError as err:
        line, column = _position(expression, err.offset)
        raise CelError(expression, err.reason, line, column) from err
    cost = _estimate_cost(tokens)
    if cost > COST_LIMIT:
        raise CelError(
            expression,
            f"expression is too costly: estimated cost {cost} exceeds the limit {COST_LIMIT} "
            "(nested all/exists/map/filter multiply the cost)",
        )
    context = _context_for(set(program.references()["functions"]))
    compiled = CompiledSelector(
        expression, program, _read_paths(tokens), cost, context, _indexed_strings(tokens)
    )
    if compiled.paths == ():
        # Constant expression: it must at least evaluate to a bool.
        try:
            compiled.evaluate(_EMPTY_DEVICE)
        except CelEvalError as err:
            raise CelError(expression, str(err), 1, 1) from err
    return compiled


def make_quantity(value: str | int | Decimal) -> dict[str, str]:
    """The CEL value of a quantity (a map holding the canonical decimal text)."""
    return {QUANTITY_KEY: _canonical(parse_quantity(value))}


def make_semver(text: str) -> dict[str, str]:
    """The CEL value of a semantic version."""
    _semver_tuple(text)
    return {SEMVER_KEY: text}


# --- the environment ----------------------------------------------------------------------------


def _canonical(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _quantity_value(value: Any) -> Decimal:
    if isinstance(value, dict) and QUANTITY_KEY in value:
        return Decimal(value[QUANTITY_KEY])
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    raise TypeError(f"expected a quantity, got {value!r}")


_SEMVER_RE: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


def _semver_tuple(text: str) -> tuple[int, int, int, tuple[tuple[int, int | str], ...]]:
    match = _SEMVER_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid semantic version {text!r}")
    pre = match.group(4)
    # A version without pre-release sorts after any of its pre-releases.
    parts: tuple[tuple[int, int | str], ...] = (
        tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")) if pre else ((2, 0),)
    )
    return int(match.group(1)), int(match.group(2)), int(match.group(3)), parts


def _compare(left: Any, right: Any) -> int:
    if isinstance(left, dict) and SEMVER_KEY in left:
        if not (isinstance(right, dict) and SEMVER_KEY in right):
            raise TypeError("compareTo: a semver can only be compared with a semver")
        a, b = _semver_tuple(left[SEMVER_KEY]), _semver_tuple(right[SEMVER_KEY])
        return (a > b) - (a < b)
    x, y = _quantity_value(left), _quantity_value(right)
    return (x > y) - (x < y)


def _quantity(text: Any) -> dict[str, str]:
    if not isinstance(text, str):
        raise TypeError(f"quantity() takes a string, got {text!r}")
    try:
        return make_quantity(text)
    except QuantityError as err:
        raise ValueError(str(err)) from err


def _is_quantity(text: Any) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return isinstance(text, str)


def _is_semver(text: Any) -> bool:
    return isinstance(text, str) and _SEMVER_RE.fullmatch(text) is not None


def _version_part(index: int) -> Callable[[Any], int]:
    def part(value: Any) -> int:
        if not (isinstance(value, dict) and SEMVER_KEY in value):
            raise TypeError(f"expected a semver, got {value!r}")
        return _semver_tuple(value[SEMVER_KEY])[index]  # type: ignore[return-value]

    return part


def _as_integer(value: Any) -> int:
    number = _quantity_value(value)
    if number != number.to_integral_value():
        raise ValueError(f"quantity {_canonical(number)} is not an integer")
    return int(number)


_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": lambda text: make_semver(text),
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "sign": lambda q: (lambda v: (v > 0) - (v < 0))(_quantity_value(q)),
    "isInteger": lambda q: _quantity_value(q) == _quantity_value(q).to_integral_value(),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: float(_quantity_value(q)),
    "add": lambda a, b: {QUANTITY_KEY: _canonical(_quantity_value(a) + _quantity_value(b))},
    "sub": lambda a, b: {QUANTITY_KEY: _canonical(_quantity_value(a) - _quantity_value(b))},
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
}
_STRING_FUNCTIONS: Final = (
    "charAt", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace", "split",
    "substring", "trim", "join",
)  # fmt: skip


def _all_functions() -> dict[str, Callable[..., Any]]:
    context = cel.Context()
    cel_stdlib.add_stdlib_to_context(context, extensions=["strings"])
    functions = {n: f for n, f in context.functions.items() if n in _STRING_FUNCTIONS}
    functions.update(_FUNCTIONS)
    return functions


_ALL_FUNCTIONS: Final = _all_functions()


def _context_for(names: set[str]) -> cel.Context:
    """A context with only the Python functions an expression calls: calls are faster."""
    return cel.Context(functions={n: f for n, f in _ALL_FUNCTIONS.items() if n in names})


_NATIVE_GLOBAL: Final = frozenset(
    {"size", "int", "uint", "double", "string", "bytes", "bool", "dyn", "type", "has",
     "timestamp", "duration", "matches", "contains", "startsWith", "endsWith"}
)  # fmt: skip
_NATIVE_MEMBER: Final = frozenset(
    {"size", "contains", "startsWith", "endsWith", "matches", "all", "exists", "exists_one",
     "map", "filter", "getDays", "getHours", "getMinutes", "getSeconds", "getFullYear",
     "getMonth", "getDate", "getDayOfWeek", "getDayOfYear", "getMilliseconds"}
)  # fmt: skip
_ALLOWED_GLOBAL: Final = _NATIVE_GLOBAL | {
    "quantity", "isQuantity", "semver", "isSemver", *_STRING_FUNCTIONS,
}  # fmt: skip
_ALLOWED_MEMBER: Final = _NATIVE_MEMBER | set(_FUNCTIONS) | set(_STRING_FUNCTIONS)
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
_KEYWORDS: Final = frozenset(
    {"true", "false", "null", "in", "int", "uint", "double", "string", "bytes", "bool",
     "list", "map", "type", "dyn", "null_type"}
)  # fmt: skip
_EMPTY_DEVICE: Final[dict[str, Any]] = {
    "driver": "",
    "attributes": {},
    "capacity": {},
    "allowMultipleAllocations": False,
}


# --- static analysis of the token stream --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "id", "str", "num", "op"
    text: str
    offset: int


_TOKEN_RE: Final = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>(?:[rR][bB]?|[bB][rR]?)?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"
        |'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<num>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)


def _tokenize(expression: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(expression):
        match = _TOKEN_RE.match(expression, position)
        if match is None:  # the library parsed it, so this is a gap in this tokenizer
            tokens.append(_Token("op", expression[position], position))
            position += 1
            continue
        kind = match.lastgroup or "op"
        if kind != "ws":
            tokens.append(_Token(kind, match.group(), position))
        position = match.end()
    return tokens


def _position(expression: str, offset: int) -> tuple[int, int]:
    line = expression.count("\n", 0, offset) + 1
    column = offset - (expression.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _at(expression: str, token: _Token, reason: str) -> CelError:
    line, column = _position(expression, token.offset)
    return CelError(expression, reason, line, column)


def _bound_names(tokens: list[_Token]) -> set[str]:
    """Variables introduced by comprehension macros: the x in ``list.all(x, ...)``."""
    names: set[str] = set()
    for i, token in enumerate(tokens[:-3]):
        if (
            token.text == "."
            and tokens[i + 1].text in _MACROS
            and tokens[i + 2].text == "("
            and tokens[i + 3].kind == "id"
        ):
            names.add(tokens[i + 3].text)
    return names


def _check_names(expression: str, tokens: list[_Token]) -> None:
    bound = _bound_names(tokens)
    for i, token in enumerate(tokens):
        if token.kind != "id":
            continue
        after_dot = i > 0 and tokens[i - 1].text == "."
        is_call = i + 1 < len(tokens) and tokens[i + 1].text == "("
        if is_call:
            allowed = _ALLOWED_MEMBER if after_dot else _ALLOWED_GLOBAL
            if token.text not in allowed:
                kind = "method" if after_dot else "function"
                raise _at(expression, token, f"undeclared reference to {kind} {token.text!r}")
        elif not after_dot and token.text not in _KEYWORDS | bound | {"device"}:
            raise _at(
                expression,
                token,
                f"undeclared reference to {token.text!r} (the only variable is 'device')",
            )


def _estimate_cost(tokens: list[_Token]) -> int:
    cost = 0
    depth = 0
    open_parens: list[bool] = []  # True where the paren opened a comprehension
    for i, token in enumerate(tokens):
        cost += COMPREHENSION_BOUND**depth
        if token.text == "(":
            is_macro = i >= 2 and tokens[i - 2].text == "." and tokens[i - 1].text in _MACROS
            open_parens.append(is_macro)
            depth += is_macro
        elif token.text == ")" and open_parens:
            depth -= open_parens.pop()
    return cost


def _read_paths(tokens: list[_Token]) -> tuple[Path, ...] | None:
    """What the expression reads of ``device``; None when it reads it in an untraceable way."""
    if "device" in _bound_names(tokens):
        return None
    paths: set[Path] = set()
    texts = [t.text for t in tokens]
    for i, token in enumerate(tokens):
        if token.text != "device" or (i > 0 and texts[i - 1] == "."):
            continue
        if texts[i + 1 : i + 3] == [".", "driver"]:
            paths.add(("driver",))
            continue
        if texts[i + 1 : i + 2] != ["."] or texts[i + 2 : i + 3] not in (
            ["attributes"],
            ["capacity"],
        ):
            return None
        field = texts[i + 2]
        if texts[i + 3 : i + 4] != ["["] or i + 5 >= len(tokens) or texts[i + 5] != "]":
            paths.add((field,))
            continue
        domain_token = tokens[i + 4]
        if domain_token.kind != "str":
            paths.add((field,))
            continue
        domain = _string_value(domain_token.text)
        rest = texts[i + 6 : i + 10]
        if len(rest) >= 2 and rest[0] == "." and tokens[i + 7].kind == "id" and rest[2:3] != ["("]:
            paths.add((field, domain, rest[1]))
        elif len(rest) >= 3 and rest[0] == "[" and tokens[i + 7].kind == "str" and rest[2] == "]":
            paths.add((field, domain, _string_value(tokens[i + 7].text)))
        else:
            paths.add((field, domain))
    return tuple(sorted(paths))


def _indexed_strings(tokens: list[_Token]) -> tuple[str, ...]:
    found = {
        _string_value(token.text)
        for i, token in enumerate(tokens[1:-1], start=1)
        if token.kind == "str" and tokens[i - 1].text == "[" and tokens[i + 1].text == "]"
    }
    return tuple(sorted(found))


def _string_value(literal: str) -> str:
    body = literal.lstrip("rRbB")
    quote = body[:3] if body[:3] in ("'''", '"""') else body[0]
    inner = body[len(quote) : -len(quote)]
    if literal[0] in "rR":
        return inner
    return inner.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _literal_calls(tokens: list[_Token]) -> list[tuple[_Token, _Token]]:
    """``quantity("...")`` and ``semver("...")`` calls with a literal argument."""
    calls = []
    for i, token in enumerate(tokens[:-3]):
        if (
            token.text in ("quantity", "semver")
            and tokens[i + 1].text == "("
            and tokens[i + 2].kind == "str"
            and tokens[i + 3].text == ")"
        ):
            calls.append((token, tokens[i + 2]))
    return calls


def _check_literal(expression: str, call: tuple[_Token, _Token]) -> None:
    function, argument = call
    value = _string_value(argument.text)
    try:
        if function.text == "quantity":
            parse_quantity(value)
        else:
            _semver_tuple(value)
    except ValueError as err:
        raise _at(expression, argument, f"{function.text}(): {err}") from err


_SYNTAX_POSITION: Final = re.compile(r"<input>:(\d+):(\d+):\s*(.*)")


def _syntax_error(expression: str, message: str) -> CelError:
    match = _SYNTAX_POSITION.search(message)
    if match is None:
        return CelError(expression, f"syntax error: {message}")
    reason = match.group(3).split("\n", 1)[0].strip()
    return CelError(expression, reason, int(match.group(1)), int(match.group(2)))


def _eval_message(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"no such key: {err.args[0]}" if err.args else "no such key"
    text = str(err).split("\n", 1)[0]
    return text or type(err).__name__
