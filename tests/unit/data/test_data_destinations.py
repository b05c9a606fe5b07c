"""The dataset destination check: the metadata addresses in every written form are refused,
private and loopback ones are not, and a guarded process refuses the connection itself
(whatever library makes it) while others stay untouched."""

from __future__ import annotations

import ipaddress
import subprocess
import sys

import pytest

from aipaas.data.destinations import literal_refusal, proxy_key_refusal, refusal


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "169.254.170.2",
        "::ffff:169.254.169.254",
        "0:0:0:0:0:ffff:a9fe:a9fe",
        "::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        "64:ff9b::a9fe:a9fe",
        "fe80::1",
        "fd00:ec2::254",
        "100.100.100.200",
        "192.0.0.192",
        "2852039166",
        "0xa9fea9fe",
        "0251.0376.0251.0376",
        "169.254.43518",
        "[::ffff:169.254.169.254]",
    ],
)
def test_metadata_addresses_in_every_form_are_refused(host: str) -> None:
    assert literal_refusal(host) is not None


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "10.0.0.8", "192.168.1.2", "::1", "93.184.215.14", "minio", "s3.host"]
)
def test_private_public_and_named_hosts_pass_the_literal_check(host: str) -> None:
    assert literal_refusal(host) is None


def test_a_refusal_names_the_inner_address() -> None:
    reason = refusal(ipaddress.ip_address("::ffff:169.254.169.254"))
    assert reason is not None and "169.254.169.254" in reason and "link-local" in reason


def test_proxy_keys_are_refused() -> None:
    assert proxy_key_refusal("proxy") is not None
    assert proxy_key_refusal("HTTPS_PROXY") is not None
    assert proxy_key_refusal("accessKeyId") is None


GUARDED = """
import socket, sys
from aipaas.data.destinations import guard_process, refused
target = sys.argv[1]
{install}
try:
    socket.create_connection((target, 80), timeout=0.5)
except PermissionError as err:
    print("refused", err)
except OSError as err:
    print("attempted", type(err).__name__)
"""


@pytest.mark.parametrize("target", ["169.254.169.254", "::ffff:169.254.169.254"])
def test_a_guarded_process_refuses_the_connection_itself(target: str) -> None:
    guarded = GUARDED.format(install="guard_process()")
    out = subprocess.run(
        [sys.executable, "-c", guarded, target], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.startswith("refused"), out.stdout + out.stderr
    assert "not a dataset location" in out.stdout


def test_an_unguarded_process_is_not_touched() -> None:
    plain = GUARDED.format(install="")
    out = subprocess.run(
        [sys.executable, "-c", plain, "169.254.169.254"], capture_output=True, text=True, timeout=60
    )
    assert not out.stdout.startswith("refused"), out.stdout + out.stderr
