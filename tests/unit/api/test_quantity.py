"""Quantity parse/format, following Kubernetes' resource.Quantity grammar."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from aipaas.api.quantity import QuantityError, QuantityStr, format_quantity, parse_quantity


class TestParseQuantity:
    @pytest.mark.parametrize(
        ("text", "want"),
        [
            pytest.param("40Gi", Decimal(40 * 2**30), id="binary gibibytes"),
            pytest.param("1Ki", Decimal(1024), id="binary kibibyte"),
            pytest.param("1Ei", Decimal(2**60), id="binary exbibyte"),
            pytest.param("500m", Decimal("0.5"), id="milli"),
            pytest.param("1.5", Decimal("1.5"), id="plain decimal"),
            pytest.param("2e3", Decimal(2000), id="exponent"),
            pytest.param("1E-3", Decimal("0.001"), id="negative exponent"),
            pytest.param("1E", Decimal(10**18), id="exa suffix, not an exponent"),
            pytest.param(".5", Decimal("0.5"), id="leading dot"),
            pytest.param("-1k", Decimal(-1000), id="negative kilo"),
            pytest.param("+3", Decimal(3), id="explicit plus"),
            pytest.param("100n", Decimal("1e-7"), id="nano"),
            pytest.param("7u", Decimal("7e-6"), id="micro"),
            pytest.param("80G", Decimal(80 * 10**9), id="decimal giga"),
            pytest.param(" 4Mi ", Decimal(4 * 2**20), id="surrounding spaces"),
            pytest.param(8, Decimal(8), id="int"),
            pytest.param(0.25, Decimal("0.25"), id="float"),
        ],
    )
    def test_parses(self, text: str | int | float, want: Decimal) -> None:
        assert parse_quantity(text) == want

    @pytest.mark.parametrize(
        "text", ["", "Gi", "1gi", "1 Gi", "e3", "1.2.3", "1e", "one", "1Kib", "--1", "."]
    )
    def test_refuses(self, text: str) -> None:
        with pytest.raises(QuantityError, match="invalid quantity"):
            parse_quantity(text)

    def test_refuses_bool_and_nan(self) -> None:
        with pytest.raises(QuantityError, match="boolean"):
            parse_quantity(True)
        with pytest.raises(QuantityError, match="finite"):
            parse_quantity(float("nan"))


class TestFormatQuantity:
    @pytest.mark.parametrize(
        ("value", "want"),
        [
            pytest.param(Decimal(40 * 2**30), "40Gi", id="gibibytes"),
            pytest.param(Decimal("0.5"), "500m", id="milli"),
            pytest.param(Decimal(3), "3", id="plain"),
            pytest.param(Decimal(0), "0", id="zero"),
            pytest.param(Decimal(2000), "2k", id="kilo"),
            pytest.param(Decimal(-1536), "-1536", id="not a whole Ki multiple of 1024"),
            pytest.param(Decimal(-2048), "-2Ki", id="negative binary"),
        ],
    )
    def test_formats(self, value: Decimal, want: str) -> None:
        assert format_quantity(value) == want

    def test_binary_false_prefers_decimal(self) -> None:
        assert format_quantity(Decimal(2048), binary=False) == "2048"
        assert format_quantity(Decimal(4000), binary=True) == "4k"

    @settings(deadline=None)  # a loaded machine may pause one example past 200 ms
    @given(st.integers(min_value=-(2**62), max_value=2**62))
    def test_round_trips_integers(self, value: int) -> None:
        assert parse_quantity(format_quantity(Decimal(value))) == value

    @settings(deadline=None)
    @given(st.decimals(min_value=-(10**9), max_value=10**9, places=3, allow_nan=False))
    def test_round_trips_milli(self, value: Decimal) -> None:
        assert parse_quantity(format_quantity(value)) == value


class _Holder(BaseModel):
    size: QuantityStr


class TestQuantityStr:
    def test_keeps_text_and_accepts_numbers(self) -> None:
        assert _Holder(size="40Gi").size == "40Gi"
        assert _Holder.model_validate({"size": 2}).size == "2"
        assert _Holder.model_validate({"size": 1.5}).model_dump() == {"size": "1.5"}

    def test_error_names_field(self) -> None:
        with pytest.raises(ValidationError, match=r"size\n.*invalid quantity '4 G'"):
            _Holder.model_validate({"size": "4 G"})
