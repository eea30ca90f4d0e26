"""RS-SNGD on torch.distributed (2 gloo ranks on CPU, float64): FSDP2 and ZeRO equal one process, a NaN on one
rank skips the step everywhere, DCP checkpoints resume on another world size."""

from __future__ import annotations

import pytest
import torch

from . import dist_cases as C

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")

TOL = 1e-10


@pytest.mark.parametrize(
    "hp",
    [{}, {"fisher": "tensor"}, {"residual": "sign", "residual_scale": 0.1}, {"cache_factors": True}],
    ids=["defaults", "tensor-fisher", "sign-residual", "cached-factors"],
)
def test_fsdp2_equals_one_process_across_renewals(hp):
    diffs = C.spawn(2, C.case_fsdp2_equals_one_process, hp)
    assert max(diffs) <= TOL, diffs


@pytest.mark.parametrize("hp", [{}, {"normalize": "global_rms"}], ids=["defaults", "global-rms"])
def test_zero_with_global_fisher_equals_one_process(hp):
    diffs = C.spawn(2, C.case_zero_equals_one_process, hp)
    assert max(diffs) <= TOL, diffs


def test_nan_on_one_rank_skips_the_step_on_all():
    results = C.spawn(2, C.case_nan_on_one_rank_skips_everywhere)
    for diff, skipped in results:
        assert skipped == 1
        assert diff <= TOL


def test_dcp_checkpoint_resumes_on_two_and_on_one_process(tmp_path):
    folder = str(tmp_path / "ckpt")
    C.spawn(2, C.case_dcp_resume, folder)
    uninterrupted = torch.load(tmp_path / "ckpt" / "uninterrupted.pt")
    two = C.spawn(2, C.resume_from, folder, True)
    for name, value in uninterrupted.items():
        assert torch.equal(two[0][name], value), name  # same world size: bit for bit
    one = C.resume_from(folder, False)  # one process, no process group
    for name, value in uninterrupted.items():
        torch.testing.assert_close(one[name], value, atol=TOL, rtol=0)
