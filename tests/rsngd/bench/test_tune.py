"""`rsngd bench tune`: the same grid for every method, resumable shards, the chosen settings read by the bench."""

import json
import math
import shutil

import pytest

pytest.importorskip("tokenizers")

from rsngd.bench.optimizers import DEFAULTS, OptimizerSpec, load_tuned
from rsngd.bench.tune import (
    ADAMW_LRS,
    LR_FACTORS,
    MAX_EXTEND,
    SUMMARY_END,
    SUMMARY_START,
    TUNE_END,
    TUNE_START,
    grid,
    run_file,
    select,
    shard_of,
)
from rsngd.cli import main
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
    base = grid("adamw") + grid("muon")
    main(["bench", "tune", *args(tmp_path, "--shard", "0/2")])
    made = {f.name for f in runs.glob("*.json")}
    assert made and {run_file(runs, s, 0).name for s in base if shard_of(s, 2) == 0} <= made
    assert not {run_file(runs, s, 0).name for s in base if shard_of(s, 2) == 1} & made
    assert "not done yet" in capsys.readouterr().out
    half = json.loads(settings.read_text())  # written for what has run: the rest is listed as pending
    assert half["pending"] and set(half["pending"]) | set(half["settings"]) == {"adamw", "muon"}
    assert all(len(half["sweep"][m]) < 6 for m in half["pending"])
    doc = tmp_path / "half.md"
    doc.write_text(f"{TUNE_START}\n{TUNE_END}\n{SUMMARY_START}\n{SUMMARY_END}\n")
    main(
        [
            "bench",
            "tune",
            *args(tmp_path, "--shard", "0/2", "--select-only", "--markdown", str(doc), "--summary", str(doc)),
        ]
    )
    assert "sweep not complete" in doc.read_text() and "Sweeps not complete (runs still missing)" in doc.read_text()
    main(["bench", "tune", *args(tmp_path, "--shard", "1/2")])
    main(["bench", "tune", *args(tmp_path)])  # whatever the extensions still need
    files = sorted(runs.glob("*.json"))
    mtimes = [f.stat().st_mtime_ns for f in files]
    main(["bench", "tune", *args(tmp_path)])  # resumes: nothing left to run
    assert [f.stat().st_mtime_ns for f in files] == mtimes

    data = json.loads(settings.read_text())
    for method in ("adamw", "muon"):
        chosen = data["results"][method]
        specs = grid(method, chosen["factors"])
        assert len(specs) == 2 * len(chosen["factors"]) and set(LR_FACTORS) <= set(chosen["factors"])
        losses = {}
        for spec in specs:
            run = json.loads(run_file(runs, spec, 0).read_text())[0]
            assert run["seed"] == 0 and run["steps"] == 2 and run["hyperparameters"]["lr"] == spec.overrides["lr"]
            losses[(spec.overrides["lr"], spec.overrides["adamw_lr"])] = run["final_val_loss"]
        best = min(losses, key=losses.get)
        assert (data["settings"][method]["lr"], data["settings"][method]["adamw_lr"]) == best
        assert chosen["val_loss"] == losses[best] and len(data["sweep"][method]) == len(specs)
        lrs = sorted({lr for lr, _ in losses})
        # Extended only while the best sat at an end; still at an end only when the extensions ran out.
        assert chosen["lr_at_edge"] == (best[0] in (lrs[0], lrs[-1]))
        if chosen["lr_at_edge"]:
            assert len(chosen["factors"]) == len(LR_FACTORS) + MAX_EXTEND
    assert data["preset"] == "smoke" and data["seed"] == 0 and data["steps"] == 2 and data["pending"] == []

    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{TUNE_START}\nold\n{TUNE_END}\n{SUMMARY_START}\n{SUMMARY_END}\n")
    main(["bench", "tune", *args(tmp_path, "--select-only", "--markdown", str(doc), "--summary", str(doc))])
    muon = data["results"]["muon"]
    ratio = 100 * muon["projected_state_bytes"] / data["results"]["adamw"]["projected_state_bytes"]
    assert (
        f"| muon | {muon['val_loss']:.3f} | {muon['lr']:g} / {muon['adamw_lr']:g} | {ratio:.1f} % |" in doc.read_text()
    )
    assert 45 < ratio < 55  # one momentum buffer against AdamW's two moments
    table = doc.read_text().split(TUNE_START)[1].split(TUNE_END)[0]
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines() if line.startswith("| ")}
    for method in ("adamw", "muon"):
        cells = " | ".join(rows[method].split(" | ")[2:-1])
        assert cells.count("**") == 2 and f"**{data['results'][method]['val_loss']:.3f}**" in cells
    assert "old" not in doc.read_text() and "rsngd bench tune --preset smoke" in doc.read_text()
    # Without the runs (they are not kept), the settings file alone gives the same tables.
    filled = doc.read_text()
    shutil.rmtree(runs)
    doc.write_text(f"intro\n{TUNE_START}\nold\n{TUNE_END}\n{SUMMARY_START}\n{SUMMARY_END}\n")
    main(["bench", "tune", *args(tmp_path, "--tables-only", "--markdown", str(doc), "--summary", str(doc))])
    assert doc.read_text() == filled and json.loads(settings.read_text()) == data

    # The bench takes the tuned settings; a spec's own value still wins.
    tuned = load_tuned(settings)
    assert OptimizerSpec.parse("muon", tuned).hyperparameters(64)["lr"] == data["settings"]["muon"]["lr"]
    assert OptimizerSpec.parse("muon:lr=0.5", tuned).hyperparameters(64)["lr"] == 0.5
    assert OptimizerSpec.parse("rsngd", tuned).hyperparameters(64)["lr"] == DEFAULTS["rsngd"]["lr"]  # not tuned
    out = tmp_path / "bench.json"
    main(["bench", "--preset", "smoke", "--steps", "1", "--data", str(tmp_path / "corpus.txt"), "--optimizers", "adamw",
         "--tuned", str(settings), "--out", str(out), "--cache", str(tmp_path / "cache"), "--no-progress"]
    )  # fmt: skip
    hp = json.loads(out.read_text())[0]["hyperparameters"]
    assert (hp["lr"], hp["adamw_lr"]) == (data["settings"]["adamw"]["lr"], data["settings"]["adamw"]["adamw_lr"])


def fake_sweep(folder, method, losses, seed=3):
    """Run files with the given final losses, one per grid point (in grid order)."""
    folder.mkdir(exist_ok=True)
    for spec, loss in zip(grid(method, sorted(losses)), [v for f in sorted(losses) for v in losses[f]]):
        run = {"final_val_loss": loss, "diverged": not math.isfinite(loss)}
        run_file(folder, spec, seed).write_text(json.dumps([run]))


def test_a_diverged_run_is_never_chosen(tmp_path):
    nan = float("nan")
    fake_sweep(tmp_path, "adamw", {0.5: [nan, 5.0], 1.0: [4.9, 4.5], 2.0: [4.8, 4.7]})
    chosen, sweep, todo = select(tmp_path, ["adamw"], 3)
    assert not todo and sum(p["diverged"] for p in sweep["adamw"]) == 1
    expected = {"lr": DEFAULTS["adamw"]["lr"], "adamw_lr": 1e-2, "val_loss": 4.5, "factors": [0.5, 1.0, 2.0]}
    assert chosen["adamw"] == {**expected, "lr_at_edge": False, "projected_state_bytes": None}  # none in these files


def test_a_best_lr_at_the_end_extends_the_grid_that_way(tmp_path):
    fake_sweep(tmp_path, "muon", {0.5: [5.0, 5.1], 1.0: [4.9, 4.8], 2.0: [4.6, 4.7]})
    chosen, _, todo = select(tmp_path, ["muon"], 3)
    assert not chosen and [s.overrides for s in todo] == [
        {"lr": 0.08, "adamw_lr": 3e-3},
        {"lr": 0.08, "adamw_lr": 1e-2},
    ]
    fake_sweep(tmp_path, "muon", {0.5: [5.0, 5.1], 1.0: [4.9, 4.8], 2.0: [4.6, 4.7], 4.0: [4.5, 4.4]})
    chosen, _, todo = select(tmp_path, ["muon"], 3)
    assert not chosen and {s.overrides["lr"] for s in todo} == {0.16}
    fake_sweep(tmp_path, "muon", {0.5: [5.0, 5.1], 1.0: [4.9, 4.8], 2.0: [4.6, 4.7], 4.0: [4.5, 4.4], 8.0: [4.3, 4.2]})
    chosen, _, todo = select(tmp_path, ["muon"], 3)
    # Two extensions and still at the end: chosen, and flagged.
    assert not todo and chosen["muon"]["lr"] == 0.16 and chosen["muon"]["lr_at_edge"]
    assert chosen["muon"]["factors"] == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_bad_settings_files_and_shards_are_clear_errors(tmp_path):
    with pytest.raises(SystemExit, match="rsngd bench tune"):
        load_tuned(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"settings": {"sgd": {"lr": 1}}}))
    with pytest.raises(SystemExit, match="unknown optimizers: sgd"):
        load_tuned(bad)
    assert load_tuned("none") == {}
    with pytest.raises(SystemExit):
        main(["bench", "tune", "--shard", "2/2"])


def test_the_packaged_settings_are_found_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no benchmarks/ folder here
    long_lr = load_tuned("tuned-long-lr")
    assert long_lr == load_tuned("tuned-long-lr.json")
    with pytest.raises(SystemExit, match=r"no tuned settings at elsewhere/tuned-long-lr\.json"):
        load_tuned("elsewhere/tuned-long-lr.json")  # a path that is not there is not read as a packaged name
    assert long_lr["muon"] != load_tuned("tuned-long")["muon"]  # the matrices' lr chosen again at 1000 steps
    assert set(long_lr) == set(load_tuned("tuned")) >= {"adamw", "muon", "rsngd", "galore"}
    with pytest.raises(SystemExit, match="packaged: tuned, tuned-cpu-long, tuned-long, tuned-long-lr"):
        load_tuned("tuned-short")
