"""Simulated seconds per mask: manual, assisted, assisted with refinement clicks, and semi-automatic.

    python benchmarks/scripts/refine_time.py --model demo=runs/demo/finetune --model clicks=runs/ft-clicks \\
        --pages runs/demo/data/eval --n 30 --out benchmarks/results/docjepa/engine/refine-time.json

The scripted annotator of ``docjepa engine simulate`` (its stated time model, ``TimeModel``) annotates every
question of the first ``--n`` pages: without a model (manual: it writes the question and draws the answer with
word clicks and boxes), with the model's proposal (assisted: it writes the question, then edits; semi-automatic:
the engine asked the question), and with the proposal plus up to ``--max-clicks`` refinement clicks, each placed
where the answer is most wrong and answered again by the model from the cached page encoding (assisted+refine),
taken only when they save time (assisted+refine, semi+refine). The pages are the same for every mode and model.
``--alone NAME=CHECKPOINT``: refinement by the model's own answers, without the predictor's click rules.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    from model_arms import add_model_args, model_arms

    from docjepa.apps.engine.model import EngineModel
    from docjepa.apps.engine.simulation.run import SimConfig, probe, probe_refine
    from docjepa.data.shards import DocumentDataset

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap, "refined by the model's own answers, without the predictor's click rules")
    ap.add_argument("--pages", type=Path, required=True, help="pages with true answers (shards)")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--max-clicks", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    cfg = SimConfig(max_clicks=args.max_clicks)
    ds = DocumentDataset(args.pages)
    pages = [ds[i] for i in range(min(args.n, len(ds)))]
    result: dict = {"pages": len(pages), "time_model": cfg.time.__dict__, "manual": probe(cfg, None, pages, "manual")}
    print("manual", json.dumps(result["manual"]), flush=True)
    for name, checkpoint, rules in model_arms(args):
        model = EngineModel(checkpoint).load()
        model.predictor.policy.click_rules = rules
        runs = {
            "assisted": probe(cfg, model, pages, "assisted"),
            "assisted+refine": probe_refine(cfg, model, pages, "assisted"),
            "semi": probe(cfg, model, pages, "semi"),
            "semi+refine": probe_refine(cfg, model, pages, "semi"),
        }
        result[name] = {"checkpoint": checkpoint, "click_rules": rules, **runs}
        for mode, r in runs.items():
            print(name, mode, json.dumps(r), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
