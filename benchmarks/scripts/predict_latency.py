"""Predictor latency: image encoding per page at several input sizes, and per-question decoding with the page's
encoding cached (SAM's set_image / predict split).

Usage: python benchmarks/scripts/predict_latency.py [--checkpoint DIR] [--preset tiny] [--sizes 256 512 1024]
       [--questions 50] [--threads 2] [--out runs/bench/predict_latency.json]

Without --checkpoint the model has random weights (timing does not depend on the weights). For each size the
preset's architecture is configured for that input; a synthetic 1024-px page is encoded ``--repeats`` times and
``--questions`` questions are decoded against the cached encoding (``decode``: the decoder's logits;
``predict``: the whole answer as ``docjepa predict`` makes it). Writes JSON and a bar plot beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    from transformers import PreTrainedTokenizerFast

    from docjepa.data.shards import DocumentDataset
    from docjepa.data.synth.generate import generate
    from docjepa.data.tokenizer import train_tokenizer
    from docjepa.inference.predictor import DocumentPredictor
    from docjepa.modeling import build_config
    from docjepa.modeling.segmentation import DocJepaForSegmentation

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--questions", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/predict_latency.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        generate(8, Path(tmp) / "d", seed=5, size=1024, workers=1, progress=False)
        pages = [DocumentDataset(Path(tmp) / "d")[i] for i in range(8)]
        if args.checkpoint is None:
            train_tokenizer([Path(tmp) / "d"], Path(tmp) / "tok", vocab_size=2000)
            tok = PreTrainedTokenizerFast.from_pretrained(Path(tmp) / "tok")
    questions = [q.text for p in pages for q in p.questions][: args.questions]
    results = []
    for size in args.sizes:
        if args.checkpoint is not None:
            predictor = DocumentPredictor.from_pretrained(args.checkpoint, device=args.device)
            if predictor.size != size:
                continue
        else:
            cfg = build_config(args.preset, len(tok))
            cfg.image["image_size"] = [size, size]
            predictor = DocumentPredictor(DocJepaForSegmentation(cfg), tok, device=args.device)
        predictor.set_page(pages[0])  # warm-up
        encode = []
        for i in range(args.repeats):
            t = time.perf_counter()
            predictor.set_page(pages[i % len(pages)])
            encode.append(time.perf_counter() - t)
        predictor.set_page(pages[0])
        decode, answer = [], []
        for q in questions:
            t = time.perf_counter()
            predictor.decode(q)
            decode.append(time.perf_counter() - t)
        for q in questions:  # the whole answer: decode, choose, snap or word answer, masks at page resolution
            t = time.perf_counter()
            predictor.predict(q)
            answer.append(time.perf_counter() - t)
        row = {
            "size": size,
            "preset": args.preset,
            "checkpoint": str(args.checkpoint or ""),
            "encode_ms_median": 1e3 * statistics.median(encode),
            "decode_ms_median": 1e3 * statistics.median(decode),
            "decode_ms_p90": 1e3 * sorted(decode)[int(0.9 * (len(decode) - 1))],
            "predict_ms_median": 1e3 * statistics.median(answer),
            "predict_ms_p90": 1e3 * sorted(answer)[int(0.9 * (len(answer) - 1))],
            "questions": len(decode),
            "params_m": sum(p.numel() for p in predictor.model.parameters()) / 1e6,
            "threads": args.threads,
            "device": args.device,
        }
        results.append(row)
        print(json.dumps(row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(results))
    ax.bar([x - 0.2 for x in xs], [r["encode_ms_median"] for r in results], 0.4, label="encode page (once)")
    ax.bar([x + 0.2 for x in xs], [r["decode_ms_median"] for r in results], 0.4, label="decode one question")
    ax.set_xticks(list(xs), [f"{r['size']} px" for r in results])
    ax.set_ylabel("ms (median)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"), dpi=100)


if __name__ == "__main__":
    main()
