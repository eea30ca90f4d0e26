"""The project's GPU evidence in one command, inside a time budget: ``make gpu`` (``make gpu DRY=1`` on a CPU).

    python benchmarks/scripts/gpu.py run [--budget-s 480] [--out DIR] [--dry-run] [--parts memory,lm,...]
    python benchmarks/scripts/gpu.py prepare runs/gpu-data      # on the CPU machine: the text part 2 reads there
    python benchmarks/scripts/gpu.py unpack DIR/docjepa-train-model.tar.gz* --to runs/gpu-demo/finetune
    python benchmarks/scripts/gpu.py report                     # docs/gpu.md and its plots from the committed JSON

``run`` runs four parts in order, each in its own process with its share of the budget (a part that ends early
leaves its time to the ones after it; one that overruns is stopped, keeping what it wrote):

1. ``memory`` (35 %): peak memory, its split and step times of LLaMA-1B and LLaMA-7B, bf16 weights, for AdamW,
   Muon, ``rsngd``, ``rsngd-lite`` and ``rsngd`` with ``per_layer=True`` (``gpu_memory.py``);
2. ``lm`` (30 %): loss of AdamW, Muon and RS-SNGD at llama-60m on real text, one seed (``gpu_lm.py``);
3. ``docjepa-base`` (12 %): the base preset at 1024²: memory and pages/s of pre-training and fine-tuning, and a
   short pre-training whose loss must fall (``gpu_docjepa.py``);
4. ``docjepa-train`` (the rest): the demo recipe with more fine-tuning steps, its checkpoint packed into the output
   folder (``gpu_docjepa_train.py``).

Each part writes its JSON as soon as it has something (``memory.json``, ``lm.json``, ``docjepa-base.json``,
``docjepa-train.json``) and ``summary.json`` gathers the parts' exit status and time. The output folder defaults to
``benchmarks/results/gpu/<device>/`` (``runs/gpu-dry-run/`` for a dry run). ``--dry-run`` runs the same code on the
CPU at tiny shapes and a few steps (the test suite runs it). Nothing here needs a GPU to import or to dry-run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PARTS: dict[str, float] = {"memory": 0.35, "lm": 0.30, "docjepa-base": 0.12, "docjepa-train": 0.23}
"""Each part's share of the budget (of what is left when it starts, over the shares still to come)."""


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--budget-s", type=float, default=480.0, help="seconds for all parts together (default 480)")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/gpu/<device>/")
    ap.add_argument("--dry-run", action="store_true", help="the same code on the CPU at tiny shapes, a few steps")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "gpu-work", help="scratch: generated pages, runs")
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"), help="text corpora (as ../shared/data)")
    ap.add_argument("--cache", default=str(ROOT / "runs" / "cache"), help="tokenized corpora")
    ap.add_argument("--mem-batch", type=int, default=1, help="memory part: sequences per step (default 1)")
    ap.add_argument("--mem-seq", type=int, default=256, help="memory part: tokens per sequence")
    ap.add_argument("--mem-steps", type=int, default=10, help="memory part: timed steps after 2 warm-up steps")
    ap.add_argument(
        "--mem-shapes", default="llama-1b,llama-7b", help="memory part: comma-separated, of llama-1b, llama-7b"
    )
    ap.add_argument(
        "--mem-arms",
        default="",
        help="memory part: comma-separated optimizer labels (default: every arm; one to fill a skipped row)",
    )
    ap.add_argument("--lm-data", default="gcide", help="lm part: corpus (gcide, wikitext2, … as rsngd bench --data)")
    ap.add_argument("--lm-steps", type=int, default=1000, help="lm part: steps, fewer when the budget is short")
    ap.add_argument("--lm-batch", type=int, default=64, help="lm part: sequences of 256 tokens per step")
    ap.add_argument("--base-pages", type=int, default=64)
    ap.add_argument("--base-batch", type=int, default=8)
    ap.add_argument("--base-pretrain-steps", type=int, default=24)
    ap.add_argument("--base-finetune-steps", type=int, default=12, help="fewer when the budget is short")
    ap.add_argument(
        "--docjepa-recipe",
        choices=["demo", "shipped"],
        default="demo",
        help="docjepa-train: the make demo recipe from scratch, or the shipped model trained on (finetune/business)",
    )
    ap.add_argument("--question-tower", default="", help="docjepa-train: a tower folder (default: the demo's)")
    ap.add_argument("--real-train", default="", help="docjepa-train: real-page shards to add (gpu.py prepare's)")
    ap.add_argument("--max-finetune-steps", type=int, default=6000)


def run_part(name: str, args: argparse.Namespace) -> None:
    """Run one part in this process (the child ``run`` starts for each part)."""
    import torch
    from gpu_common import Deadline, pick_device

    device = pick_device(args.dry_run)
    if args.dry_run:
        torch.set_num_threads(min(2, torch.get_num_threads()))
    deadline = Deadline(args.deadline)
    if name == "memory":
        import gpu_memory as part
    elif name == "lm":
        import gpu_lm as part
    elif name == "docjepa-base":
        import gpu_docjepa as part

        part.run = part.run_base
    else:
        import gpu_docjepa_train as part
    part.run(args, deadline, device, args.out)


def out_dir(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return args.out
    if args.dry_run:
        return ROOT / "runs" / "gpu-dry-run"

    from gpu_common import device_slug, pick_device

    return ROOT / "benchmarks" / "results" / "gpu" / device_slug(pick_device(False), False)


def orchestrate(args: argparse.Namespace, options: list[str]) -> int:
    """Every asked part in its own process, in order, each stopped at its deadline; ``summary.json``. ``options``:
    the run's command-line options, given to each part unchanged."""
    from gpu_common import environment, pick_device, write_json

    names = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(names) - set(PARTS))
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    out = out_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    end = start + args.budget_s
    summary = {
        "budget_s": args.budget_s,
        "dry_run": args.dry_run,
        "environment": environment(pick_device(args.dry_run)),
    }
    summary["command"] = " ".join(["gpu.py run", *options])
    summary["parts"] = {}
    print(f"gpu.py: {summary['environment']['device']}, budget {args.budget_s:.0f} s, results in {out}", flush=True)
    for i, name in enumerate(names):
        left = end - time.time()
        weight = sum(PARTS[n] for n in names[i:])
        share = left * PARTS[name] / weight if i < len(names) - 1 else left
        deadline = time.time() + share
        record: dict = {"share_s": round(share, 1)}
        if share < 5:
            record["status"] = "skipped: no budget left"
            summary["parts"][name] = record
            write_json(out / "summary.json", summary)
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "part", name, "--deadline", str(deadline)]
        cmd += [*options, "--out", str(out)]
        t = time.time()
        proc = subprocess.Popen(cmd, start_new_session=True)
        try:
            code = proc.wait(timeout=max(1.0, share + 10.0))  # the part watches its deadline; this is the backstop
            record["status"] = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            record["status"] = "stopped at its deadline"
            if name == "docjepa-train":  # what the stopped training left: its newest checkpoint
                sys.path.insert(0, str(HERE))
                from gpu_docjepa_train import pack

                record.update(pack(args.work / "docjepa-train", out))
        record["wall_s"] = round(time.time() - t, 1)
        summary["parts"][name] = record
        write_json(out / "summary.json", summary)
        print(f"== {name}: {record['status']} in {record['wall_s']:.0f} s (share {share:.0f} s)", flush=True)
    summary["wall_s"] = round(time.time() - start, 1)
    write_json(out / "summary.json", summary)
    print_summary(out)
    return 0 if all(r["status"] in ("ok", "stopped at its deadline") for r in summary["parts"].values()) else 1


def print_summary(out: Path) -> None:
    """One screen: each part's figures, from the JSON it wrote."""
    import gpu_lm
    import gpu_memory
    from gpu_docjepa import summary as stage_summary

    print(f"\n---- summary ({out}) ----")
    for name, record in json.loads((out / "summary.json").read_text())["parts"].items():
        print(f"{name}: {record['status']}")
        path = out / f"{name}.json"
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        for row in data.get("rows", []):
            print("  " + gpu_memory.summary_line(row))
        for run in data.get("runs", []):
            print("  " + gpu_lm.summary_line(run))
        for stage in ("pretrain", "finetune"):
            if "steps" in data.get(stage, {}):
                print(f"  {stage}: {stage_summary(data[stage])}")
        if "checkpoint" in data:
            print(
                f"  checkpoint: {data['checkpoint']}; held-out: {data.get('heldout', {}).get('model', {}).get('mIoU')}"
            )


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    add_run_arguments(sub.add_parser("run", help="run the parts inside the budget"))
    part = sub.add_parser("part", help=argparse.SUPPRESS)
    part.add_argument("name", choices=list(PARTS))
    part.add_argument("--deadline", type=float, required=True)
    add_run_arguments(part)
    prep = sub.add_parser("prepare", help="put the text part 2 reads into a folder to carry to the GPU machine")
    prep.add_argument("folder", type=Path)
    prep.add_argument(
        "--docjepa",
        action="store_true",
        help="only what docjepa-train needs: the Faker wheel, the packaged question tower (float16, trimmed, xz) "
        "and the real training pages given with --real-train (shrunk)",
    )
    prep.add_argument("--real-train", type=Path, nargs="*", default=[], help="with --docjepa: real-page shards")
    prep.add_argument("--work", type=Path, default=ROOT / "runs" / "gpu-work", help="where the recipes' pages go")
    prep.add_argument("--dry-run", action="store_true", help="with --docjepa: for a dry run (the recipes' few pages)")
    unp = sub.add_parser("unpack", help="a model folder from docjepa-train's packed checkpoint")
    unp.add_argument("files", nargs="+", type=Path)
    unp.add_argument("--to", type=Path, required=True)
    unp.add_argument("--tower", type=Path, default=None, help="a left-out question tower (default: the packaged one)")
    mer = sub.add_parser("merge", help="a later run's JSON (its --out folder) into a device's results folder")
    mer.add_argument("run", type=Path)
    mer.add_argument("--into", type=Path, required=True, help="benchmarks/results/gpu/<device>/")
    rep = sub.add_parser("report", help="docs/gpu.md and its plots from benchmarks/results/gpu/")
    rep.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    rep.add_argument("--doc", type=Path, default=ROOT / "docs" / "gpu.md")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.command == "run":
        return orchestrate(args, argv[1:])
    if args.command == "part":
        args.out = out_dir(args)
        run_part(args.name, args)
        return 0
    if args.command == "prepare":
        from gpu_carry import prepare

        shared = Path(ROOT.parent / "shared" / "data")
        prepare(args.folder, shared, args.docjepa, args.real_train, args.work, args.dry_run)
        return 0
    if args.command == "unpack":
        from gpu_docjepa_train import unpack

        print(unpack(args.files, args.to, args.tower))
        return 0
    if args.command == "merge":
        from gpu_report import merge

        print("\n".join(merge(args.run, args.into)))
        return 0
    from gpu_report import report

    report(args.results, args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
