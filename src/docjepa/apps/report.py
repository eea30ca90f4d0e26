"""The demo's HTML report: metrics table, loss curves and a grid of documents with predicted and true masks."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np


def _curves(out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..train.metrics_log import read_metrics

    runs = [
        ("pretrain", ["ijepa", "mlm", "mim", "djepa_image", "djepa_text"]),
        ("clip", ["loss"]),
        ("finetune", ["loss", "focal", "dice", "iou"]),
    ]
    runs = [(name, keys) for name, keys in runs if (out / name / "metrics.jsonl").is_file()]  # no empty panels
    if not runs:
        return ""
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.8), squeeze=False)
    for ax, (name, keys) in zip(axes[0], runs):
        rows = read_metrics(out / name / "metrics.jsonl")
        for k in keys:
            pts = [(r["step"], r[k]) for r in rows if k in r]
            if pts:
                first = pts[0][1] or 1.0
                ax.plot([p[0] for p in pts], [p[1] / first for p in pts], label=k)
        ax.set_title(f"{name} (loss / first logged value)")
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=90)
    plt.close(fig)
    return "curves.png"


def _grid(out: Path, examples: list[dict]) -> str:
    from PIL import Image, ImageDraw

    tiles = []
    for ex in examples:
        page = ex["page"]
        frame = ex["frame"]
        h, w = max(1, round(page.height * frame)), max(1, round(page.width * frame))
        arr = np.asarray(page.pil().resize((w * 4, h * 4)), dtype=np.float32)
        for mask, colour in ((ex["truth"], (40, 180, 60)), (ex["pred"], (230, 40, 40))):
            big = np.kron(mask[:h, :w], np.ones((4, 4), dtype=bool))[: arr.shape[0], : arr.shape[1]]
            arr[big] = 0.55 * arr[big] + 0.45 * np.array(colour, dtype=np.float32)
        tile = Image.new("RGB", (w * 4, h * 4 + 36), "white")
        tile.paste(Image.fromarray(arr.astype(np.uint8)), (0, 36))
        ImageDraw.Draw(tile).text((4, 4), f"[{ex['kind']}] {ex['question']}"[:70], fill="black")
        tiles.append(tile)
    if not tiles:
        return ""
    cols = 4
    tw, th = max(t.width for t in tiles), max(t.height for t in tiles)
    sheet = Image.new("RGB", (cols * tw, -(-len(tiles) // cols) * th), "white")
    for i, t in enumerate(tiles):
        sheet.paste(t, ((i % cols) * tw, (i // cols) * th))
    sheet.save(out / "examples.png")
    return "examples.png"


def _table(results: dict) -> str:
    rows = []
    for part in ("heldout", "train"):
        r = results.get(part)
        if not r:
            continue
        types = sorted(set(r["model"]["per_type"]) | set(r["baseline"]["per_type"]))
        for who in ("model", "baseline"):
            s = r[who]
            cells = "".join(f"<td>{s['per_type'].get(t, {}).get('gIoU', float('nan')):.3f}</td>" for t in types)
            rows.append(
                f"<tr><td>{part}</td><td>{who}</td><td>{s['n']}</td><td><b>{s['mIoU']:.3f}</b></td>"
                f"<td>{s['gIoU']:.3f}</td><td>{s['cIoU']:.3f}</td>{cells}</tr>"
            )
        head = "".join(f"<th>{html.escape(t)} gIoU</th>" for t in types)
    return (
        f"<table><tr><th>split</th><th>who</th><th>questions</th><th>mIoU</th><th>gIoU</th><th>cIoU</th>{head}"
        f"</tr>{''.join(rows)}</table>"
    )


def _real_section(results: dict) -> str:
    """The real-page benchmark: per kind gIoU of the model and the baseline, with its overlays; or why it is not
    there."""
    real = results.get("real")
    if real is None or "skipped" in real:
        why = (real or {}).get("skipped") or results.get("real_pages", {}).get("skipped", "no real pages")
        return f"<h2>Real pages</h2><p>Not scored: {html.escape(str(why))}</p>"
    kinds = sorted(set(real["model"]["per_type"]) | set(real["baseline"]["per_type"]))
    head = "".join(f"<th>{html.escape(k)}</th>" for k in kinds)
    rows = []
    for who in ("model", "baseline"):
        s = real[who]
        cells = "".join(f"<td>{s['per_type'].get(k, {}).get('gIoU', float('nan')):.3f}</td>" for k in kinds)
        rows.append(f"<tr><td>{who}</td><td>{s['n']}</td><td><b>{s['mIoU']:.3f}</b></td>{cells}</tr>")
    known = real.get("known")
    calibrated = ""
    if known:
        calibrated = (
            f"<p>Calibrated: {known['fraction']:.0%} of the answers are marked known (calibrated IoU ≥ "
            f"{known['threshold']}); their mean IoU {known['iou_known'] or 0:.3f}, the others' "
            f"{known['iou_unknown'] or 0:.3f}.</p>"
        )
    imported = results.get("real_pages", {}).get("imported", {}).get("train", {})
    return (
        f"<h2>Real pages</h2><p>The real-page benchmark: {real['questions']} verified questions on TeX Live manuals "
        f"never trained on (docs/docjepa-real.md); the model was fine-tuned with {imported.get('pages', '?')} "
        f"real pages of other manuals. Per-kind columns are gIoU.</p>"
        f"<table><tr><th>who</th><th>questions</th><th>mIoU</th>{head}</tr>{''.join(rows)}</table>{calibrated}"
        f"<p>green: true answer; red: the model's answer; blue: the baseline's.</p>"
        f'<img src="{html.escape(real["overlays"])}" width="100%">'
    )


def _template_table(results: dict) -> str:
    """Held-out gIoU per question template, model against baseline (empty when there are no templates)."""
    r = results.get("heldout") or {}
    model, base = (r.get(who, {}).get("per_template", {}) for who in ("model", "baseline"))
    rows = [
        f"<tr><td style='text-align:left'>{html.escape(t)}</td><td>{s['n']}</td><td>{s['gIoU']:.3f}</td>"
        f"<td>{base.get(t, {}).get('gIoU', float('nan')):.3f}</td></tr>"
        for t, s in model.items()
    ]
    if not rows:
        return ""
    return (
        "<h2>Held-out questions per template</h2><table><tr><th>template</th><th>questions</th>"
        f"<th>model gIoU</th><th>baseline gIoU</th></tr>{''.join(rows)}</table>"
    )


MARKDOWN_START = "<!-- demo:start -->"
MARKDOWN_END = "<!-- demo:end -->"


def markdown_table(runs: list[tuple[str, dict]]) -> str:
    """Demo results (``results.json`` of ``docjepa demo``, labelled) as one markdown table: per split, run and
    who (model or OCR baseline), the question count, mIoU, gIoU, cIoU and the gIoU per question type."""
    parts = [p for p in ("train", "heldout") if any(p in r for _, r in runs)]
    types = sorted({t for _, r in runs for p in parts for who in ("model", "baseline") for t in r[p][who]["per_type"]})
    split = {"train": "trained kinds, new pages", "heldout": "held-out layouts / templates"}
    lines = [
        "| questions | run | who | n | mIoU | gIoU | cIoU | " + " | ".join(types) + " |",
        "|---" * (7 + len(types)) + "|",
    ]
    for part in parts:
        for label, r in runs:
            for who in ("model", "baseline"):
                s = r[part][who]
                per = [s["per_type"].get(t, {}).get("gIoU") for t in types]
                cells = " | ".join("–" if v is None else f"{v:.3f}" for v in per)
                lines.append(
                    f"| {split[part]} | {label} | {who} | {s['n']} | {s['mIoU']:.3f} | {s['gIoU']:.3f} | "
                    f"{s['cIoU']:.3f} | {cells} |"
                )
    return "\n".join(lines)


def write_markdown(paths: list[Path], targets: list[Path], command: str = "") -> str:
    """Fill the ``<!-- demo:start -->`` … ``<!-- demo:end -->`` section of each target file with the table of the
    demo results in ``paths`` (each labelled by its file name); returns the table."""
    import json

    from docsections import fill_section

    runs = [(Path(p).stem, json.loads(Path(p).read_text())) for p in paths]
    table = markdown_table(runs)
    note = f"Generated by `{command}`; per-type columns are gIoU.\n\n" if command else ""
    for target in targets:
        fill_section(Path(target), MARKDOWN_START, MARKDOWN_END, note + table)
    return table


def write_report(out: Path, results: dict, examples: list[dict]) -> Path:
    """Write ``out/report.html`` (with curves.png and examples.png beside it)."""
    curves = _curves(out)
    grid = _grid(out, examples)
    timings = ", ".join(f"{k} {v:.0f} s" for k, v in results.get("timings_s", {}).items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Document-JEPA demo</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;
padding:3px 8px;text-align:right}}</style></head><body>
<h1>Document-JEPA demo</h1>
<p>Held-out = layouts and question templates never seen in fine-tuning; train = the same kinds as fine-tuning, on
new pages. The model's mask is its top-scored of three; the baseline matches question words against the OCR and
returns the nearest value. mIoU = mean over question types of the per-type gIoU.</p>
{_table(results)}
<p>Timings: {html.escape(timings)}.</p>
{_template_table(results)}
{_real_section(results)}
<h2>Loss curves</h2>{f'<img src="{curves}" width="100%">' if curves else "<p>none</p>"}
<h2>Held-out examples</h2><p>green: true answer; red: prediction (overlap looks brown).</p>
{f'<img src="{grid}" width="100%">' if grid else "<p>none</p>"}
</body></html>"""
    path = out / "report.html"
    path.write_text(page)
    return path
