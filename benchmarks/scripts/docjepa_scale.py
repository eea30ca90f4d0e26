"""How the demo's recipe scales with training steps: the same data, more pre-training and fine-tuning steps.

    python benchmarks/scripts/docjepa_scale.py --demo runs/demo --out runs/scale \\
        --arm demo:200:800 --arm ft4x:200:3200 --arm pt4x-ft4x:800:3200 --parallel 3

Each ``--arm NAME:PRETRAIN:FINETUNE[:TEXT_ENCODER]`` pre-trains and fine-tunes the tiny preset exactly as
``docjepa demo`` does (its data, tokenizer, question tower, seed and configs; ``TEXT_ENCODER`` as
``--model.text_encoder``, then the demo's tokenizer is not used), with the given step counts, then scores the
demo's held-out synthetic questions and the real-page benchmark's pages (``DEMO/real-benchmark/pages``, built by
the demo). Arms run as separate processes, ``--parallel`` at a time (on one GPU they share it). Each writes
``OUT/NAME.json`` (steps, seconds per stage, held-out and real-page scores); ``OUT/scale.json`` gathers them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def run_arm(
    demo: Path, out: Path, name: str, pre: int, ft: int, encoder: str, tower: str, threads: int, workers: int = 0
) -> dict:
    from docjepa.core.config import load_config, updated
    from docjepa.data.split import SplitConfig
    from docjepa.eval.evaluate import evaluate
    from docjepa.inference.predictor import DocumentPredictor
    from docjepa.train.finetune import FinetuneConfig, finetune
    from docjepa.train.pretrain import PretrainConfig, pretrain

    data = demo / "data"
    train = [data / "train"] + ([data / "real-train"] if (data / "real-train").is_dir() else [])
    common = {"data": {"train": train, "workers": workers}, "run": {"threads": threads, "seed": 0}}
    if encoder:
        common["model"] = {"text_encoder": encoder}
    else:
        common["data"]["tokenizer"] = demo / "tokenizer"
    run = out / name
    timings = {}
    t = time.perf_counter()
    cfg = updated(
        load_config(PretrainConfig, "pretrain/tiny"), common, {"run": {"steps": pre, "checkpoint_every": pre}}
    )
    pretrain(cfg, run / "pretrain", resume=False, progress=False)
    timings["pretrain"] = time.perf_counter() - t
    t = time.perf_counter()
    cfg = updated(
        load_config(FinetuneConfig, "finetune/tiny"),
        common,
        {"model": {"init": run / "pretrain", "question_tower": tower, "freeze_question_tower": True}},
        {"run": {"steps": ft, "checkpoint_every": 400}},
    )
    finetune(cfg, run / "finetune", resume=False, progress=False)
    timings["finetune"] = time.perf_counter() - t
    t = time.perf_counter()
    predictor = DocumentPredictor.from_pretrained(run / "finetune")
    result = {"arm": name, "pretrain_steps": pre, "finetune_steps": ft, "text_encoder": encoder or "scratch"}
    result["heldout"] = evaluate(predictor, [data / "eval"], SplitConfig(), part="heldout", limit=400, progress=False)
    pages = demo / "real-benchmark" / "pages"
    if pages.is_dir():
        result["real"] = evaluate(predictor, [pages], SplitConfig([], 0), part="all", progress=False)
    timings["evaluate"] = time.perf_counter() - t
    result["timings_s"] = timings
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", type=Path, required=True, help="a demo folder (its data, tokenizer, real pages)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arm", action="append", required=True, help="NAME:PRETRAIN:FINETUNE[:TEXT_ENCODER]")
    ap.add_argument("--question-tower", default="", help="default: the demo's (results.json), else the packaged one")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads per arm")
    ap.add_argument("--workers", type=int, default=0, help="data-loading processes per arm (the demo's: 0)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run this arm in this process
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tower = args.question_tower
    if not tower:
        from docjepa.modeling.sentence_encoder import packaged_sentence_encoder

        tower = str(packaged_sentence_encoder())
    arms = {}
    for spec in args.arm:
        name, pre, ft, *enc = spec.split(":", 3)
        arms[name] = (int(pre), int(ft), enc[0] if enc else "")
    if args.one:
        pre, ft, enc = arms[args.one]
        run_arm(args.demo, args.out, args.one, pre, ft, enc, tower, args.threads, args.workers)
        return
    pending, running, codes = list(arms), {}, {}
    while pending or running:
        while pending and len(running) < args.parallel:
            name = pending.pop(0)
            cmd = [sys.executable, __file__, "--demo", str(args.demo), "--out", str(args.out), "--one", name]
            cmd += [f"--arm={s}" for s in args.arm] + ["--question-tower", tower, "--threads", str(args.threads)]
            cmd += ["--workers", str(args.workers)]
            with open(args.out / f"{name}.log", "w") as log:  # the child keeps its own copy of the file
                running[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        for name, proc in list(running.items()):
            if proc.poll() is not None:
                codes[name] = proc.returncode
                del running[name]
        time.sleep(2)
    results = [json.loads((args.out / f"{n}.json").read_text()) for n in arms if (args.out / f"{n}.json").is_file()]
    (args.out / "scale.json").write_text(json.dumps({"arms": results, "exit_codes": codes}, indent=1) + "\n")
    for r in results:
        line = f"{r['arm']:>12} pt {r['pretrain_steps']:>5} ft {r['finetune_steps']:>5}"
        line += f"  heldout {r['heldout']['model']['mIoU']:.3f} (baseline {r['heldout']['baseline']['mIoU']:.3f})"
        if "real" in r:
            line += f"  real {r['real']['model']['mIoU']:.3f} (baseline {r['real']['baseline']['mIoU']:.3f})"
        print(line, {k: round(v) for k, v in r["timings_s"].items()})
    if any(codes.values()):
        sys.exit(f"arms failed: {codes}")


if __name__ == "__main__":
    main()
