"""rsngd bench frontier: points paired with the reference, the frontier, labels off the protocol, the doc section."""

import json

import pytest

from rsngd.bench.frontier import FRONTIER_END, FRONTIER_START, describe, frontier, frontier_runs, points
from rsngd.bench.runs import load_runs
from rsngd.cli import main

# The protocol's settings on cpu-long (2000 steps): the packaged tuned-cpu-long.
PROTOCOL = {"muon": 0.01, "adamw": 0.0015, "rsngd": 0.01}


def run(spec: str, seed: int, loss: float, state: int, **hp) -> dict:
    name = spec.split(":")[0]
    return {
        "optimizer": spec,
        "optimizer_name": name,
        "dataset": "gcide",
        "dataset_note": "first 90 % train",
        "preset": {"name": "cpu-long", "steps": 2000, "batch": 8, "seq": 256},
        "steps": 2000,
        "seed": seed,
        "final_val_loss": loss,
        "projected_state_bytes": state,
        "optimizer_state_bytes": 2 * state + 100,
        "optimizer_step_s": 0.01,
        "optimizer_step_max_s": 0.02,
        "fwd_bwd_s": 1.0,
        "val_curve": [[1000, loss + 1.0], [2000, loss]],
        "train_curve": [loss + 2, loss],
        "device": "cpu (1 thread)",
        "hyperparameters": {"lr": PROTOCOL[name], "adamw_lr": 0.01, **hp},
    }


@pytest.fixture
def results(tmp_path):
    runs = []
    for seed, shift in ((1, 0.0), (2, 0.02), (3, -0.01)):
        runs += [
            run("adamw", seed, 3.10 + shift, 1000),
            run("muon", seed, 2.92 + shift, 500),
            run("rsngd", seed, 3.07 + shift, 45),
            run("rsngd:residual_momentum=0.95,residual_bits=8", seed, 2.93 + shift + seed / 1000, 170),
            # Off the protocol (its lr is not the chosen one), and more state for a worse loss: not on the frontier.
            run("rsngd:residual_momentum=0.95,residual_rank=192", seed, 3.06 + shift, 840, lr=0.005),
        ]
    # The same spec on another corpus at another lr: its own row there, no label change here.
    runs.append({**run("rsngd:residual_momentum=0.95,residual_bits=8", 1, 3.3, 170, lr=0.02), "dataset": "other"})
    runs.append(run("muon", 0, 2.0, 500))  # the tuning seed: left out with --seeds 1 2 3
    runs.append(run("muon", 1, 3.5, 500, lr=0.02))  # a plain method off the protocol: not a point
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(runs))
    return path


def test_points_are_paired_with_the_reference_and_the_frontier_is_marked(results):
    pts = points(frontier_runs(load_runs([results]), seeds=[1, 2, 3]))
    by = {p["label"]: p for p in pts}
    assert list(by) == [
        "rsngd",
        "rsngd:residual_momentum=0.95,residual_bits=8",
        "muon",
        "rsngd:residual_momentum=0.95,residual_rank=192 (lr=0.005)",
        "adamw",
    ]  # least state first
    assert by["muon"]["seeds"] == [1, 2, 3] and by["muon"]["val_loss"] == pytest.approx(2.92 + 0.01 / 3)
    assert by["rsngd"]["state_vs_adamw"] == pytest.approx(0.045)
    assert by["rsngd"]["whole_state_vs_adamw"] == pytest.approx(190 / 2100)
    eight = by["rsngd:residual_momentum=0.95,residual_bits=8"]
    assert eight["differences"] == pytest.approx([0.011, 0.012, 0.013])
    assert eight["mean_difference"] == pytest.approx(0.012)
    assert eight["se_difference"] == pytest.approx(0.001 / 3**0.5)
    assert eight["val_loss_se"] == pytest.approx(by["muon"]["val_loss_se"], rel=0.1)
    frontier_labels = [p["label"] for p in pts if p["on_frontier"]]
    assert frontier_labels == ["rsngd", "rsngd:residual_momentum=0.95,residual_bits=8", "muon"]
    assert describe("rsngd:residual_bits=8 (lr=0.005)") == "RS-SNGD (residual_bits=8, lr=0.005)"
    assert describe("muon") == "Muon"


def test_the_command_writes_json_plot_and_doc_section(results, tmp_path):
    doc = tmp_path / "bench.md"
    doc.write_text(f"# Bench\n\n{FRONTIER_START}\nstale\n{FRONTIER_END}\n\nafter\n")
    out = tmp_path / "out"
    main(["bench", "frontier", str(results), "--seeds", "1", "2", "3", "--out", str(out), "--doc", str(doc)])
    data = json.loads((out / "frontier.json").read_text())
    assert data["command"].startswith("rsngd bench frontier ") and len(data["points"]) == 5
    png = (out / "frontier.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    text = doc.read_text()
    assert "stale" not in text and text.endswith("after\n") and "![frontier](out/frontier.png)" in text
    row = next(line for line in text.splitlines() if line.startswith("| RS-SNGD (residual_momentum=0.95, residual_b"))
    assert "| 17.0 % |" in row and "| +0.011, +0.012, +0.013 | +0.012 ± 0.001 | yes |" in row
    assert "1: 2.931, 2: 2.952, 3: 2.923" in row


def test_without_an_adamw_run_there_is_no_state_to_compare(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([run("muon", 1, 2.9, 500)]))
    with pytest.raises(SystemExit, match="AdamW"):
        frontier([path], tmp_path / "out")


def test_a_batch_variant_keeps_the_settings_chosen_at_its_tokens():
    from rsngd.bench.optimizers import protocol_for, protocol_settings

    long = protocol_settings()[("cpu-long", 2000)]
    # cpu-long at 32 sequences a step: 500 steps are cpu-long's 2000 steps of 8, so its settings.
    assert protocol_for({"name": "cpu-long-b32"}, 500) == long
    assert protocol_for({"name": "cpu-long-b16"}, 1000) == long
    # Other tokens, an unknown preset, a batch that does not divide: nothing chosen, so no plain method is a point.
    assert protocol_for({"name": "cpu-long-b32"}, 400) == {}
    assert protocol_for({"name": "nope-b32"}, 500) == {}
    assert protocol_for({"name": "cpu-long-b3"}, 500) == {}


def test_batch_variant_runs_make_their_own_setting(results, tmp_path):
    runs = json.loads(results.read_text())
    wide = {"name": "cpu-long-b32", "steps": 500, "batch": 32, "seq": 256}
    b32 = [{**r, "preset": wide, "steps": 500, "final_val_loss": r["final_val_loss"] - 0.1} for r in runs]
    path = tmp_path / "b32.json"
    path.write_text(json.dumps(b32))
    pts = points(frontier_runs(load_runs([results, path]), seeds=[1, 2, 3]))
    settings = {(p["preset"], p["label"]) for p in pts}
    # The plain methods at cpu-long's lrs are points at batch 32 as well; the muon run at another lr is not.
    assert {label for preset, label in settings if preset == "cpu-long-b32, 500 steps"} == {
        label for preset, label in settings if preset == "cpu-long, 2000 steps"
    }
    assert len(settings) == 10
    muon = next(p for p in pts if p["preset"] == "cpu-long-b32, 500 steps" and p["label"] == "muon")
    assert muon["val_loss"] == pytest.approx(2.82 + 0.01 / 3)
