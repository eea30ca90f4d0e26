"""``rsngd bench frontier``: final validation loss against optimizer state, every method and RS-SNGD setting of a
benchmark setting on one plot, each compared seed by seed with a reference method (Muon by default).

A point is one method or spec at one setting (corpus, preset, steps): its mean final loss over the seeds given, its
standard error, and its state against AdamW's measured in the same setting (of the attention and MLP matrices, and
of the whole model). The plain methods are taken at the settings the tuning protocol chose for that length
(:func:`~rsngd.bench.report.protocol_runs`; a ``--batch`` variant takes its preset's at the same tokens); a spec
with its own ``key=value`` (``rsngd:residual_bits=8,...``) is a point of its own. A point is on the frontier when no
other point of its setting has at most its state and at most its loss, one of them strictly less.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from docsections import fill_section

from .optimizers import protocol_for
from .report import NAMES, protocol_runs, summarize
from .runs import _key, _order, label_settings, load_runs

FRONTIER_START = "<!-- bench-frontier:start -->"
FRONTIER_END = "<!-- bench-frontier:end -->"

_WORDS = {"residual_momentum": "residual momentum β", "residual_bits": "bits", "residual_rank": "rank"}


def describe(label: str) -> str:
    """A reader's name for a method or spec: ``Muon``, ``RS-SNGD``, ``RS-SNGD, residual_bits=8, …``."""
    spec, _, settings = label.partition(" (")
    name, _, keys = spec.partition(":")
    head = NAMES.get(name, name)
    parts = [p for p in keys.split(",") if p]
    if settings:
        parts.append(settings.rstrip(")"))
    return head + (" (" + ", ".join(parts) + ")" if parts else "")


def frontier_runs(runs: list[dict[str, Any]], seeds: list[int] | None = None) -> list[dict[str, Any]]:
    """The runs that make points: plain methods at the protocol's settings, specs with their own settings as they
    ran (labelled with any of the protocol's values they did not use); only ``seeds`` when given."""
    own = []
    for key in dict.fromkeys(_key(r) for r in runs):
        # Labelled within their setting: a spec that ran with other settings at another length is one point here.
        here = [{**r, "optimizer": r.get("spec", r["optimizer"])} for r in runs if _key(r) == key]
        own += [r for r in label_settings(here) if ":" in r.get("spec", r["optimizer"])]
    out = []
    for r in own:
        spec = r.get("spec", r["optimizer"])
        # The protocol's values this run did not use (its spec's own keys aside), named in its label.
        name, _, keys = spec.partition(":")
        mine = {k.split("=")[0] for k in keys.split(",")}
        want = protocol_for(r["preset"], r.get("steps", r["preset"].get("steps"))).get(name, {})
        hp = r.get("hyperparameters") or {}
        off = [f"{k}={hp[k]:g}" for k, v in want.items() if k not in mine and k in hp and not math.isclose(hp[k], v)]
        if off and " (" not in r["optimizer"]:
            r = {**r, "optimizer": f"{r['optimizer']} ({', '.join(off)})"}
        out.append(r)
    return [r for r in protocol_runs(runs) + out if seeds is None or r["seed"] in seeds]


def points(runs: list[dict[str, Any]], reference: str = "muon") -> list[dict[str, Any]]:
    """One point per (setting, method or spec) with an AdamW run in its setting: mean, std and standard error of the
    final loss, the state ratios, the paired difference with ``reference`` on the seeds both ran, and whether the
    point is on its setting's frontier."""
    rows = [r for r in summarize(runs) if r["state_vs_adamw"] is not None]
    finals: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in runs:
        finals[(*_key(r), r["optimizer"])][r["seed"]] = r["final_val_loss"]
    out = []
    for row in rows:
        here = (row["dataset"], row["preset"])
        mine, ref = finals[(*here, row["optimizer"])], finals.get((*here, reference), {})
        common = sorted(set(mine) & set(ref))
        diffs = [mine[s] - ref[s] for s in common]
        out.append(
            {
                "dataset": row["dataset"],
                "preset": row["preset"],
                "label": row["optimizer"],
                "name": describe(row["optimizer"]),
                "seeds": sorted(mine),
                "losses": [mine[s] for s in sorted(mine)],
                "val_loss": row["val_loss"],
                "val_loss_std": row["val_loss_std"],
                "val_loss_se": row["val_loss_std"] / math.sqrt(row["seeds"]),
                "state_vs_adamw": row["state_vs_adamw"],
                "whole_state_vs_adamw": row["whole_state_vs_adamw"],
                "reference": reference,
                "paired_seeds": common,
                "differences": diffs,
                "mean_difference": statistics.fmean(diffs) if diffs else None,
                "se_difference": statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None,
            }
        )
    for p in out:
        same = [q for q in out if (q["dataset"], q["preset"]) == (p["dataset"], p["preset"]) and q is not p]
        p["on_frontier"] = not any(
            q["state_vs_adamw"] <= p["state_vs_adamw"]
            and q["val_loss"] <= p["val_loss"]
            and (q["state_vs_adamw"] < p["state_vs_adamw"] or q["val_loss"] < p["val_loss"])
            for q in same
        )
    out.sort(key=lambda p: (*_order(p["dataset"], p["preset"]), p["state_vs_adamw"], p["val_loss"]))
    return out


def markdown(pts: list[dict[str, Any]]) -> str:
    """A table per setting, least state first."""
    lines: list[str] = []
    for dataset, preset in dict.fromkeys((p["dataset"], p["preset"]) for p in pts):
        sub = [p for p in pts if (p["dataset"], p["preset"]) == (dataset, preset)]
        ref = sub[0]["reference"]
        lines += [
            f"**{dataset}, {preset}**\n",
            f"| method | state of the matrices vs AdamW | whole model | final loss, mean ± SE | per seed "
            f"| − {NAMES.get(ref, ref)}, seed by seed | mean ± SE | on the frontier |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for p in sub:
            per = ", ".join(f"{s}: {v:.3f}" for s, v in zip(p["seeds"], p["losses"]))
            if p["label"] == ref or p["mean_difference"] is None:
                diff, mean = "–", "–"
            else:
                diff = ", ".join(f"{d:+.3f}" for d in p["differences"])
                se = f" ± {p['se_difference']:.3f}" if p["se_difference"] is not None else ""
                mean = f"{p['mean_difference']:+.3f}{se}"
            loss = f"{p['val_loss']:.3f} " + (f"± {p['val_loss_se']:.3f}" if len(p["seeds"]) > 1 else "(1 seed)")
            lines.append(
                f"| {p['name']} | {100 * p['state_vs_adamw']:.1f} % | {100 * p['whole_state_vs_adamw']:.0f} % "
                f"| {loss} | {per} | {diff} | {mean} | {'yes' if p['on_frontier'] else ''} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(pts: list[dict[str, Any]], path: Path) -> Path:
    """Final loss (mean ± SE) against the matrices' state (log), a panel per setting, the frontier as a step line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys((p["dataset"], p["preset"]) for p in pts))
    fig, grid = plt.subplots(1, len(keys), figsize=(6.5 * len(keys), 5), squeeze=False)
    names = list(dict.fromkeys(p["name"] for p in pts))
    palette = plt.cm.tab10 if len(names) <= 10 else plt.cm.tab20
    for ax, key in zip(grid[0], keys):
        sub = [p for p in pts if (p["dataset"], p["preset"]) == key]
        for p in sub:
            ax.errorbar(100 * p["state_vs_adamw"], p["val_loss"], yerr=p["val_loss_se"], fmt="o", capsize=3,
                        color=palette(names.index(p["name"]) % palette.N), label=p["name"])  # fmt: skip
        edge = [p for p in sub if p["on_frontier"]]
        ax.step([100 * p["state_vs_adamw"] for p in edge], [p["val_loss"] for p in edge], where="post",
                color="0.5", lw=1, ls="--", label="frontier")  # fmt: skip
        ax.set(title=f"{key[0]} / {key[1]}", xscale="log", ylabel="final validation loss (mean ± SE over seeds)",
               xlabel="optimizer state of the attention and MLP matrices, % of AdamW's (log)")  # fmt: skip
        ax.grid(alpha=0.3, which="both")
    handles: dict[str, Any] = {}
    for ax in grid[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.025 * math.ceil(len(handles) / 2), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def frontier(
    results: list[Path],
    out_dir: Path,
    *,
    seeds: list[int] | None = None,
    data: list[str] | None = None,
    reference: str = "muon",
    doc: Path | None = None,
    plots_dir: Path | None = None,
    command: str = "",
) -> str:
    """Write frontier.json, frontier.md and frontier.png (to ``plots_dir`` when given) for the runs in ``results``
    (only ``seeds`` and the corpora in ``data`` when given); refresh ``doc``'s frontier section. Returns the
    markdown."""
    runs = [r for r in frontier_runs(load_runs(results), seeds) if data is None or r["dataset"] in data]
    pts = points(runs, reference)
    if not pts:
        raise SystemExit("no setting of these runs has an AdamW run to measure state against")
    table = markdown(pts)
    image = plot(pts, (plots_dir or out_dir) / "frontier.png")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "frontier.json").write_text(json.dumps({"command": command, "points": pts}, indent=1) + "\n")
    (out_dir / "frontier.md").write_text(table + "\n")
    if doc is not None:
        link = Path(os.path.relpath(image.resolve(), doc.parent.resolve()))
        note = f"Generated by `{command}`.\n\n" if command else ""
        fill_section(doc, FRONTIER_START, FRONTIER_END, note + table + f"\n![frontier]({link})")
    return table


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``rsngd bench frontier``: final loss against optimizer state, a table and a plot."""
    ap = sub.add_parser(
        "frontier",
        help="final loss against optimizer state: every method and spec, each paired with a reference",
        description="Final validation loss against optimizer state for every method and spec of each setting, "
        "paired seed by seed with a reference method; the frontier marked.",
    )
    ap.add_argument("results", nargs="+", type=Path, help="results JSON of `rsngd bench`")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/frontier"))
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="only these seeds (e.g. the held-out 1 2 3)")
    ap.add_argument("--data", nargs="+", default=None, help="only these corpora (e.g. gcide)")
    ap.add_argument("--reference", default="muon", help="the method each point is paired with (default muon)")
    ap.add_argument("--doc", type=Path, default=None, help="refresh this markdown file's frontier section")
    ap.add_argument("--plots", type=Path, default=None, help="write frontier.png here (default: --out)")
    ap.set_defaults(func=run, parser=ap)
    return ap


def run(args: argparse.Namespace) -> None:
    command = shlex.join(args.command_line)
    print(frontier(args.results, args.out, seeds=args.seeds, data=args.data, reference=args.reference,
                   doc=args.doc, plots_dir=args.plots, command=command))  # fmt: skip
