"""`rsngd bench tune`: the same grid for every method, resumable shards, the chosen settings read by the bench."""

import json
import math

import pytest

pytest.importorskip("tokenizers")

from rsngd.bench.cli import bench_main
from rsngd.bench.optimizers import DEFAULTS, OptimizerSpec, load_tuned
from rsngd.bench.tune import ADAMW_LRS, LR_FACTORS, TUNE_END, TUNE_START, grid, run_file, select, tune_main
from tests.rsngd.bench.test_bench import TEXT


def test_every_method_gets_the_same_grid_around_its_published_lr():
    for method in DEFAULTS:
        specs = grid(method)
        assert len(specs) == len(LR_FACTORS) * len(ADAMW_LRS) == 6
        centre = DEFAULTS[method]["lr"]
        assert sorted({s.overrides["lr"] for s in specs}) == pytest.approx([f * centre for f in LR_FACTORS])
        assert sorted({s.overrides["adamw_lr"] for s in specs}) == list(ADAMW_LRS)
    with pytest.raises(SystemExit, match="unknown optimizer"):
        grid("sgd")


def args(tmp_path, *extra):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    return [
        "--preset", "smoke", "--steps", "2", "--data", str(corpus), "--methods", "adamw", "muon",
        "--runs", str(tmp_path / "runs"), "--settings", str(tmp_path / "tuned.json"),
        "--cache", str(tmp_path / "cache"), "--no-progress", "--threads", "1", *extra,
    ]  # fmt: skip


def test_shards_resume_and_choose_the_lowest_loss(tmp_path, capsys):
    runs, settings = tmp_path / "runs", tmp_path / "tuned.json"
    tune_main(args(tmp_path, "--shard", "0/2"))
    assert len(list(runs.glob("*.json"))) == 6 and not settings.exists()  # half of 12: no method complete
    assert "not done yet" in capsys.readouterr().out
    tune_main(args(tmp_path, "--shard", "1/2"))
    files = sorted(runs.glob("*.json"))
    assert len(files) == 12
    mtimes = [f.stat().st_mtime_ns for f in files]
    tune_main(args(tmp_path))  # resumes: nothing left to run
    assert [f.stat().st_mtime_ns for f in files] == mtimes

    data = json.loads(settings.read_text())
    for method in ("adamw", "muon"):
        losses = {}
        for spec in grid(method):
            run = json.loads(run_file(runs, spec, 0).read_text())[0]
            assert run["seed"] == 0 and run["steps"] == 2 and run["hyperparameters"]["lr"] == spec.overrides["lr"]
            losses[(spec.overrides["lr"], spec.overrides["adamw_lr"])] = run["final_val_loss"]
        best = min(losses, key=losses.get)
        assert (data["settings"][method]["lr"], data["settings"][method]["adamw_lr"]) == best
        assert data["results"][method]["val_loss"] == losses[best]
        assert len(data["sweep"][method]) == 6
    assert data["preset"] == "smoke" and data["seed"] == 0 and data["steps"] == 2

    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{TUNE_START}\nold\n{TUNE_END}\n")
    tune_main(args(tmp_path, "--select-only", "--markdown", str(doc)))
    rows = {line.split(" | ")[0][2:]: line for line in doc.read_text().splitlines() if line.startswith("| ")}
    for method in ("adamw", "muon"):
        cells = rows[method].split(" | ")[1:7]
        assert len(cells) == 6 and sum(c.startswith("**") for c in cells) == 1
        assert f"**{data['results'][method]['val_loss']:.3f}**" in cells
    assert "old" not in doc.read_text() and "rsngd bench tune --preset smoke" in doc.read_text()

    # The bench takes the tuned settings; a spec's own value still wins.
    tuned = load_tuned(settings)
    assert OptimizerSpec.parse("muon", tuned).hyperparameters(64)["lr"] == data["settings"]["muon"]["lr"]
    assert OptimizerSpec.parse("muon:lr=0.5", tuned).hyperparameters(64)["lr"] == 0.5
    assert OptimizerSpec.parse("rsngd", tuned).hyperparameters(64)["lr"] == DEFAULTS["rsngd"]["lr"]  # not tuned
    out = tmp_path / "bench.json"
    bench_main(
        ["--preset", "smoke", "--steps", "1", "--data", str(tmp_path / "corpus.txt"), "--optimizers", "adamw",
         "--tuned", str(settings), "--out", str(out), "--cache", str(tmp_path / "cache"), "--no-progress"]
    )  # fmt: skip
    hp = json.loads(out.read_text())[0]["hyperparameters"]
    assert (hp["lr"], hp["adamw_lr"]) == (data["settings"]["adamw"]["lr"], data["settings"]["adamw"]["adamw_lr"])


def test_a_diverged_run_is_never_chosen_and_edges_are_flagged(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    specs = grid("adamw")
    for i, spec in enumerate(specs):
        loss = float("nan") if i == 0 else 5.0 - 0.1 * i
        run = {"final_val_loss": loss, "diverged": not math.isfinite(loss)}
        run_file(folder, spec, 3).write_text(json.dumps([run]))
    chosen, sweep, missing = select(folder, ["adamw"], 3)
    assert not missing and sum(p["diverged"] for p in sweep["adamw"]) == 1
    best = specs[-1].overrides  # the lowest finite loss: the largest lr, at the grid's edge
    assert chosen["adamw"]["lr"] == best["lr"] and chosen["adamw"]["lr_at_edge"]
    assert chosen["adamw"]["val_loss"] == pytest.approx(4.5)


def test_bad_settings_files_and_shards_are_clear_errors(tmp_path):
    with pytest.raises(SystemExit, match="rsngd bench tune"):
        load_tuned(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"settings": {"sgd": {"lr": 1}}}))
    with pytest.raises(SystemExit, match="unknown optimizers: sgd"):
        load_tuned(bad)
    assert load_tuned("none") == {}
    with pytest.raises(SystemExit):
        tune_main(["--shard", "2/2"])
