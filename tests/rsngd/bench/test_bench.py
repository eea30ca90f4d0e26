"""The benchmark harness: every optimizer runs on the smoke preset, JSON fields, report rendering."""

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("tokenizers")

from rsngd import lr_factor
from rsngd.bench.cli import DEFAULT_OPTIMIZERS, RSNGD_VARIANTS
from rsngd.bench.data import load_corpus, train_batches, val_batches
from rsngd.bench.optimizers import DEFAULTS, OptimizerSpec
from rsngd.bench.presets import PRESETS
from rsngd.bench.report import README_END, README_START, SUMMARY_END, SUMMARY_START, headline, report, summarize
from rsngd.cli import main

TEXT = "\n".join(
    f"Line {i}: the quick brown fox jumps over the lazy dog while {i * 7 % 13} owls watch the {i % 5} moons."
    for i in range(600)
)

REQUIRED = {
    "optimizer",
    "final_val_loss",
    "optimizer_state_bytes",
    "projected_state_bytes",
    "optimizer_step_s",
    "fwd_bwd_s",
    "train_curve",
    "val_curve",
    "tokens_per_s",
    "peak_memory_bytes",
    "seed",
    "hyperparameters",
    "preset",
    "dataset",
    "dataset_note",
}


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    return path


def installed(name: str) -> bool:
    module = {
        "galore": "galore_torch",
        "fira": "fira",
        "apollo": "apollo_torch",
        "apollo-mini": "apollo_torch",
        "adam-mini": "adam_mini",
    }.get(name)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.mark.slow
def test_smoke_runs_every_optimizer_and_writes_the_fields(tmp_path, text_file):
    specs = [s for s in DEFAULT_OPTIMIZERS + RSNGD_VARIANTS if installed(s.split(":")[0])]
    assert {"adamw", "rsngd"} <= set(specs)
    out = tmp_path / "results.json"
    main(
        [
            "bench",
            "--preset",
            "smoke",
            "--data",
            str(text_file),
            "--optimizers",
            *specs,
            "--seeds",
            "0",
            "--out",
            str(out),
            "--cache",
            str(tmp_path / "cache"),
            "--no-progress",
            "--threads",
            "1",
        ]
    )
    runs = json.loads(out.read_text())
    assert [r["optimizer"] for r in runs] == specs
    steps = PRESETS["smoke"].steps
    for r in runs:
        assert r.keys() >= REQUIRED, REQUIRED - r.keys()
        assert math.isfinite(r["final_val_loss"]) and r["final_val_loss"] < math.log(PRESETS["smoke"].vocab) + 1
        assert len(r["train_curve"]) == steps and [s for s, _ in r["val_curve"]] == [3, 6]
        assert r["optimizer_state_bytes"] > 0 and 0 < r["projected_state_bytes"] <= r["optimizer_state_bytes"]
        assert r["optimizer_step_s"] > 0 and r["fwd_bwd_s"] > 0 and r["tokens_per_s"] > 0
        assert r["peak_memory_bytes"] > 0 and r["seed"] == 0 and "lr" in r["hyperparameters"]
        assert 0 < r["train_tokens"] < len(text_file.read_text())  # the corpus's training tokens, 90 % of it
    by_name = {r["optimizer"]: r for r in runs}
    # Same initial weights and batches: the first training loss is the same for every optimizer.
    assert len({round(r["train_curve"][0], 5) for r in runs}) == 1
    assert by_name["rsngd"]["projected_state_bytes"] < 0.1 * by_name["adamw"]["projected_state_bytes"]
    if "galore" in by_name:
        assert by_name["rsngd"]["projected_state_bytes"] < by_name["galore"]["projected_state_bytes"]


def test_batches_are_identical_for_the_same_seed(tmp_path, text_file):
    corpus = load_corpus(str(text_file), 300, cache=tmp_path)
    a, b, c = (train_batches(corpus.train, 16, 4, seed) for seed in (5, 5, 6))
    first = [next(a) for _ in range(3)]
    assert all(torch.equal(x, next(b)) for x in first)
    assert not torch.equal(first[0], next(c))
    v = val_batches(corpus.val, 16, 4, 3)
    assert len(v) == 3 and v[0].shape == (4, 16)


def test_tokenizer_and_tokens_are_cached(tmp_path, text_file):
    cache = tmp_path / "cache"
    first = load_corpus(str(text_file), 300, cache=cache)
    files = sorted(p.name for p in cache.iterdir())
    assert any(f.startswith("bpe-") for f in files) and any(f.startswith("tokens-") for f in files)
    mtimes = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    second = load_corpus(str(text_file), 300, cache=cache)
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == mtimes
    assert torch.equal(first.train, second.train) and first.vocab_size <= 300


def _load_after_both_wrote(path: str, cache: str, barrier) -> None:
    """load_corpus in a process of its own, its token file renamed into place only once the other process has
    written its own (the race of two runs started together on one cache)."""
    import rsngd.bench.data as data

    save = data.torch.save

    class _Torch:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def save(obj, f):
            save(obj, f)
            barrier.wait(timeout=60)

    data.torch = _Torch()
    load_corpus(path, 300, cache=Path(cache))


def test_runs_started_together_share_a_cache(tmp_path, text_file):
    ctx = torch.multiprocessing.get_context("spawn")
    barrier, cache = ctx.Barrier(2), tmp_path / "cache"
    procs = [ctx.Process(target=_load_after_both_wrote, args=(str(text_file), str(cache), barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".pt"]  # no temporary file left


def test_wikitext_trains_on_valid_and_evaluates_on_test(tmp_path):
    root = tmp_path / "shared" / "wikitext-2"
    root.mkdir(parents=True)
    (root / "valid.txt").write_text(TEXT)
    (root / "test.txt").write_text(TEXT[::-1])
    corpus = load_corpus("wikitext2", 300, cache=tmp_path / "cache", shared=tmp_path / "shared")
    assert "train on valid.txt and evaluate on test.txt" in corpus.note
    assert corpus.name == "wikitext2"


def test_compressed_files_and_gcide_are_read_and_named(tmp_path, monkeypatch):
    import gzip

    from rsngd.bench import data

    packed = tmp_path / "notes.txt.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write(TEXT)
    corpus = load_corpus(str(packed), 300, cache=tmp_path / "cache")
    assert corpus.name == "notes"
    (tmp_path / "plain.txt").write_text(TEXT)
    assert torch.equal(load_corpus(str(tmp_path / "plain.txt"), 300, cache=tmp_path / "cache").train, corpus.train)
    two = load_corpus(f"{packed},{tmp_path / 'plain.txt'}", 300, cache=tmp_path / "cache")
    assert two.name == "notes+plain" and len(two.train) > len(corpus.train)

    dictzip = tmp_path / "gcide.dict.dz"  # dictzip files are gzip files with an index in the header
    dictzip.write_bytes(packed.read_bytes())
    monkeypatch.setattr(data, "GCIDE", dictzip)
    gcide = load_corpus("gcide", 300, cache=tmp_path / "cache")
    assert gcide.name == "gcide" and torch.equal(gcide.train, corpus.train) and str(dictzip) in gcide.note
    monkeypatch.setattr(data, "GCIDE", tmp_path / "absent.dz")
    with pytest.raises(SystemExit, match="apt-get install dict-gcide"):
        load_corpus("gcide", 300, cache=tmp_path / "cache")
    # Without Debian's file, a copy beside the other corpora (what `gpu.py prepare` carries to a GPU machine).
    monkeypatch.setattr(data, "GCIDE", tmp_path / "absent" / "gcide.dict.dz")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "gcide.dict.dz").write_bytes(packed.read_bytes())
    copy = load_corpus("gcide", 300, cache=tmp_path / "cache", shared=tmp_path / "shared")
    assert torch.equal(copy.train, corpus.train) and str(tmp_path / "shared") in copy.note


def test_missing_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no text file"):
        load_corpus("shakespeare", 300, cache=tmp_path, shared=tmp_path / "nowhere")


def test_a_folder_as_out_is_refused_before_training(tmp_path, text_file, capsys, monkeypatch):
    from rsngd.bench import runner

    monkeypatch.setattr(runner, "run_one", lambda *a, **k: pytest.fail("trained before checking --out"))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--data", str(text_file), "--out", str(tmp_path), "--cache", str(tmp_path / "c")])
    assert exc.value.code == 2 and "is a folder" in capsys.readouterr().err


def test_optimizer_specs_parse():
    spec = OptimizerSpec.parse("rsngd:rank=16,fisher=tensor,lr=0.002")
    assert spec.name == "rsngd" and spec.overrides == {"rank": 16, "fisher": "tensor", "lr": 0.002}
    assert spec.hyperparameters(hidden=256)["history"] == DEFAULTS["rsngd"]["history"]
    assert OptimizerSpec.parse("galore").hyperparameters(hidden=256)["rank"] == 64
    assert OptimizerSpec.parse("rsngd").hyperparameters(hidden=512)["rank"] == 64
    with pytest.raises(SystemExit, match="unknown optimizer"):
        OptimizerSpec.parse("sgd")
    with pytest.raises(SystemExit, match="key=value"):
        OptimizerSpec.parse("rsngd:rank")


def test_any_width_rule_or_fraction_is_a_rank_and_anything_else_fails_where_it_is_read():
    """hidden/n for any n (not a list of known ones), a fraction as RS-SNGD takes it; a string that is neither
    fails when the spec is parsed, naming it, not deep inside the optimizer."""
    assert OptimizerSpec.parse("rsngd:rank=hidden/3").hyperparameters(hidden=192)["rank"] == 64
    assert OptimizerSpec.parse("galore:rank=hidden/12").hyperparameters(hidden=256)["rank"] == 21
    assert OptimizerSpec.parse("rsngd:rank=0.3").hyperparameters(hidden=256)["rank"] == 0.3
    for bad in ("hidden/0", "hidden/x", "width/8"):
        with pytest.raises(SystemExit, match=f"rank '{bad}'"):
            OptimizerSpec.parse(f"rsngd:rank={bad}")


def test_schedule_warms_up_then_decays_to_ten_percent():
    preset = PRESETS["cpu"]
    factors = [lr_factor(s, preset.steps, preset.warmup, preset.min_lr) for s in range(preset.steps)]
    warm = int(preset.warmup * preset.steps)
    assert factors[0] == pytest.approx(1 / warm) and factors[warm - 1] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[warm:], factors[warm + 1 :]))
    assert factors[-1] == pytest.approx(preset.min_lr, abs=0.01)


def fake_run(optimizer: str, seed: int, loss: float, state: int) -> dict:
    return {
        "optimizer": optimizer,
        "optimizer_name": optimizer.split(":")[0],
        "dataset": "shakespeare",
        "dataset_note": "first 90 % train",
        "preset": {"name": "cpu"},
        "seed": seed,
        "final_val_loss": loss,
        "projected_state_bytes": state,
        "optimizer_state_bytes": 2 * state,
        "optimizer_step_s": 0.01,
        "optimizer_step_max_s": 0.02,
        "fwd_bwd_s": 1.0,
        "val_curve": [[10, loss + 1.0], [20, loss]],
        "train_curve": [loss + 2, loss],
        "device": "cpu (2 threads)",
        "diverged": False,
    }


def test_report_renders_table_and_plots(tmp_path):
    runs = [
        fake_run("adamw", 0, 4.0, 1000),
        fake_run("adamw", 1, 4.2, 1000),
        fake_run("rsngd", 0, 3.9, 40),
        fake_run("rsngd", 1, 3.9, 40),
    ]
    for r in runs:  # 20 steps of 4 x 64 tokens over a 2,000-token training text: 2.56 passes
        r.update(steps=20, preset={"name": "cpu", "batch": 4, "seq": 64, "steps": 20}, train_tokens=2000)
    runs[3]["val_curve"] = [[10, 3.5], [20, 3.9]]  # lowest before the end, as where the data repeat
    path = tmp_path / "results.json"
    path.write_text(json.dumps(runs))
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n{README_START}\nold\n{README_END}\n\ntail\n")
    body = report([path], tmp_path / "out", readme=readme, command="rsngd bench report results.json")
    assert "| adamw | 4.100 ± 0.141 | 4.100 (20) | 0.00 MiB | 100.0% |" in body
    assert "| rsngd | 3.900 ± 0.000 | 3.700 (15) |" in body  # lowest losses 3.9 (step 20) and 3.5 (step 10)
    assert "| rsngd | 3.900 ± 0.000 |" in body and "4.0%" in body
    assert body.index("| rsngd") < body.index("| adamw")  # best loss first
    assert "0.01 M training tokens = 2.6 passes over the training text" in body
    # Paired by seed against the best other optimizer: 3.9 − 4.0 and 3.9 − 4.2.
    assert "| shakespeare (cpu, 20 steps) | adamw | 0: -0.100, 1: -0.300 | 2 / 0 | -0.200 ± 0.141 |" in body
    assert "- shakespeare (cpu, 20 steps): rsngd (steps 10–20)" in body
    # The text repeats (2.6 passes): the methods compared at the lowest training loss every run reaches (each run's
    # one smoothed point is the mean of its two training losses, loss + 1: the highest is AdamW seed 1's 5.2).
    assert "- shakespeare (cpu, 20 steps), at training loss 5.200: rsngd 4.200 ± 0.990 (step 10); adamw 5.100" in body
    for name in ("loss.png", "pareto.png", "time.png"):
        data = (tmp_path / "out" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    text = readme.read_text()
    assert "old" not in text and "tail" in text and "4.100 ± 0.141" in text and "![pareto]" in text
    assert "Generated by `rsngd bench report results.json`" in text

    summary = tmp_path / "SUMMARY.md"
    summary.write_text(f"intro\n{SUMMARY_START}\nstale\n{SUMMARY_END}\nend\n")
    wt2 = [{**r, "dataset": "other"} for r in runs[:2]] + [{**runs[2], "dataset": "other", "final_val_loss": 4.5}]
    path.write_text(json.dumps(runs + wt2))
    report([path], tmp_path / "out", summary=summary, command="rsngd bench report results.json")
    lines = summary.read_text().splitlines()
    assert lines[0] == "intro" and lines[-1] == "end" and "stale" not in summary.read_text()
    assert "| optimizer | other (cpu, 20 steps) | shakespeare (cpu, 20 steps) | state vs AdamW |" in lines
    # Mean rank over the two settings: each is first on one and second on the other, so the tie keeps
    # alphabetical order. Cells are mean ± std over seeds.
    assert "| adamw | 4.100 ± 0.141 | 4.100 ± 0.141 | 100.0 % |" in lines
    assert "| rsngd | 4.500 (1 seed) | 3.900 ± 0.000 | 4.0 % |" in lines
    # On "other" RS-SNGD's one seed (0) is above AdamW's: a loss in the paired count.
    assert "| other (cpu, 20 steps) | adamw | 0: +0.500 | 0 / 1 | +0.500 ± 0.000 |" in lines


def test_runs_of_one_spec_under_other_settings_are_their_own_rows(tmp_path):
    from rsngd.bench.report import paired, paired_markdown
    from rsngd.bench.runs import label_settings

    def run(name, seed, loss, **hp):
        return fake_run(name, seed, loss, 10) | {"hyperparameters": {"lr": 0.005, "adamw_lr": 0.003, **hp}}

    runs = [run("adamw", s, 4.0 + s / 10) for s in (1, 2)]  # one settings set: the plain label stays
    runs += [run("rsngd", s, 3.9) for s in (1, 2)] + [run("rsngd", s, 4.5, adamw_lr=0.01) for s in (1, 2)]
    labelled = label_settings(runs)
    assert [r["optimizer"] for r in labelled] == ["adamw"] * 2 + ["rsngd (adamw_lr=0.003)"] * 2 + [
        "rsngd (adamw_lr=0.01)"
    ] * 2
    assert labelled[2]["spec"] == "rsngd" and runs[2]["optimizer"] == "rsngd"  # the records are not changed
    rows = summarize(labelled)
    assert [(r["optimizer"], round(r["val_loss"], 3)) for r in rows] == [
        ("rsngd (adamw_lr=0.003)", 3.9),
        ("adamw", 4.15),
        ("rsngd (adamw_lr=0.01)", 4.5),
    ]
    # Each settings set of ours against the best baseline (never against the other set of ours).
    pairs = paired(labelled, rows)
    assert [(p["ours"], p["baseline"], p["wins"], p["losses"]) for p in pairs] == [
        ("rsngd (adamw_lr=0.003)", "adamw", 2, 0),
        ("rsngd (adamw_lr=0.01)", "adamw", 0, 2),
    ]
    text = paired_markdown(pairs)
    assert "| setting | ours | best baseline |" in text
    # The same run in two results files would count as two seeds: refused.
    from rsngd.bench.runs import load_runs

    (tmp_path / "a.json").write_text(json.dumps(runs[:3]))
    (tmp_path / "b.json").write_text(json.dumps(runs[1:2]))
    with pytest.raises(SystemExit, match=r"the same run more than once.*adamw on shakespeare \(cpu\), seed 2"):
        load_runs([tmp_path / "a.json", tmp_path / "b.json"])
    assert len(load_runs([tmp_path / "a.json"])) == 3
    # The report and its plots (the two sets of ours in one colour, one of them dashed).
    (tmp_path / "c.json").write_text(json.dumps(runs))
    body = report([tmp_path / "c.json"], tmp_path / "out")
    assert "| rsngd (adamw_lr=0.01) | 4.500 ± 0.000 |" in body and "| rsngd (adamw_lr=0.003) | 3.900" in body
    assert (tmp_path / "out" / "loss.png").stat().st_size > 5000
    assert "| shakespeare (cpu) | rsngd (adamw_lr=0.01) | adamw | 1: +0.400, 2: +0.300 | 0 / 2 |" in text


def test_a_rank_set_by_the_width_is_one_setting_on_every_preset():
    """RS-SNGD's rank is hidden/8: 32 on a 256-wide preset, 24 on a 192-wide one. Runs of the same settings on
    the two presets are one setting (one label); an explicit other rank, or another lr, is not."""
    from rsngd.bench.runs import label_settings

    def run(seed, hidden, rank, adamw_lr=0.01):
        r = fake_run("rsngd", seed, 4.0, 10)
        hp = {"lr": 0.005, "adamw_lr": adamw_lr, "rank": rank, "history": 10}
        return r | {"preset": {"name": f"w{hidden}", "hidden": hidden}, "hyperparameters": hp}

    same = [run(1, 256, 32), run(1, 192, 24)]
    assert [r["optimizer"] for r in label_settings(same)] == ["rsngd", "rsngd"]
    other_rank = [run(1, 256, 32), run(1, 192, 32)]  # 32 is not 192/8: a setting of its own
    assert [r["optimizer"] for r in label_settings(other_rank)] == ["rsngd (rank=hidden/8)", "rsngd (rank=32)"]
    other_lr = [*same, run(2, 192, 24, adamw_lr=0.003)]
    assert [r["optimizer"] for r in label_settings(other_lr)] == ["rsngd (adamw_lr=0.01)"] * 2 + [
        "rsngd (adamw_lr=0.003)"
    ]


@pytest.mark.slow  # end to end: the real torchrun command line, 3 launches
def test_bench_under_torchrun_matches_one_process(tmp_path, text_file):
    """Two gloo processes with FSDP2, each half of every micro-batch: the same curves as one process (DDP is
    tested under ``docjepa pretrain``)."""
    strategy = "fsdp2"
    import os
    import subprocess
    import sys

    def bench(out, launcher):
        argv = [
            *launcher, "-m", "rsngd.cli", "bench", "--preset", "smoke", "--steps", "3", "--data", str(text_file),
            # The default recipe: the residual's matrices are orthogonalised by their owner ranks.
            "--optimizers", "rsngd", "--out", str(out), "--cache", str(tmp_path / "cache"),
            "--no-progress",
            "--threads", "1", "--dist", strategy,
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(out.read_text())[0]

    one = bench(tmp_path / "one.json", [sys.executable])
    two = bench(
        tmp_path / "two.json", [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    )
    assert two["world_size"] == 2 and two["strategy"] == strategy and one["world_size"] == 1
    assert two["train_curve"] == pytest.approx(one["train_curve"], abs=2e-4)
    assert two["final_val_loss"] == pytest.approx(one["final_val_loss"], abs=2e-4)


def test_settings_are_ordered_by_steps_as_numbers():
    runs = [
        {**fake_run(name, 1, loss, 10), "preset": {"name": "cpu", "steps": steps}}
        for steps in (1000, 200)
        for name, loss in (("adamw", 4.0), ("rsngd", 3.0))
    ]
    rows = summarize(runs)
    assert [(r["preset"], r["optimizer"]) for r in rows] == [
        ("cpu, 200 steps", "rsngd"),
        ("cpu, 200 steps", "adamw"),
        ("cpu, 1000 steps", "rsngd"),
        ("cpu, 1000 steps", "adamw"),
    ]
    assert "| optimizer | shakespeare (cpu, 200 steps) | shakespeare (cpu, 1000 steps) |" in headline(rows)
    # A setting without AdamW (here a third corpus, listed first) does not hide the ratio of those with one.
    rows = summarize([{**runs[1], "dataset": "another"}, *runs])
    assert next(line for line in headline(rows).splitlines() if line.startswith("| rsngd")).endswith("| 100.0 % |")


def test_settings_say_where_they_ran_when_the_devices_differ():
    from rsngd.bench.report import markdown

    runs = [fake_run("adamw", s, 4.0, 10) | {"preset": {"name": "cpu", "steps": 1000}} for s in (1, 2, 3)]
    assert "ran on" not in markdown(summarize(runs))  # one device for all: said once, below the tables
    runs[0]["device"] = "cpu (1 thread)"
    text = markdown(summarize(runs))
    assert "mean ± std over seeds; ran on cpu (1 thread) ×1, cpu (2 threads) ×2)" in text


def test_the_leader_changes_where_the_mean_curves_cross():
    from rsngd.bench.report import leaders

    early = fake_run("galore", 0, 4.0, 10) | {"val_curve": [[10, 5.0], [20, 4.5], [30, 4.0]]}
    late = [fake_run("adamw", s, 3.8, 10) | {"val_curve": [[10, 5.5 + s], [20, 4.6], [30, 3.8]]} for s in (0, 1)]
    # AdamW's mean at step 10 is 6.0 (5.5 and 6.5): behind until step 30.
    assert leaders([early, *late], ("shakespeare", "cpu")) == [(10, 20, "galore"), (30, 30, "adamw")]


def test_resume_runs_only_what_is_missing(tmp_path, text_file, monkeypatch):
    from rsngd.bench import runner

    out = tmp_path / "results.json"
    common = ["--preset", "smoke", "--steps", "1", "--data", str(text_file), "--out", str(out),
              "--cache", str(tmp_path / "cache"), "--no-progress", "--tuned", "none"]  # fmt: skip
    main(["bench", *common, "--optimizers", "adamw", "--seeds", "0"])
    first = json.loads(out.read_text())
    ran = []
    real = runner.run_one
    monkeypatch.setattr(runner, "run_one", lambda spec, *a, **k: ran.append(spec.label) or real(spec, *a, **k))
    main(["bench", *common, "--optimizers", "adamw", "rsngd", "--seeds", "0", "--resume"])
    runs = json.loads(out.read_text())
    assert ran == ["rsngd"] and runs[0] == first[0] and [r["optimizer"] for r in runs] == ["adamw", "rsngd"]
    with pytest.raises(SystemExit, match="use another --out"):
        main(["bench", *common[:3], "2", *common[4:], "--optimizers", "adamw", "--resume"])


def test_c4_shards_and_a_given_tokenizer(tmp_path):
    import gzip

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder = tmp_path / "c4"
    folder.mkdir()
    lines = TEXT.splitlines()
    for name, docs in (
        ("c4-train.00000-of-01024.json.gz", lines[:500]),
        ("c4-validation.00000-of-00008.json.gz", lines[500:]),
    ):
        with gzip.open(folder / name, "wt") as f:
            f.writelines(json.dumps({"text": d, "url": "x"}) + "\n" for d in docs)
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))

    corpus = load_corpus(f"c4:{folder}", 300, cache=tmp_path / "cache", tokenizer=tmp_path / "tok")
    assert corpus.name == "c4" and corpus.vocab_size == tok.get_vocab_size()
    assert tok.decode(corpus.train[:4].tolist()) == "Line 0 : the"  # the given tokenizer, not a trained BPE
    assert tok.decode(corpus.val[:2].tolist()) == "Line 500"  # validation from the validation shard
    with pytest.raises(SystemExit, match="validation shards"):
        load_corpus(f"c4:{tmp_path}", 300, cache=tmp_path / "cache")
    (folder / "c4-validation.00000-of-00008.json.gz").write_bytes(gzip.compress(b"not json\n"))
    with pytest.raises(SystemExit, match="'text' field"):
        load_corpus(f"c4:{folder}", 300, cache=tmp_path / "cache")


def test_batch_override_accumulates_the_same_windows(tmp_path, text_file):
    """--batch 8 on smoke (micro-batch 4): each step accumulates the windows that two steps of the preset's batch 4
    see, the runs are named smoke-b8 and evaluated every as many tokens as the preset's."""
    common = ["--preset", "smoke", "--data", str(text_file), "--cache", str(tmp_path / "cache"), "--no-progress",
              "--tuned", "none", "--optimizers", "adamw:lr=0", "--seeds", "3"]  # fmt: skip
    main(["bench", *common, "--steps", "4", "--out", str(tmp_path / "b4.json")])
    main(["bench", *common, "--steps", "2", "--batch", "8", "--out", str(tmp_path / "b8.json")])
    (small,), (big,) = (json.loads((tmp_path / f).read_text()) for f in ("b4.json", "b8.json"))
    assert big["preset"]["name"] == "smoke-b8" and big["preset"]["batch"] == 8 and big["preset"]["micro_batch"] == 4
    assert small["preset"]["name"] == "smoke" and big["steps"] == 2 and big["preset"]["eval_every"] == 1
    # At lr 0 the weights never move, so a batch-8 step's loss is the mean of two batch-4 steps' losses.
    pairs = [sum(small["train_curve"][i : i + 2]) / 2 for i in (0, 2)]
    assert big["train_curve"] == pytest.approx(pairs, rel=1e-5)
    assert len(set(small["train_curve"])) == 4  # four different windows, not one repeated
    assert big["final_val_loss"] == pytest.approx(small["final_val_loss"], rel=1e-6)
    with pytest.raises(SystemExit):
        main(["bench", *common, "--batch", "6", "--out", str(tmp_path / "b6.json")])


def test_the_front_page_shows_the_protocols_settings_only(tmp_path):
    from rsngd.bench.optimizers import protocol_settings
    from rsngd.bench.report import FRONT_END, FRONT_START, front_page

    chosen = protocol_settings()

    def at(method, steps, seed, loss, state, train_tokens=11_000_000, **hp):
        r = fake_run(method, seed, loss, state)
        r["hyperparameters"] = {**chosen[("cpu", steps)][method], **hp}
        r.update(steps=steps, train_tokens=train_tokens, preset={"name": "cpu", "batch": 8, "seq": 256, "steps": steps})
        return r

    runs = [
        at(m, 200, s, loss + 0.01 * s, st) for m, loss, st in (("adamw", 5.2, 100), ("rsngd", 5.0, 5)) for s in (1, 2)
    ]
    runs += [at(m, 1000, s, loss, st) for m, loss, st in (("adamw", 3.4, 100), ("muon", 3.3, 50)) for s in (1, 2)]
    runs += [at("muon", 1000, s, 3.0, 50, lr=0.5) for s in (1, 2)]  # not the protocol's lr: left out
    runs += [at("rsngd", 1000, s, 3.1, 5, train_tokens=400_000) for s in (1, 2)]  # 5 passes: left out
    runs += [{**at("rsngd", 200, s, 4.0, 1), "optimizer": "rsngd:rank=4"} for s in (1, 2)]  # a variant: left out
    path = tmp_path / "results.json"
    path.write_text(json.dumps(runs))
    table = front_page(report_runs(path))
    lines = table.splitlines()
    assert "| optimizer | Shakespeare, 0.4 M tokens | Shakespeare, 2.0 M tokens | state vs AdamW |" in lines
    assert "| RS-SNGD | **5.015 ± 0.007** | – | 5.0 % / 5 % |" in lines
    assert "| Muon | – | **3.300 ± 0.000** | 50.0 % / 50 % |" in lines
    assert "| AdamW | 5.215 ± 0.007 | 3.400 ± 0.000 | 100.0 % / 100 % |" in lines
    assert "3.000" not in table and "3.100" not in table and "4.0" not in table and len(lines) == 7
    front = tmp_path / "FRONT.md"
    front.write_text(f"a\n{FRONT_START}\nstale\n{FRONT_END}\nb\n")
    report([path], tmp_path / "out", front=[front], plots_dir=tmp_path / "plots", command="rsngd bench report x")
    assert "Generated by `rsngd bench report x`" in front.read_text() and "stale" not in front.read_text()
    assert (tmp_path / "plots" / "pareto.png").is_file() and not (tmp_path / "out" / "pareto.png").exists()
    assert "![pareto](../plots/pareto.png)" in (tmp_path / "out" / "report.md").read_text()


def report_runs(path):
    from rsngd.bench.runs import load_runs

    return load_runs([path])
