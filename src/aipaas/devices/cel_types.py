"""A static type checker for CEL device selectors, over the token stream of an expression.

Why: the CEL library has no type checker, so ``device.driver`` (a string, not a bool),
``device.drivr`` (no such field) or ``device.driver == 1`` (string against int, which the library
answers ``false`` to) would be accepted when an object is applied and only fail, or silently
select nothing, at allocation. Kubernetes type-checks selectors when the object is created; so
does this module, with the same declarations (``k8s.io/dynamic-resource-allocation/cel``):

* ``device.driver``: string; ``device.allowMultipleAllocations``: bool;
* ``device.attributes``: map of domain to map of name to an attribute value. Kubernetes declares
  that value ``dyn``; here it is "bool, int, string or semver", the only values a ResourceSlice
  can hold, so what can never work on any of them (a field of an attribute, ``attr ==
  quantity(...)``, indexing it) is refused too, while whatever may work on one of them passes;
* ``device.capacity``: map of domain to map of name to quantity.

Who calls it: :mod:`aipaas.devices.cel` after the library parsed the expression (so the text is
valid CEL). Pure; standard library only.

How: a recursive-descent parser over the tokens that infers types bottom-up while it parses (no
tree is built). Binary operators are reduced with an explicit operator stack, so a long chain
``a || b || ...`` costs no recursion; only brackets, parentheses, call arguments and ternaries
recurse, and their nesting is bounded by ``MAX_NESTING``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = ["MAX_NESTING", "CelType", "CelTypeError", "check_selector_types"]

MAX_NESTING: Final = 64


class TokenLike(Protocol):
    @property
    def kind(self) -> str: ...  # "id", "str", "num", "op"
    @property
    def text(self) -> str: ...
    @property
    def offset(self) -> int: ...


class CelTypeError(ValueError):
    """A type error at a character offset of the expression."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CelType:
    name: str
    params: tuple[CelType, ...] = ()

    def __str__(self) -> str:
        if self.name == "attribute":
            return "attribute (bool, int, string or semver)"
        if self.params:
            return f"{self.name}({', '.join(str(p) for p in self.params)})"
        return self.name


BOOL: Final = CelType("bool")
INT: Final = CelType("int")
UINT: Final = CelType("uint")
DOUBLE: Final = CelType("double")
STRING: Final = CelType("string")
BYTES: Final = CelType("bytes")
NULL: Final = CelType("null")
TYPE: Final = CelType("type")
TIMESTAMP: Final = CelType("timestamp")
DURATION: Final = CelType("duration")
QUANTITY: Final = CelType("quantity")
SEMVER: Final = CelType("semver")
DYN: Final = CelType("dyn")
ATTRIBUTE: Final = CelType("attribute")
DEVICE: Final = CelType("device")


def list_of(element: CelType) -> CelType:
    return CelType("list", (element,))


def map_of(key: CelType, value: CelType) -> CelType:
    return CelType("map", (key, value))


DEVICE_FIELDS: Final[dict[str, CelType]] = {
    "driver": STRING,
    "attributes": map_of(STRING, map_of(STRING, ATTRIBUTE)),
    "capacity": map_of(STRING, map_of(STRING, QUANTITY)),
    "allowMultipleAllocations": BOOL,
}
_ATTRIBUTE_KINDS: Final = frozenset({"bool", "int", "string", "semver"})
_NUMBERS: Final = frozenset({"int", "uint", "double"})
_ORDERED: Final = frozenset({"string", "bytes", "bool", "timestamp", "duration"})
_TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "string", "bytes", "bool", "list", "map", "type", "null_type", "dyn"}
)
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})


def _kinds(t: CelType) -> frozenset[str] | None:
    """The kinds a value of ``t`` may have at run time; None for any."""
    if t.name == "dyn":
        return None
    if t.name == "attribute":
        return _ATTRIBUTE_KINDS
    return frozenset({t.name})


def _fits(t: CelType, kinds: frozenset[str] | set[str]) -> bool:
    own = _kinds(t)
    return own is None or bool(own & kinds)


def _join(types: Sequence[CelType]) -> CelType:
    return types[0] if types and all(t == types[0] for t in types) else DYN


# --- overloads: (argument kinds, result); "*" matches any argument ------------------------------

Overload = tuple[tuple[str, ...], CelType]


def _same(kinds: Sequence[str], result: CelType | None = None) -> list[Overload]:
    return [((k, k), result or CelType(k)) for k in kinds]


_ARITHMETIC: Final[dict[str, list[Overload]]] = {
    "+": [
        *_same(("int", "uint", "double", "string", "bytes", "list")),
        (("timestamp", "duration"), TIMESTAMP),
        (("duration", "timestamp"), TIMESTAMP),
        (("duration", "duration"), DURATION),
    ],
    "-": [
        *_same(("int", "uint", "double")),
        (("timestamp", "timestamp"), DURATION),
        (("timestamp", "duration"), TIMESTAMP),
        (("duration", "duration"), DURATION),
    ],
    "*": _same(("int", "uint", "double")),
    "/": _same(("int", "uint", "double")),
    "%": _same(("int", "uint")),
}

_LIST_OF_STRING: Final = list_of(STRING)
_TIME_GETTERS: Final = (
    "getDays", "getHours", "getMinutes", "getSeconds", "getFullYear", "getMonth", "getDate",
    "getDayOfWeek", "getDayOfYear", "getMilliseconds",
)  # fmt: skip

#: Methods by name; the receiver is the first argument kind.
_METHODS: Final[dict[str, list[Overload]]] = {
    "size": [((k,), INT) for k in ("string", "bytes", "list", "map")],
    **{n: [(("string", "string"), BOOL)] for n in ("contains", "startsWith", "endsWith")},
    "matches": [(("string", "string"), BOOL)],
    "charAt": [(("string", "int"), STRING)],
    **{
        n: [(("string", "string"), INT), (("string", "string", "int"), INT)]
        for n in ("indexOf", "lastIndexOf")
    },
    **{n: [(("string",), STRING)] for n in ("lowerAscii", "upperAscii", "trim")},
    "replace": [
        (("string", "string", "string"), STRING),
        (("string", "string", "string", "int"), STRING),
    ],
    "split": [
        (("string", "string"), _LIST_OF_STRING),
        (("string", "string", "int"), _LIST_OF_STRING),
    ],
    "substring": [(("string", "int"), STRING), (("string", "int", "int"), STRING)],
    "join": [(("list",), STRING), (("list", "string"), STRING)],
    "compareTo": [(("quantity", "quantity"), INT), (("semver", "semver"), INT)],
    **{
        n: [(("quantity", "quantity"), BOOL), (("semver", "semver"), BOOL)]
        for n in ("isGreaterThan", "isLessThan")
    },
    "sign": [(("quantity",), INT)],
    "isInteger": [(("quantity",), BOOL)],
    "asInteger": [(("quantity",), INT)],
    "asApproximateFloat": [(("quantity",), DOUBLE)],
    **{
        n: [(("quantity", "quantity"), QUANTITY), (("quantity", "int"), QUANTITY)]
        for n in ("add", "sub")
    },
    **{n: [(("semver",), INT)] for n in ("major", "minor", "patch")},
    **{
        n: [(("timestamp",), INT), (("timestamp", "string"), INT), (("duration",), INT)]
        for n in _TIME_GETTERS
    },
}

_GLOBALS: Final[dict[str, list[Overload]]] = {
    "size": _METHODS["size"],
    "int": [((k,), INT) for k in ("int", "uint", "double", "string", "timestamp")],
    "uint": [((k,), UINT) for k in ("int", "uint", "double", "string")],
    "double": [((k,), DOUBLE) for k in ("int", "uint", "double", "string")],
    "string": [
        ((k,), STRING)
        for k in ("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration")
    ],
    "bytes": [((k,), BYTES) for k in ("string", "bytes")],
    "bool": [((k,), BOOL) for k in ("string", "bool")],
    "dyn": [(("*",), DYN)],
    "type": [(("*",), TYPE)],
    "timestamp": [((k,), TIMESTAMP) for k in ("string", "timestamp", "int")],
    "duration": [((k,), DURATION) for k in ("string", "duration")],
    "quantity": [(("string",), QUANTITY)],
    "isQuantity": [(("string",), BOOL)],
    "semver": [(("string",), SEMVER)],
    "isSemver": [(("string",), BOOL)],
}


def _resolve(name: str, overloads: list[Overload], args: Sequence[CelType], offset: int) -> CelType:
    results = [
        result
        for kinds, result in overloads
        if len(kinds) == len(args)
        and all(k == "*" or _fits(a, {k}) for k, a in zip(kinds, args, strict=True))
    ]
    if not results:
        shown = ", ".join(str(a) for a in args)
        raise CelTypeError(offset, f"no matching overload for {name} applied to ({shown})")
    return _join(results)


# --- operators ---------------------------------------------------------------------------------


def _equality_ok(left: CelType, right: CelType) -> bool:
    a, b = _kinds(left), _kinds(right)
    if a is None or b is None or "null" in a or "null" in b:
        return True
    if a & _NUMBERS and b & _NUMBERS:
        return True
    if not a & b:
        return False
    if left.name == right.name and left.params and right.params:
        return all(_equality_ok(x, y) for x, y in zip(left.params, right.params, strict=True))
    return True


def _ordering_ok(left: CelType, right: CelType) -> bool:
    a, b = _kinds(left), _kinds(right)
    if a is None or b is None:
        return True
    return bool(a & _NUMBERS and b & _NUMBERS) or bool(a & b & _ORDERED)


def _binary(op: str, left: CelType, right: CelType, offset: int) -> CelType:
    if op in ("&&", "||"):
        for side in (left, right):
            if not _fits(side, {"bool"}):
                raise CelTypeError(offset, f"operands of '{op}' must be bool, got {side}")
        return BOOL
    if op in ("==", "!="):
        if not _equality_ok(left, right):
            raise CelTypeError(
                offset, f"no matching overload for '{op}' applied to ({left}, {right})"
            )
        return BOOL
    if op in ("<", "<=", ">", ">="):
        if not _ordering_ok(left, right):
            hint = (
                "; compare quantities and semvers with compareTo, isGreaterThan or isLessThan"
                if {left.name, right.name} & {"quantity", "semver"}
                else ""
            )
            raise CelTypeError(
                offset, f"no matching overload for '{op}' applied to ({left}, {right}){hint}"
            )
        return BOOL
    if op == "in":
        return _membership(left, right, offset)
    result = _resolve(f"'{op}'", _ARITHMETIC[op], (left, right), offset)
    if result.name == "list":
        return (
            list_of(_join([*left.params, *right.params])) if left.params and right.params else DYN
        )
    return result


def _membership(item: CelType, container: CelType, offset: int) -> CelType:
    kinds = _kinds(container)
    if kinds is not None and not kinds & {"list", "map"}:
        raise CelTypeError(offset, f"'in' needs a list or a map on its right, got {container}")
    if container.params and not _equality_ok(item, container.params[0]):
        what = "keys" if container.name == "map" else "elements"
        raise CelTypeError(
            offset, f"'in' looks for {item} among {what} of type {container.params[0]}"
        )
    return BOOL


def _select(operand: CelType, name: str, offset: int) -> CelType:
    if operand.name == "device":
        if name not in DEVICE_FIELDS:
            known = ", ".join(DEVICE_FIELDS)
            raise CelTypeError(offset, f"undefined field '{name}' of device (it has {known})")
        return DEVICE_FIELDS[name]
    if operand.name == "map":
        return operand.params[1] if operand.params else DYN
    if operand.name == "dyn":
        return DYN
    raise CelTypeError(
        offset, f"cannot select field '{name}': a value of type {operand} has no fields"
    )


def _index(operand: CelType, key: CelType, offset: int) -> CelType:
    if operand.name == "dyn":
        return DYN
    if operand.name == "list":
        if not _fits(key, {"int", "uint"}):
            raise CelTypeError(offset, f"a list index must be an int, got {key}")
        return operand.params[0] if operand.params else DYN
    if operand.name == "map":
        if operand.params and not _equality_ok(key, operand.params[0]):
            raise CelTypeError(offset, f"a key of this map is a {operand.params[0]}, got {key}")
        return operand.params[1] if operand.params else DYN
    raise CelTypeError(offset, f"cannot index a value of type {operand}")


# --- the parser --------------------------------------------------------------------------------

_PRECEDENCE: Final = {
    "||": 1, "&&": 2,
    "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "in": 3,
    "+": 4, "-": 4, "*": 5, "/": 5, "%": 5,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Typed:
    type: CelType
    selected: bool = False  # ends with a field selection (what has() needs)


class _Checker:
    def __init__(self, tokens: Sequence[TokenLike], length: int) -> None:
        self.tokens = tokens
        self.position = 0
        self.end = length
        self.scopes: list[dict[str, CelType]] = []

    # token helpers
    def _peek(self, ahead: int = 0) -> str:
        index = self.position + ahead
        return self.tokens[index].text if index < len(self.tokens) else ""

    def _offset(self) -> int:
        if self.position < len(self.tokens):
            return self.tokens[self.position].offset
        return self.end

    def _take(self, expected: str | None = None) -> TokenLike:
        if self.position >= len(self.tokens):
            raise CelTypeError(self.end, f"unexpected end of expression (expected {expected!r})")
        token = self.tokens[self.position]
        if expected is not None and token.text != expected:
            raise CelTypeError(token.offset, f"expected {expected!r}, got {token.text!r}")
        self.position += 1
        return token

    # grammar
    def expression(self, depth: int) -> _Typed:
        if depth > MAX_NESTING:
            raise CelTypeError(self._offset(), f"expression nests deeper than {MAX_NESTING} levels")
        offset = self._offset()
        condition = self._binary(depth)
        if self._peek() != "?":
            return condition
        self._take("?")
        if not _fits(condition.type, {"bool"}):
            raise CelTypeError(
                offset, f"the condition of '?:' must be a bool, got {condition.type}"
            )
        then = self._binary(depth)
        colon = self._take(":")
        otherwise = self.expression(depth + 1)
        a, b = _kinds(then.type), _kinds(otherwise.type)
        if a is not None and b is not None and not a & b and not {"null"} & (a | b):
            raise CelTypeError(
                colon.offset,
                f"the branches of '?:' differ in type: {then.type} and {otherwise.type}",
            )
        return _Typed(_join([then.type, otherwise.type]))

    def _binary(self, depth: int) -> _Typed:
        operands = [self._unary(depth)]
        operators: list[tuple[str, int]] = []

        def reduce() -> None:
            op, offset = operators.pop()
            right, left = operands.pop(), operands.pop()
            operands.append(_Typed(_binary(op, left.type, right.type, offset)))

        while (op := self._peek()) in _PRECEDENCE and self.tokens[self.position].kind in (
            "op",
            "id",
        ):
            while operators and _PRECEDENCE[operators[-1][0]] >= _PRECEDENCE[op]:
                reduce()
            operators.append((op, self._take().offset))
            operands.append(self._unary(depth))
        while operators:
            reduce()
        return operands[0]

    def _unary(self, depth: int) -> _Typed:
        prefixes: list[tuple[str, int]] = []
        while self._peek() in ("!", "-"):
            prefixes.append((self._peek(), self._take().offset))
        value = self._member(depth)
        for op, offset in reversed(prefixes):
            if op == "!" and not _fits(value.type, {"bool"}):
                raise CelTypeError(offset, f"operand of '!' must be a bool, got {value.type}")
            if op == "-" and not _fits(value.type, {"int", "double"}):
                raise CelTypeError(
                    offset, f"operand of '-' must be an int or a double, got {value.type}"
                )
            value = _Typed(value.type)
        return value

    def _member(self, depth: int) -> _Typed:
        value = self._primary(depth)
        while self._peek() in (".", "["):
            if self._take().text == "[":
                offset = self._offset()
                key = self.expression(depth + 1)
                self._take("]")
                value = _Typed(_index(value.type, key.type, offset))
                continue
            name = self._take()
            if self._peek() != "(":
                value = _Typed(_select(value.type, name.text, name.offset), selected=True)
            elif name.text in _MACROS:
                value = _Typed(self._macro(value.type, name, depth))
            else:
                args = self._arguments(depth)
                overloads = _METHODS.get(name.text)
                if overloads is None:
                    raise CelTypeError(name.offset, f"undeclared reference to method '{name.text}'")
                value = _Typed(_resolve(name.text, overloads, [value.type, *args], name.offset))
        return value

    def _arguments(self, depth: int) -> list[CelType]:
        self._take("(")
        args: list[CelType] = []
        while self._peek() != ")":
            args.append(self.expression(depth + 1).type)
            if self._peek() != ")":
                self._take(",")
        self._take(")")
        return args

    def _macro(self, receiver: CelType, name: TokenLike, depth: int) -> CelType:
        kinds = _kinds(receiver)
        if kinds is not None and not kinds & {"list", "map"}:
            raise CelTypeError(name.offset, f"{name.text}() needs a list or a map, got {receiver}")
        self._take("(")
        variable = self._take()
        if variable.kind != "id":
            raise CelTypeError(variable.offset, f"{name.text}() needs a variable name first")
        self._take(",")
        element = receiver.params[0] if receiver.params else DYN
        self.scopes.append({variable.text: element})
        try:
            body = [self.expression(depth + 1)]
            while self._peek() == ",":
                self._take(",")
                body.append(self.expression(depth + 1))
        finally:
            self.scopes.pop()
        self._take(")")
        arity = (1, 2) if name.text == "map" else (1,)
        if len(body) not in arity:
            raise CelTypeError(name.offset, f"wrong number of arguments to {name.text}()")
        if name.text == "map" and len(body) == 1:
            return list_of(body[0].type)
        if not _fits(body[0].type, {"bool"}):
            raise CelTypeError(
                name.offset, f"the condition of {name.text}() must be a bool, got {body[0].type}"
            )
        if name.text == "map":
            return list_of(body[1].type)
        if name.text == "filter":
            return list_of(element)
        return BOOL

    def _primary(self, depth: int) -> _Typed:
        token = self._take()
        text = token.text
        if token.kind == "num":
            lowered = text.lower()
            if lowered.endswith("u"):
                return _Typed(UINT)
            if not lowered.startswith("0x") and any(c in lowered for c in ".e"):
                return _Typed(DOUBLE)
            return _Typed(INT)
        if token.kind == "str":
            return _Typed(BYTES if text[:2].lower() in ("b'", 'b"', "br", "rb") else STRING)
        if text == "(":
            inner = self.expression(depth + 1)
            self._take(")")
            return _Typed(inner.type)
        if text == "[":
            return _Typed(list_of(_join(self._elements(depth, "]"))))
        if text == "{":
            return _Typed(self._map_literal(depth))
        if text == "." and self._peek() and self.tokens[self.position].kind == "id":
            token = self._take()
            text = token.text
        if token.kind != "id":
            raise CelTypeError(token.offset, f"unexpected {text!r}")
        if self._peek() == "(":
            return self._call(token, depth)
        for scope in reversed(self.scopes):
            if text in scope:
                return _Typed(scope[text])
        if text == "device":
            return _Typed(DEVICE)
        if text in ("true", "false"):
            return _Typed(BOOL)
        if text == "null":
            return _Typed(NULL)
        if text in _TYPE_NAMES:
            return _Typed(TYPE)
        raise CelTypeError(token.offset, f"undeclared reference to '{text}'")

    def _elements(self, depth: int, closing: str) -> list[CelType]:
        types: list[CelType] = []
        while self._peek() != closing:
            types.append(self.expression(depth + 1).type)
            if self._peek() != closing:
                self._take(",")
        self._take(closing)
        return types

    def _map_literal(self, depth: int) -> CelType:
        keys: list[CelType] = []
        values: list[CelType] = []
        while self._peek() != "}":
            keys.append(self.expression(depth + 1).type)
            self._take(":")
            values.append(self.expression(depth + 1).type)
            if self._peek() != "}":
                self._take(",")
        self._take("}")
        return map_of(_join(keys), _join(values)) if keys else map_of(DYN, DYN)

    def _call(self, function: TokenLike, depth: int) -> _Typed:
        if function.text == "has":
            self._take("(")
            argument = self.expression(depth + 1)
            self._take(")")
            if not argument.selected:
                raise CelTypeError(
                    function.offset,
                    'has() needs a field selection, such as has(device.attributes["d"].name)',
                )
            return _Typed(BOOL)
        args = self._arguments(depth)
        overloads = _GLOBALS.get(function.text) or _METHODS.get(function.text)
        if overloads is None:
            raise CelTypeError(
                function.offset, f"undeclared reference to function '{function.text}'"
            )
        return _Typed(_resolve(function.text, overloads, args, function.offset))


def check_selector_types(tokens: Sequence[TokenLike], length: int) -> CelType:
    """The type of a selector given its tokens; raises CelTypeError unless it may be a bool.

    ``length`` is the expression's length (the offset of errors at its end).
    """
    checker = _Checker(tokens, length)
    result = checker.expression(0)
    if checker.position != len(tokens):
        token = tokens[checker.position]
        raise CelTypeError(token.offset, f"unexpected {token.text!r}")
    if not _fits(result.type, {"bool"}):
        raise CelTypeError(0, f"expression must evaluate to a bool, got {result.type}")
    return result.type
