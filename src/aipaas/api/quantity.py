"""Kubernetes-style quantities: "40Gi", "500m", "1.5", "2e3".

Who calls it: API models (memory, capacity fields), the device allocator (capacity arithmetic),
CEL's ``quantity()`` function. Pure; imports only the standard library and pydantic.

The grammar follows Kubernetes' ``resource.Quantity``::

    quantity  ::= <signedNumber><suffix>
    suffix    ::= <binarySI> | <decimalExponent> | <decimalSI>
    binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= e<signedNumber> | E<signedNumber>

Values are exact ``decimal.Decimal``s (no float rounding: "0.1" + "0.2" == "0.3").
"""

from __future__ import annotations

import decimal
import functools
import re
from decimal import Decimal
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

__all__ = [
    "BINARY_SUFFIXES",
    "DECIMAL_SUFFIXES",
    "QuantityError",
    "QuantityStr",
    "format_quantity",
    "parse_quantity",
]

# A wide context so that "1Ei" * anything stays exact; Kubernetes itself caps at 2^63-ish.
_CTX: Final = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN)

BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
DECIMAL_SUFFIXES: Final[dict[str, Decimal]] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

_QUANTITY_RE: Final = re.compile(
    r"""^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))
        (?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$""",
    re.VERBOSE,
)


class QuantityError(ValueError):
    """A text is not a valid quantity; the message says what was wrong."""


def parse_quantity(text: str | int | float | Decimal) -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal (in base units: bytes, cores, ...).

    Args:
        text: "40Gi", "500m", "1.5", "2e3", or a plain number (int/float/Decimal).

    Returns:
        The value, e.g. ``parse_quantity("1Ki") == Decimal(1024)``,
        ``parse_quantity("500m") == Decimal("0.5")``.

    Raises:
        QuantityError: the text does not follow the quantity grammar.
    """
    if isinstance(text, bool):
        raise QuantityError(f"quantity must be a string or number, not a boolean: {text!r}")
    if isinstance(text, int):
        return Decimal(text)
    if isinstance(text, float):
        if text != text or text in (float("inf"), float("-inf")):
            raise QuantityError(f"quantity must be finite: {text!r}")
        return Decimal(repr(text))
    if isinstance(text, Decimal):
        if not text.is_finite():
            raise QuantityError(f"quantity must be finite: {text!r}")
        return text
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string or number, not {type(text).__name__}")
    return _parse_text(text)


# The device allocator reads the same few capacity texts of every device of every node for
# each pod it places; a Decimal is immutable, so one parse per text serves them all.
@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal:
    stripped = text.strip()
    match = _QUANTITY_RE.match(stripped)
    if match is None or stripped in ("", "+", "-", "."):
        raise QuantityError(
            f"invalid quantity {text!r}: expected a number with an optional suffix "
            "(Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent like e3)"
        )
    number = Decimal(match.group("number"))
    suffix = match.group("suffix")
    if suffix in BINARY_SUFFIXES:
        return _CTX.multiply(number, Decimal(BINARY_SUFFIXES[suffix]))
    if suffix in DECIMAL_SUFFIXES:
        return _CTX.multiply(number, DECIMAL_SUFFIXES[suffix])
    exponent = int(suffix[1:])
    if abs(exponent) > 30:
        raise QuantityError(f"invalid quantity {text!r}: exponent {exponent} is out of range")
    return _CTX.multiply(number, _CTX.power(Decimal(10), exponent))


def format_quantity(value: Decimal | int, *, binary: bool | None = None) -> str:
    """Format a value in the shortest exact Kubernetes form.

    Args:
        value: the value in base units.
        binary: True prefers Ki/Mi/Gi..., False prefers k/M/G/m...; None picks binary when the
            value is a whole multiple of 1024 and decimal otherwise.

    Returns:
        e.g. ``format_quantity(Decimal(42949672960)) == "40Gi"``,
        ``format_quantity(Decimal("0.5")) == "500m"``, ``format_quantity(3) == "3"``.
    """
    value = Decimal(value)
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if binary is None:
        binary = magnitude == magnitude.to_integral_value() and int(magnitude) % 1024 == 0
    if binary and magnitude == magnitude.to_integral_value():
        whole = int(magnitude)
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            base = BINARY_SUFFIXES[suffix]
            if whole % base == 0:
                return f"{sign}{whole // base}{suffix}"
    for suffix in ("E", "P", "T", "G", "M", "k", "", "m", "u", "n"):
        scaled = _CTX.divide(magnitude, DECIMAL_SUFFIXES[suffix])
        if scaled == scaled.to_integral_value() and scaled >= 1:
            return f"{sign}{int(scaled)}{suffix}"
    # Below 1n or not exactly representable with a suffix: plain decimal notation.
    return f"{sign}{_plain(magnitude)}"


def _plain(value: Decimal) -> str:
    text = format(value.normalize(_CTX), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _validate_quantity_text(value: Any) -> str:
    """Pydantic hook: accept a string or number, keep the user's text (so YAML round-trips)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise ValueError(f"must be a quantity such as '40Gi', '500m' or 2, not {value!r}")
    try:
        parse_quantity(value)
    except QuantityError as err:
        raise ValueError(str(err)) from err
    if isinstance(value, str):
        return value.strip()
    return _plain(Decimal(repr(value))) if isinstance(value, float) else str(value)


QuantityStr = Annotated[
    str,
    BeforeValidator(_validate_quantity_text),
    PlainSerializer(lambda v: v, return_type=str),
    WithJsonSchema({"type": "string", "description": "a quantity such as 40Gi, 500m or 2"}),
]
"""A field holding a quantity as written ("40Gi"); parse it with :func:`parse_quantity`."""
