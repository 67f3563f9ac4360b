"""Settings from OVERTIME_* env vars: the forms the README documents."""

import pytest
from pydantic import ValidationError

from server.settings import Settings


@pytest.mark.parametrize("value", ["http,demo", " http , demo ", '["http", "demo"]'])
def test_allowed_schemes_from_env_as_a_comma_list_or_json(monkeypatch, value):
    monkeypatch.setenv("OVERTIME_ALLOWED_SCHEMES", value)
    assert Settings().schemes() == {"http", "demo"}


def test_default_frame_size_must_suit_the_flow_nets(monkeypatch):
    monkeypatch.setenv("OVERTIME_WIDTH", "130")  # the nets need sizes divisible by 4
    with pytest.raises(ValidationError, match="width"):
        Settings()
