"""The id rules: the ids eyas saves give back exactly the layers it trained on, for every rule."""

from __future__ import annotations

import itertools

import pytest

from drafting.support_matrix.rules import (
    DefaultLayers,
    IdRule,
    default_layers,
    ids_for_layers,
    layers_to_capture,
)

N = 8


@pytest.mark.parametrize("rule", list(IdRule))
def test_saved_ids_map_back_to_the_trained_layers(rule: IdRule) -> None:
    refused = []
    for layers in itertools.combinations(range(1, N), 3):
        try:
            ids = ids_for_layers(rule, list(layers))
        except ValueError:
            refused.append(layers)
            continue
        assert layers_to_capture(rule, ids, N) == list(layers), (rule, layers, ids)
    # only DeepSeek's rule cannot start at layer 1 (ids [0, …] are kept, ids [1, …] are shifted)
    assert all(layers[0] == 1 for layers in refused)
    assert bool(refused) is (rule is IdRule.PLUS_ONE_IF_FIRST_IS_ONE)


def test_deepseeks_rule_with_its_default_and_with_custom_layers() -> None:
    rule = IdRule.PLUS_ONE_IF_FIRST_IS_ONE
    assert ids_for_layers(rule, [2, 4, 5]) == [1, 3, 4]  # the default layers: ids[0] == 1, so + 1
    assert ids_for_layers(rule, [3, 4, 5]) == [3, 4, 5]  # kept as they are
    assert layers_to_capture(rule, [2, 3, 4], N) == [2, 3, 4]  # the usual ids of [3, 4, 5]: one layer off
    assert ids_for_layers(IdRule.PLUS_ONE, [3, 4, 5]) == [2, 3, 4]
    with pytest.raises(ValueError, match="layer 1 cannot be the first aux layer"):
        ids_for_layers(rule, [1, 4, 6])


def test_default_layers() -> None:
    assert default_layers(DefaultLayers.STANDARD, 8) == [2, 4, 5]
    assert default_layers(DefaultLayers.SHIFTED, 8) == [3, 5, 6]
