"""Kill training and import at random moments (SIGKILL), continue them, and check the bytes every time.

Training: a tiny pre-training run is made once without interruption; then, ``--trials`` times, the same run is
started, killed after a random delay (repeatedly, ``--kills`` times, while it is still running) and finally
resumed with ``--resume`` until it finishes. Its last checkpoint's model weights and optimizer state must equal
the uninterrupted run's byte for byte, and its ``metrics.jsonl`` must hold each step once.

Import: a folder of generated PDFs is imported once without interruption; then, ``--trials`` times, an import
is killed after a random delay, every shard left behind must be complete (it opens and every row decodes), and
``docjepa import --resume`` must finish with shards identical byte for byte to the uninterrupted import's.

    python benchmarks/scripts/fault_injection.py --trials 10 \
        --out benchmarks/results/docjepa/reliability/fault_injection.json

Writes a JSON summary (counts, kill moments, which checks held); exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "docjepa.apps.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(argv: list[str]) -> None:
    done = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")


def run_killed(argv: list[str], delay: float) -> bool:
    """Start ``argv``, SIGKILL it after ``delay`` seconds; True if it was killed (False: it had finished)."""
    proc = subprocess.Popen(argv, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True


# ----------------------------------------------------------------------------------------------- training
def train_argv(data: Path, tok: Path, out: Path, steps: int) -> list[str]:
    return [
        *CLI,
        "pretrain",
        "--config",
        "pretrain/tiny",
        "--out",
        str(out),
        "--no-progress",
        f"--data.train=[{data}]",
        f"--data.tokenizer={tok}",
        "--data.max_tokens=96",
        f"--run.steps={steps}",
        "--run.batch_size=2",
        "--run.log_every=1",
        "--run.checkpoint_every=2",
        "--optim.rank=8",
    ]


def final_bytes(out: Path, steps: int) -> dict[str, str]:
    ckpt = out / "checkpoints" / f"step-{steps:07d}"
    return {
        "model": digest(ckpt / "model" / "model.safetensors"),
        "optimizer": digest(ckpt / "optimizer.pt"),
        "scheduler": digest(ckpt / "scheduler.pt"),
    }


def training_trials(work: Path, trials: int, kills: int, steps: int, rng: random.Random) -> dict:
    data, tok = work / "pages", work / "tok"
    run([*CLI, "generate", "--n", "16", "--out", str(data), "--size", "256", "--workers", "1", "--no-progress"])
    run([*CLI, "tokenizer", "train", str(data), "--out", str(tok), "--vocab-size", "600"])
    t0 = time.perf_counter()
    run(train_argv(data, tok, work / "reference", steps))
    span = time.perf_counter() - t0
    reference = final_bytes(work / "reference", steps)
    rows = []
    for trial in range(trials):
        out = work / f"train-{trial}"
        argv = train_argv(data, tok, out, steps)
        moments, landed = [], 0
        for k in range(kills):
            delay = rng.uniform(1.0, 0.95 * span)
            moments.append(round(delay, 2))
            first = k == 0 or not out.exists()
            landed += run_killed(argv if first else [*argv, "--resume"], delay)
        resume = [*argv, "--resume"] if (out / "config.yaml").is_file() else argv
        run(resume)
        steps_logged = [json.loads(ln)["step"] for ln in (out / "metrics.jsonl").read_text().splitlines()]
        same = final_bytes(out, steps) == reference
        rows.append(
            {
                "kill_after_s": moments,
                "kills_landed": landed,
                "identical_bytes": same,
                "steps_logged_once": steps_logged == list(range(1, steps + 1)),
            }
        )
        print(f"training trial {trial}: killed at {moments} s ({landed} landed) → identical {same}", flush=True)
        shutil.rmtree(out)
    return {"uninterrupted_s": round(span, 1), "steps": steps, "trials": rows}


# ------------------------------------------------------------------------------------------------- import
def make_pdfs(folder: Path, n: int, rng: random.Random) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    words = [
        "invoice",
        "total",
        "amount",
        "due",
        "date",
        "number",
        "customer",
        "account",
        "payment",
        "reference",
        "order",
        "item",
    ]
    for i in range(n):
        sub = folder / f"batch{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        c = canvas.Canvas(str(sub / f"doc{i // 3:03d}.pdf"), pagesize=A4)
        for _ in range(1 + i % 3):
            c.setFont("Helvetica", 11)
            for line in range(40):
                c.drawString(60, 780 - 18 * line, " ".join(rng.choice(words) for _ in range(8)))
            c.showPage()
        c.save()


def import_argv(src: Path, out: Path) -> list[str]:
    return [*CLI, "import", str(src), "--out", str(out), "--dpi", "150", "--pages-per-shard", "16", "--no-progress"]


def shards_complete(out: Path) -> bool:
    """Does every ``shard-*.parquet`` left open and decode, row by row? (A ``.tmp`` file a kill interrupted is
    not a shard: readers never see it, and the next import removes it.)"""
    from docjepa.data.shards import decode_page, iter_rows

    bad: list = []
    if not out.is_dir():
        return True
    for _, path, row, r in iter_rows(out, on_skip=bad.append):
        decode_page(r, path, row)
    return not bad


def shard_bytes(out: Path) -> dict[str, str]:
    return {p.name: digest(p) for p in sorted(out.glob("shard-*.parquet"))}


def import_trials(work: Path, trials: int, files: int, rng: random.Random) -> dict:
    src = work / "pdfs"
    make_pdfs(src, files, rng)
    t0 = time.perf_counter()
    run(import_argv(src, work / "ref"))
    span = time.perf_counter() - t0
    reference = shard_bytes(work / "ref")
    rows = []
    for trial in range(trials):
        out = work / f"import-{trial}"
        delay = rng.uniform(1.0, 0.95 * span)
        landed = run_killed(import_argv(src, out), delay)
        complete = shards_complete(out)
        left = len(list(out.glob("shard-*.parquet"))) if out.is_dir() else 0
        tmp_left = len(list(out.glob("*.tmp"))) if out.is_dir() else 0
        run([*import_argv(src, out), "--resume"])
        same = shard_bytes(out) == reference and not list(out.glob("*.tmp"))
        rows.append(
            {
                "kill_after_s": round(delay, 2),
                "kill_landed": landed,
                "shards_left": left,
                "tmp_files_left": tmp_left,
                "complete_shards_only": complete,
                "identical_bytes": same,
            }
        )
        print(f"import trial {trial}: killed at {delay:.2f} s, {left} shards left → identical {same}", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    return {"uninterrupted_s": round(span, 1), "files": files, "shards": len(reference), "trials": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10, help="interrupted runs of each kind")
    ap.add_argument("--kills", type=int, default=2, help="kills per training trial before the final resume")
    ap.add_argument("--steps", type=int, default=12, help="pre-training steps")
    ap.add_argument("--files", type=int, default=60, help="PDFs to import")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill moments and the PDFs' text")
    ap.add_argument("--out", type=Path, default=Path("runs/fault_injection.json"))
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="fault-injection-"))
    work.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "python benchmarks/scripts/fault_injection.py " + " ".join(sys.argv[1:]),
        "import": import_trials(work, args.trials, args.files, rng),
        "training": training_trials(work, args.trials, args.kills, args.steps, rng),
    }
    ok_train = [t["identical_bytes"] and t["steps_logged_once"] for t in result["training"]["trials"]]
    ok_import = [t["complete_shards_only"] and t["identical_bytes"] for t in result["import"]["trials"]]
    result["summary"] = {
        "training": f"{sum(ok_train)}/{len(ok_train)} resumed runs identical to the uninterrupted one",
        "training_kills_landed": sum(t["kills_landed"] for t in result["training"]["trials"]),
        "import": f"{sum(ok_import)}/{len(ok_import)} killed imports left complete shards only and resumed identically",
        "import_kills_landed": sum(t["kill_landed"] for t in result["import"]["trials"]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if all(ok_train) and all(ok_import) else 1)


if __name__ == "__main__":
    main()
