"""pipeline_core.partition: how a model is checked, split into stages, placed and put back together."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipeline_core.partition import (
    check_balance,
    check_sequential,
    equal_balance,
    join,
    resolve_devices,
    split,
    stage_devices,
    trace,
)


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3), nn.Tanh(), nn.Linear(3, 2))


def test_only_a_non_empty_sequential_is_accepted():
    with pytest.raises(TypeError, match="needs an nn.Sequential, got Linear"):
        check_sequential(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no layers"):
        check_sequential(nn.Sequential())


def test_balance_must_be_positive_and_cover_every_layer():
    assert check_balance([2, 3], 5) == [2, 3]
    with pytest.raises(ValueError, match="positive layer counts"):
        check_balance([5, 0], 5)
    with pytest.raises(ValueError, match=r"sums to 4, but the model has 5 layers"):
        check_balance([2, 2], 5)


def test_equal_balance_spreads_the_remainder_over_the_first_stages():
    assert equal_balance(7, 3) == [3, 2, 2]
    with pytest.raises(ValueError, match="only 2 layers"):
        equal_balance(2, 3)


def test_fewer_devices_than_stages_are_shared_by_neighbours():
    a, b = torch.device("cpu", 0), torch.device("cpu", 1)
    assert stage_devices([a, b], 4) == [a, a, b, b]
    assert stage_devices([a], 3) == [a, a, a]


def test_unknown_devices_are_refused_up_front():
    assert resolve_devices(["cpu"]) == [torch.device("cpu")]
    with pytest.raises(ValueError, match="not supported"):
        resolve_devices(["meta"])
    with pytest.raises(ValueError, match="empty"):
        resolve_devices([])


def test_split_copies_and_join_restores_names_and_weights():
    whole = model()
    parts = split(whole, [2, 2, 1])
    assert [len(p) for p in parts] == [2, 2, 1]
    with torch.no_grad():
        parts[0][0].weight.add_(1.0)  # a copy: the user's model does not change
    assert not torch.equal(parts[0][0].weight, whole[0].weight)
    joined = join(parts)
    assert [n for n, _ in joined.named_children()] == [n for n, _ in whole.named_children()]
    assert torch.equal(joined[0].weight, parts[0][0].weight)

    assert not hasattr(joined[0].weight, "tag")


def test_the_copies_keep_the_tags_a_model_put_on_its_parameters():
    """torch's Parameter.__deepcopy__ drops a parameter's attributes; an optimizer factory reads them in the stage."""
    whole = model()
    whole[2].bias.tag = "prior"
    parts = split(whole, [2, 3])
    assert parts[1][0].bias.tag == "prior" and not hasattr(parts[1][0].weight, "tag")
    assert parts[1][0].bias is not whole[2].bias
    assert join(parts)[2].bias.tag == "prior"


def test_trace_gives_each_stage_output_and_names_a_stage_that_cannot_run():
    parts = split(model(), [2, 2, 1])
    cpu = [torch.device("cpu")] * 3
    assert trace(parts, torch.zeros(5, 4), cpu) == [
        ((5, 8), torch.float32),
        ((5, 3), torch.float32),
        ((5, 2), torch.float32),
    ]
    with pytest.raises(ValueError, match="stage 0 cannot run on sample_input"):
        trace(parts, torch.zeros(5, 7), cpu)
