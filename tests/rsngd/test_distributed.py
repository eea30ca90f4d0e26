"""RS-SNGD on torch.distributed (2 and 4 gloo ranks on CPU, float64): FSDP2, ZeRO and DDP equal one process with
the default orthogonalised residual (sharded matrices orthogonalised by their owner ranks, DDP's split among the
ranks), a NaN on one rank skips the step everywhere, DCP checkpoints resume on another world size."""

from __future__ import annotations

import pytest
import torch

from . import dist_cases as C

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")

TOL = 1e-10


RECIPE_STATE = {"residual_momentum": 0.95, "residual_bits": 4, "adamw_state": "light"}
"""The stateful options: a 4-bit residual momentum (two codes a byte) and the light AdamW state of the embedding."""

MOMENTUM_STATE = {"residual_momentum": 0.95, "residual_bits": 8, "residual_scale": 1.0, "adamw_state": "light"}
"""The rsngd-momentum recipe's states: the residual's 8-bit momentum and the light AdamW state."""


@pytest.mark.parametrize(
    "hp",
    [
        {},
        {"fisher": "tensor"},
        {"residual": "none"},
        {"residual": "sign", "residual_scale": 0.1},
        {"cache_factors": True},
        RECIPE_STATE,
        MOMENTUM_STATE,
    ],
    ids=[
        "defaults",
        "tensor-fisher",
        "no-residual",
        "sign-residual",
        "cached-factors",
        "quantised-states",
        "rsngd-momentum",
    ],
)
def test_fsdp2_equals_one_process_across_renewals(hp):
    diffs = C.spawn(2, C.case_fsdp2_equals_one_process, hp)
    assert max(diffs) <= TOL, diffs


@pytest.mark.parametrize("hp", [{}, RECIPE_STATE], ids=["defaults", "quantised-states"])
def test_fsdp2_on_four_ranks_with_empty_shards_equals_one_process(hp):
    """Four ranks: the 2-row matrix leaves two ranks without rows; owners still gather and return every row."""
    diffs = C.spawn(4, C.case_fsdp2_equals_one_process, hp)
    assert max(diffs) <= TOL, diffs


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_history_is_split_by_columns_among_the_ranks(world):
    """Each rank keeps its share of every matrix's history (torch.chunk's split of the columns), not all of it."""
    results = C.spawn(world, C.case_history_columns, {})
    assert results[0], "no projected matrix"
    for name, (_, k) in results[0].items():
        widths = [r[name][0] for r in results]
        assert sum(widths) == k, (name, widths, k)
        assert max(widths) == -(-k // world), (name, widths)


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_with_split_newton_schulz_equals_one_process(world):
    """Each rank orthogonalises only the matrices it owns: together, every matrix of every step once."""
    results = C.spawn(world, C.case_ddp_split_equals_one_process, RECIPE_STATE)
    diffs, counts = zip(*results)
    assert max(diffs) <= TOL, diffs
    assert sum(counts) == 5 * 5  # 5 steps × the 5 projected matrices
    assert max(counts) < sum(counts)  # split, not repeated


@pytest.mark.parametrize(
    "hp,world",
    [({}, 2), ({}, 4), (RECIPE_STATE, 2), ({"normalize": "global_rms"}, 2)],
    ids=["defaults-2", "defaults-4", "quantised-states-2", "global-rms-2"],
)
def test_zero_with_global_fisher_equals_one_process(hp, world):
    diffs = C.spawn(world, C.case_zero_equals_one_process, hp)
    assert max(diffs) <= TOL, diffs


def test_nan_on_one_rank_skips_the_step_on_all():
    results = C.spawn(2, C.case_nan_on_one_rank_skips_everywhere)
    for diff, skipped in results:
        assert skipped == 1
        assert diff <= TOL


@pytest.mark.parametrize("hp", [{}, RECIPE_STATE], ids=["defaults", "quantised-states"])
def test_dcp_checkpoint_resumes_on_two_four_and_one_process(tmp_path, hp):
    folder = str(tmp_path / "ckpt")
    C.spawn(2, C.case_dcp_resume, folder, 6, 3, hp)
    uninterrupted = torch.load(tmp_path / "ckpt" / "uninterrupted.pt")
    two = C.spawn(2, C.resume_from, folder, True, 6, 3, hp)
    for name, value in uninterrupted.items():
        assert torch.equal(two[0][name], value), name  # same world size: bit for bit
    four = C.spawn(4, C.resume_from, folder, True, 6, 3, hp)  # the split histories resharded onto four ranks
    for name, value in uninterrupted.items():
        torch.testing.assert_close(four[0][name], value, atol=TOL, rtol=0)
    one = C.resume_from(folder, False, 6, 3, hp)  # one process, no process group
    for name, value in uninterrupted.items():
        torch.testing.assert_close(one[name], value, atol=TOL, rtol=0)
