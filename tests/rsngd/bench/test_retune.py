import json

import pytest

from rsngd.bench.optimizers import OptimizerSpec, load_tuned
from rsngd.bench.retune import retune
from rsngd.cli import main

BASE = {"rsngd": {"lr": 0.005, "adamw_lr": 0.003}, "adamw": {"lr": 0.0004, "adamw_lr": 0.01}}


def run(name: str, loss: float, seed: int = 0, **override) -> dict:
    spec = OptimizerSpec.parse(name, BASE)
    hp = {**spec.hyperparameters(256), **override}
    return {
        "optimizer": name + "".join(f":{k}={v}" for k, v in override.items()),
        "optimizer_name": name,
        "hyperparameters": hp,
        "dataset": "wn",
        "preset": {"name": "cpu", "hidden": 256, "steps": 1000},
        "steps": 1000,
        "seed": seed,
        "final_val_loss": loss,
        "diverged": False,
    }


def test_each_method_keeps_its_matrix_lr_and_takes_its_best_adamw_part_lr():
    runs = [
        run("rsngd", 3.77),
        run("rsngd", 3.70, adamw_lr=0.01),
        run("adamw", 3.76),
        run("adamw", 3.80, adamw_lr=0.003),
        run("rsngd", 3.50, lr=0.01),  # another matrix lr: not a point of this sweep, however good
    ]
    chosen, setting, notes = retune(runs, BASE)
    assert chosen["rsngd"]["adamw_lr"] == 0.01 and chosen["adamw"]["adamw_lr"] == 0.01
    assert chosen["rsngd"]["losses"] == {"0.003": 3.77, "0.01": 3.70} and chosen["adamw"]["val_loss"] == 3.76
    assert setting == ("wn", "cpu", 1000, 0)
    assert notes == ["rsngd:lr=0.01 (seed 0): not the base setting but for adamw_lr; not used"]


def test_a_method_without_every_value_is_not_retuned_and_a_diverged_run_never_wins():
    diverged = run("adamw", float("nan"), adamw_lr=0.003) | {"diverged": True}
    chosen, _, notes = retune([run("rsngd", 3.77), run("adamw", 9.0), diverged], BASE)
    assert "rsngd" not in chosen and notes == ["rsngd: no run at adamw_lr=0.01; not retuned"]
    assert chosen["adamw"]["adamw_lr"] == 0.01


def test_runs_from_two_tuning_runs_are_refused():
    with pytest.raises(SystemExit, match="more than one tuning run"):
        retune([run("rsngd", 3.77), run("rsngd", 3.70, seed=1, adamw_lr=0.01)], BASE)


def test_the_written_file_is_read_by_the_bench(tmp_path):
    base = tmp_path / "tuned.json"
    base.write_text(json.dumps({"settings": BASE | {"muon": {"lr": 0.02, "adamw_lr": 0.003}}}))
    results = tmp_path / "long.json"
    results.write_text(json.dumps([run("rsngd", 3.77), run("rsngd", 3.70, adamw_lr=0.01)]))
    out = tmp_path / "tuned-long.json"
    main(["bench", "retune", str(results), "--base", str(base), "--settings", str(out)])
    settings = load_tuned(out)
    # RS-SNGD's AdamW part retuned; its matrix lr and the methods without runs as in the base file.
    assert settings["rsngd"] == {"lr": 0.005, "adamw_lr": 0.01}
    assert settings["muon"] == {"lr": 0.02, "adamw_lr": 0.003} and settings["adamw"] == BASE["adamw"]
    data = json.loads(out.read_text())
    assert (data["data"], data["steps"], data["seed"], data["base"]) == ("wn", 1000, 0, str(base))
    assert data["retuned"] == "adamw_lr" and "--key adamw_lr" in data["command"]
    # Then the matrix lr, from that file: the AdamW part's new lr stays.
    results.write_text(json.dumps([run("rsngd", 3.7 + f / 10, adamw_lr=0.01, lr=f * 0.005) for f in (0.5, 1.0, 2.0)]))
    main(["bench", "retune", str(results), "--base", str(out), "--key", "lr", "--settings", str(tmp_path / "lr.json")])
    assert load_tuned(tmp_path / "lr.json")["rsngd"] == {"lr": 0.0025, "adamw_lr": 0.01}


def test_the_matrix_lr_is_chosen_from_half_once_and_twice_the_base():
    """--key lr: each method's projected-matrix lr from 0.5, 1, 2 × its base value, its AdamW-part lr kept; a best
    value at the end of the three is flagged, and a run at another lr (or another AdamW-part lr) is not used."""
    runs = [
        run("rsngd", 3.70),
        run("rsngd", 3.72, lr=0.0025),
        run("rsngd", 3.68, lr=0.01),
        run("adamw", 3.76),
        run("adamw", 3.74, lr=0.0002),
        run("adamw", 3.79, lr=0.0008),
        run("adamw", 3.50, lr=0.0012),  # not a candidate, however good
        run("rsngd", 3.60, adamw_lr=0.01),  # another AdamW-part lr: not this sweep
    ]
    chosen, _, notes = retune(runs, BASE, "lr")
    assert chosen["rsngd"]["lr"] == 0.01 and chosen["rsngd"]["grid_edge"]
    assert chosen["adamw"]["lr"] == 0.0002 and chosen["adamw"]["losses"] == {
        "0.0002": 3.74,
        "0.0004": 3.76,
        "0.0008": 3.79,
    }
    assert notes == [
        "adamw:lr=0.0012 (seed 0): lr=0.0012 is none of the values to try (0.0002, 0.0004, 0.0008); not used",
        "rsngd:adamw_lr=0.01 (seed 0): not the base setting but for lr; not used",
        "rsngd: the best lr=0.01 is at the end of the values tried; run lr=0.02",
        "adamw: the best lr=0.0002 is at the end of the values tried; run lr=0.0001",
    ]
    # A middle choice is not at the edge; the written settings change only the matrix lr.
    chosen, _, _ = retune([run("adamw", 3.7), run("adamw", 3.8, lr=0.0002), run("adamw", 3.9, lr=0.0008)], BASE, "lr")
    assert chosen["adamw"] == {"lr": 0.0004, "val_loss": 3.7, "losses": chosen["adamw"]["losses"], "grid_edge": False}


def test_a_best_value_at_an_end_takes_in_runs_beyond_it_and_only_on_that_side():
    """The same bracketing rule for every method: one grid step beyond the best end, again while it stays best; runs
    beyond the other end are never used, and a method still lacking a grid value is not retuned."""
    runs = [
        run("rsngd", 3.70),
        run("rsngd", 3.68, lr=0.0025),
        run("rsngd", 3.74, lr=0.01),
        run("rsngd", 3.66, lr=0.00125),  # one step below the best end: taken in, and best again
        run("rsngd", 3.67, lr=0.000625),  # two steps below: taken in, worse, so the choice is bracketed
        run("rsngd", 3.50, lr=0.02),  # beyond the losing end: not used, however good
        run("adamw", 3.76),
        run("adamw", 3.74, lr=0.0002),
        run("adamw", 3.79, lr=0.0008),
        run("adamw", 3.80, lr=0.0016),  # beyond the losing end only: the choice stays flagged
    ]
    chosen, _, notes = retune(runs, BASE, "lr")
    assert chosen["rsngd"]["lr"] == 0.00125 and not chosen["rsngd"]["grid_edge"]
    assert list(chosen["rsngd"]["losses"]) == ["0.000625", "0.00125", "0.0025", "0.005", "0.01"]
    assert chosen["adamw"]["lr"] == 0.0002 and chosen["adamw"]["grid_edge"]
    assert notes == [
        "rsngd:lr=0.02 (seed 0): beyond an end that is not the best; not used",
        "adamw:lr=0.0016 (seed 0): beyond an end that is not the best; not used",
        "adamw: the best lr=0.0002 is at the end of the values tried; run lr=0.0001",
    ]
    # Beyond-grid runs do not stand in for a missing grid value.
    chosen, _, notes = retune(
        [run("adamw", 3.7), run("adamw", 3.6, lr=0.0002), run("adamw", 3.5, lr=0.0001)], BASE, "lr"
    )
    assert "adamw" not in chosen and notes == ["adamw: no run at lr=0.0008; not retuned"]
