"""One short simulated round of every stage, end to end (fine-tuning, scoring, the scripted annotator, the plot)."""

import json

import pytest


@pytest.mark.slow
def test_one_short_simulated_round(tmp_path, tiny_model, monkeypatch):
    from docjepa.apps.engine.simulation.run import SimConfig, simulate

    monkeypatch.chdir(tmp_path)  # the packaged fine-tuning config is found from any folder
    cfg = SimConfig(
        init=str(tiny_model),
        pool_pages=6,
        eval_pages=6,
        seed_pages=3,
        rounds=1,
        pages_per_round=2,
        steps=1,
        seed_steps=1,
        sample_pages=4,
        eval_limit=10,
        page_size=256,
        threads=1,
    )
    result = simulate(cfg, tmp_path / "sim", progress=False)
    for mode in ("assisted", "semi"):
        (row,) = result["stages"][mode]
        assert row["pages_annotated"] == 5 and row["masks"] > 0 and 0 <= row["accepted_as_is"] <= 1
        assert row["edits"] == round(row["edits_per_mask"] * row["masks"]) and 0 <= row["heldout"]["mIoU"] <= 1
        assert row["probe"]["masks"] == result["manual"]["probe"]["masks"] > 0  # the same probe pages every time
    for mode in ("assisted", "semi"):
        refine = result["stages"][mode][0]["probe_refine"]
        assert refine["masks"] == result["manual"]["probe"]["masks"] and 0 <= refine["clicks_per_mask"] <= 3
        assert refine["seconds_per_mask"] <= result["stages"][mode][0]["probe"]["seconds_per_mask"] + 1e-9
        assert f"{mode}+refine" in result["seed"]["probe"]
    semi = result["stages"]["semi"][0]["automatic"]
    assert semi["labels_considered"] > 0 and 0 <= semi["kept_fraction"] <= 1
    manual = result["manual"]
    assert manual["edits"] <= manual["edit_budget"] == result["stages"]["assisted"][0]["edits"]
    assert (tmp_path / "sim" / "engine_curve.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "sim" / "simulate.json").read_text())["manual"]["same_pages"]["pages_annotated"] == 5
