"""Validation loss at equal training loss, for settings that repeat their training text."""

import random

import pytest

from rsngd.bench.overfit import (
    equal_train_loss,
    equal_train_loss_markdown,
    overfits,
    repeats,
    smoothed_train,
    val_at_train_loss,
)


def run(optimizer: str, seed: int, train: list[float], val: list[tuple[int, float]], train_tokens=100) -> dict:
    return {
        "optimizer": optimizer,
        "seed": seed,
        "train_curve": train,
        "val_curve": [list(v) for v in val],
        "steps": len(train),
        "preset": {"name": "cpu", "steps": len(train), "batch": 2, "seq": 10},
        "train_tokens": train_tokens,
    }


def test_training_loss_is_averaged_over_the_steps_since_the_evaluation_before():
    rng = random.Random(3)
    train = [rng.uniform(1, 5) for _ in range(20)]
    r = run("a", 0, train, [(10, 4.0), (20, 3.5)])
    (s1, t1, v1), (s2, t2, v2) = smoothed_train(r)
    assert (s1, v1, s2, v2) == (10, 4.0, 20, 3.5)
    assert t1 == pytest.approx(sum(train[:10]) / 10) and t2 == pytest.approx(sum(train[10:]) / 10)


def test_the_validation_loss_is_interpolated_where_the_training_loss_crosses_the_target():
    # Smoothed training loss 4.0 at step 10, 2.0 at step 20; validation 5.0 then 6.0.
    r = run("a", 0, [4.0] * 10 + [2.0] * 10, [(10, 5.0), (20, 6.0)])
    step, val = val_at_train_loss(r, 3.5)  # a quarter of the way from 4.0 to 2.0
    assert step == pytest.approx(12.5) and val == pytest.approx(5.25)
    assert val_at_train_loss(r, 4.5) == (10.0, 5.0)  # reached at the first evaluation
    assert val_at_train_loss(r, 1.0) is None  # never reached


def test_methods_are_compared_at_the_lowest_training_loss_every_run_reaches():
    fast = run("fast", 0, [4.0] * 10 + [1.0] * 10, [(10, 5.0), (20, 7.0)])
    slow = [run("slow", s, [4.0] * 10 + [2.0 + s] * 10, [(10, 5.5), (20, 6.0 + s)]) for s in (0, 0.5)]
    rows = equal_train_loss([fast, *slow])
    # Target: the slowest run's lowest training loss, 2.5. The fast run crosses it half way: 6.0 at step 15.
    assert [r["optimizer"] for r in rows] == ["fast", "slow"]
    assert rows[0]["train_loss"] == 2.5 and rows[0]["val_loss"] == pytest.approx(6.0) and rows[0]["step"] == 15
    # Slow seed 0 crosses 2.5 three quarters of the way (5.5 → 6.0: 5.875), seed 0.5 at its last evaluation (6.5).
    assert rows[1]["val_loss"] == pytest.approx((5.875 + 6.5) / 2) and rows[1]["seeds"] == 2
    text = equal_train_loss_markdown({("wiki", "cpu, 20 steps"): [fast, *slow]})
    assert text.startswith("- wiki (cpu, 20 steps), at training loss 2.500: fast 6.000 (step 15); slow 6.188 ± ")


def test_only_settings_that_overfit_repeated_text_are_compared():
    # 20 steps x 2 x 10 = 400 tokens; the validation loss rises after step 10.
    once = run("a", 0, [4.0] * 10 + [3.0] * 10, [(10, 5.0), (20, 5.5)], train_tokens=1000)
    assert not repeats(once) and repeats({**once, "train_tokens": 300})
    assert not repeats({**once, "train_tokens": None})
    assert not overfits(once) and overfits({**once, "train_tokens": 300})
    falling = {**once, "train_tokens": 300, "val_curve": [[10, 5.5], [20, 5.0]]}
    assert repeats(falling) and not overfits(falling)
    assert equal_train_loss_markdown({("big", "cpu"): [once]}) == ""
    assert equal_train_loss_markdown({("small", "cpu"): [falling]}) == ""
    assert equal_train_loss_markdown({("small", "cpu"): [{**once, "train_tokens": 300}, falling]}).startswith(
        "- small (cpu), at training loss 3.000: a "
    )
