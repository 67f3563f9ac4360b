"""Settings from OVERTIME_* env vars: the forms docs/service.md documents."""

import pytest
from pydantic import ValidationError

from server.cli import build_parser, settings_from
from server.settings import Settings


@pytest.mark.parametrize("value", ["http,demo", " http , demo ", '["http", "demo"]'])
def test_allowed_schemes_from_env_as_a_comma_list_or_json(monkeypatch, value):
    monkeypatch.setenv("OVERTIME_ALLOWED_SCHEMES", value)
    assert Settings().schemes() == {"http", "demo"}


def test_default_frame_size_must_suit_the_flow_nets(monkeypatch):
    monkeypatch.setenv("OVERTIME_WIDTH", "132")  # the fast net needs sides divisible by 8 (NET_MULTIPLE)
    with pytest.raises(ValidationError, match="width"):
        Settings()


@pytest.mark.parametrize(
    ("value", "allow_all", "networks"),
    [
        ("false", False, []),
        ("true", True, []),
        ("1", True, []),
        ("127.0.0.2/32, 10.0.0.0/8", False, ["127.0.0.2/32", "10.0.0.0/8"]),
        ('["fd00::/8"]', False, ["fd00::/8"]),
        ("192.168.1.7", False, ["192.168.1.7/32"]),
    ],
)
def test_allow_private_is_a_switch_or_cidr_ranges(monkeypatch, value, allow_all, networks):
    monkeypatch.setenv("OVERTIME_ALLOW_PRIVATE", value)
    policy = Settings().address_policy()
    assert policy.allow_all is allow_all and [str(n) for n in policy.networks] == networks


def test_allow_private_rejects_a_range_with_host_bits(monkeypatch):
    monkeypatch.setenv("OVERTIME_ALLOW_PRIVATE", "10.0.0.1/8")
    with pytest.raises(ValidationError, match="allow_private"):
        Settings()


@pytest.mark.parametrize(
    ("flags", "allow_all", "networks"),
    [
        ([], False, []),
        (["--allow-private"], True, []),
        (["--allow-private", "--port", "9000"], True, []),
        (["--allow-private", "127.0.0.2/32"], False, ["127.0.0.2/32"]),
        (["--no-allow-private"], False, []),
    ],
)
def test_allow_private_flag(monkeypatch, flags, allow_all, networks):
    monkeypatch.delenv("OVERTIME_ALLOW_PRIVATE", raising=False)
    policy = settings_from(build_parser().parse_args(["serve", *flags])).address_policy()
    assert policy.allow_all is allow_all and [str(n) for n in policy.networks] == networks
