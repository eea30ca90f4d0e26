"""Models side by side on the real-page benchmark, per kind, each against one of them question by question.

    python benchmarks/scripts/continued_runs.py --against previous \\
        --arm previous=runs/real-now3/real.json:shipped --heldout previous=runs/results/shipped-previous.json \\
        --arm seed0=runs/real-cont2/real.json:cont2 --heldout seed0=runs/ship-cont2/heldout.json \\
        --out benchmarks/results/docjepa/shipped/continued.json

Each ``--arm NAME=REAL_JSON:MODEL`` is one model of a ``docjepa benchmark real run`` result (``MODEL`` may be left
out when the file holds one); ``--heldout NAME=JSON`` adds its held-out synthetic mIoU (``docjepa evaluate --out``
JSON, or a ``shipped_model.py`` result for the shipped model). Every arm is compared with ``--against`` on the same
questions: the difference of real-page mIoU (mean over kinds) and its paired bootstrap (questions drawn with
replacement, ``--draws`` times): the 95 % interval and the share of draws where the arm is not better.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def miou(rows: list[dict]) -> float:
    """Mean over kinds of the mean IoU of each kind's rows."""
    from docjepa.eval.calibrate import per_kind_miou

    return per_kind_miou(rows, lambda r: r["iou"])


def load_arm(spec: str) -> tuple[str, dict]:
    name, _, where = spec.partition("=")
    path, _, model = where.partition(":")
    models = json.loads(Path(path).read_text())["models"]
    model = model or (next(iter(models)) if len(models) == 1 else "")
    if model not in models:
        raise SystemExit(f"{path} holds {sorted(models)}: name one as {name}={path}:MODEL")
    return name, {"file": path, "model": model, **models[model]}


def heldout_miou(path: str) -> float:
    d = json.loads(Path(path).read_text())
    return float(d["model"]["mIoU"] if "model" in d else d["heldout"]["shipped"]["mIoU"])


def paired(a: dict[str, dict], b: dict[str, dict], draws: int, seed: int = 0) -> dict:
    """The mIoU difference a − b on their common questions and its paired bootstrap."""
    ids = sorted(set(a) & set(b))
    rng = random.Random(seed)
    diffs = []
    for _ in range(draws):
        pick = [rng.choice(ids) for _ in ids]
        diffs.append(miou([a[i] for i in pick]) - miou([b[i] for i in pick]))
    diffs.sort()
    return {
        "questions": len(ids),
        "difference": miou([a[i] for i in ids]) - miou([b[i] for i in ids]),
        "ci95": [diffs[int(0.025 * draws)], diffs[int(0.975 * draws) - 1]],
        "not_better_share": sum(d <= 0 for d in diffs) / draws,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arm", action="append", required=True, help="NAME=REAL_JSON[:MODEL]")
    ap.add_argument("--heldout", action="append", default=[], help="NAME=JSON: the arm's held-out synthetic scores")
    ap.add_argument("--against", required=True, help="the arm every other is compared with")
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    arms = dict(load_arm(s) for s in args.arm)
    if args.against not in arms:
        raise SystemExit(f"--against {args.against}: no such arm ({', '.join(arms)})")
    held = {name: heldout_miou(path) for name, _, path in (h.partition("=") for h in args.heldout)}
    rows = {name: {q["id"]: q for q in arm["questions"]} for name, arm in arms.items()}
    result: dict = {"command": " ".join(["python", *sys.argv]), "arms": {}}
    for name, arm in arms.items():
        entry = {
            "file": arm["file"],
            "model": arm["model"],
            "checkpoint": arm.get("checkpoint"),
            "real_mIoU": arm["mIoU"],
            "per_kind": {k: v["gIoU"] for k, v in sorted(arm["per_type"].items())},
            "heldout_mIoU": held.get(name),
        }
        if name != args.against:
            entry["against_" + args.against] = paired(rows[name], rows[args.against], args.draws)
        result["arms"][name] = entry
        line = f"{name:10s} real {arm['mIoU']:.3f}"
        if name in held:
            line += f"  held-out {held[name]:.3f}"
        if name != args.against:
            p = entry["against_" + args.against]
            line += f"  {p['difference']:+.3f} [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}]"
        print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
