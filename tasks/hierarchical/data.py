"""Train / validation / test splits of the hierarchical target (spec 3.10), drawn from data_seed."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks.common import generator
from tasks.hierarchical.params import TargetFields
from tasks.hierarchical.target import Target, sample_inputs


@dataclass
class Split:
    x: torch.Tensor  # n x d, float64
    y: torch.Tensor  # n, float64 (normalised units)
    feats: list[torch.Tensor]  # [S*_0, ..., S*_L] (float64)


@dataclass
class Data:
    train: Split
    val: Split
    test: Split


def make_split(target: Target, n: int, p: TargetFields, name: str) -> Split:
    x = sample_inputs(n, p.d, p.dist, generator(p.dseed(), "hierarchical", "data", name))
    feats = target.features(x)
    y = target.y(x)
    return Split(x, y, feats)


def make_data(target: Target, p: TargetFields) -> Data:
    """Each split has its own stream, so growing n_train keeps the val and test sets (paired runs)."""
    return Data(
        make_split(target, p.n_train, p, "train"),
        make_split(target, p.n_val, p, "val"),
        make_split(target, p.n_test, p, "test"),
    )
