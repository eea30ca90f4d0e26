"""``rsngd bench report``: results JSON → a markdown table (mean ± std over seeds) and plots."""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from docsections import fill_section

from .optimizers import protocol_for
from .overfit import equal_train_loss_markdown
from .plots import plots
from .runs import _best, _key, _order, _tokens, load_runs

README_START = "<!-- bench:start -->"
README_END = "<!-- bench:end -->"
SUMMARY_START = "<!-- bench-summary:start -->"
SUMMARY_END = "<!-- bench-summary:end -->"
FRONT_START = "<!-- bench-front:start -->"
FRONT_END = "<!-- bench-front:end -->"
NAMES = {
    "rsngd": "RS-SNGD",
    "muon": "Muon",
    "adamw": "AdamW",
    "galore": "GaLore",
    "fira": "Fira",
    "apollo": "APOLLO",
    "apollo-mini": "APOLLO-Mini",
    "adam-mini": "Adam-mini",
    "natural-galore": "Natural GaLore",
}
"""How the front page names the methods."""
CORPORA = {"shakespeare": "Shakespeare", "wikitext2": "WikiText-2", "gcide": "GCIDE"}
MAX_FRONT_PASSES = 2.0
"""The front page shows settings whose training text is seen at most this often: beyond, the final loss ranks how
fast a method memorises (those settings stay in the full tables)."""


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (dataset, preset, optimizer) with means and standard deviations over seeds."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(*_key(r), r["optimizer"])].append(r)
    rows = []
    for (dataset, preset, label), rs in groups.items():
        losses = [r["final_val_loss"] for r in rs]
        rows.append(
            {
                "dataset": dataset,
                "preset": preset,
                "optimizer": label,
                "seeds": len(rs),
                "optimizer_name": rs[0].get("optimizer_name", label.split(":")[0]),
                "val_loss": statistics.fmean(losses),
                "val_loss_std": statistics.stdev(losses) if len(rs) > 1 else 0.0,
                "projected_state_bytes": statistics.fmean(r["projected_state_bytes"] for r in rs),
                "optimizer_state_bytes": statistics.fmean(r["optimizer_state_bytes"] for r in rs),
                "optimizer_step_s": statistics.fmean(r["optimizer_step_s"] for r in rs),
                "optimizer_step_max_s": max(r["optimizer_step_max_s"] for r in rs),
                "fwd_bwd_s": statistics.fmean(r["fwd_bwd_s"] for r in rs),
                "diverged": sum(bool(r.get("diverged")) for r in rs),
                # Where the data repeat, the loss can rise late in a run: its lowest evaluation and the step.
                "best_val_loss": statistics.fmean(_best(r)[1] for r in rs),
                "best_val_step": statistics.fmean(_best(r)[0] for r in rs),
                "tokens": _tokens(rs[0]),
                # The corpus's training tokens (runs recorded since this field exists): how often the run saw them.
                "train_tokens": rs[0].get("train_tokens"),
                # Where the runs of a setting ran: its times are comparable only within one device.
                "devices": dict(Counter(r["device"] for r in rs)),
            }
        )
    for row in rows:
        # AdamW's state does not depend on its lr: any AdamW run of the same setting is the reference.
        same = [o for o in rows if (o["dataset"], o["preset"]) == (row["dataset"], row["preset"])]
        ref = next((o for o in same if o["optimizer_name"] == "adamw"), None)
        row["state_vs_adamw"] = row["projected_state_bytes"] / ref["projected_state_bytes"] if ref else None
        row["whole_state_vs_adamw"] = row["optimizer_state_bytes"] / ref["optimizer_state_bytes"] if ref else None
    rows.sort(key=lambda r: (*_order(r["dataset"], r["preset"]), r["val_loss"]))
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The summary as markdown tables, one per (dataset, preset), best loss first."""
    out = []
    mixed = len({d for r in rows for d in r.get("devices", {})}) > 1
    for dataset, preset in dict.fromkeys((r["dataset"], r["preset"]) for r in rows):
        sub = [r for r in rows if (r["dataset"], r["preset"]) == (dataset, preset)]
        name, _, steps = preset.partition(", ")
        where = f"preset `{name}`" + (f", {steps}" if steps else "")
        counts = sorted({r["seeds"] for r in sub})
        seeds = f"{counts[0]} seed(s) per row" if len(counts) == 1 else "seeds per row in the last column"
        seen = ""
        if sub[0]["tokens"]:
            seen = f"{sub[0]['tokens'] / 1e6:.2f} M training tokens"
            if sub[0]["train_tokens"]:
                seen += f" = {sub[0]['tokens'] / sub[0]['train_tokens']:.1f} passes over the training text"
            seen += "; "
        ran = ""
        if mixed:  # the times of settings that ran on different devices (or thread counts) do not compare
            ran_on: Counter[str] = Counter()
            for r in sub:
                ran_on.update(r.get("devices", {}))
            ran = "; ran on " + ", ".join(f"{d} ×{n}" for d, n in sorted(ran_on.items()))
        out.append(f"**{dataset}, {where}** ({seen}{seeds}; mean ± std over seeds{ran})\n")
        out.append(
            "| optimizer | val loss | lowest val loss (step) | state of projected matrices | vs AdamW "
            "| whole-model state vs AdamW | opt step ms | fwd+bwd ms | opt/fwd+bwd | max opt step ms | seeds |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in sub:
            loss = f"{r['val_loss']:.3f}" + (f" ± {r['val_loss_std']:.3f}" if r["seeds"] > 1 else "")
            if r["diverged"]:
                loss += f" ({r['diverged']} diverged)"
            ratio = f"{r['state_vs_adamw']:.1%}" if r["state_vs_adamw"] is not None else "–"
            whole = f"{r['whole_state_vs_adamw']:.1%}" if r.get("whole_state_vs_adamw") is not None else "–"
            out.append(
                f"| {r['optimizer']} | {loss} | {r['best_val_loss']:.3f} ({r['best_val_step']:.0f}) "
                f"| {r['projected_state_bytes'] / 2**20:.2f} MiB | {ratio} | {whole} "
                f"| {1000 * r['optimizer_step_s']:.1f} | {1000 * r['fwd_bwd_s']:.1f} "
                f"| {r['optimizer_step_s'] / r['fwd_bwd_s']:.1%} | {1000 * r['optimizer_step_max_s']:.1f} "
                f"| {r['seeds']} |"
            )
        out.append("")
    return "\n".join(out)


def _mean_curves(runs: list[dict[str, Any]], key: tuple[str, str]) -> dict[str, dict[int, float]]:
    """Per optimizer of one setting: step → validation loss averaged over the seeds that reached the step."""
    acc: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if _key(r) == key:
            for step, value in r["val_curve"]:
                acc[r["optimizer"]][int(step)].append(value)
    return {label: {s: statistics.fmean(v) for s, v in sorted(c.items())} for label, c in acc.items()}


def leaders(runs: list[dict[str, Any]], key: tuple[str, str]) -> list[tuple[int, int, str]]:
    """Who has the lowest mean validation loss at each evaluation of one setting, as (first step, last step, leader)
    segments: where the ranking's top changes as the run lengthens."""
    curves = _mean_curves(runs, key)
    steps = sorted(set.intersection(*(set(c) for c in curves.values()))) if curves else []
    out: list[tuple[int, int, str]] = []
    for step in steps:
        best = min(curves, key=lambda label: curves[label][step])
        if out and out[-1][2] == best:
            out[-1] = (out[-1][0], step, best)
        else:
            out.append((step, step, best))
    return out


def paired(runs: list[dict[str, Any]], rows: list[dict[str, Any]], ours: str = "rsngd") -> list[dict[str, Any]]:
    """Per setting, ``ours`` against the baseline with the lowest mean loss (every other optimizer except variants
    of ``ours``), seed by seed: the differences (ours − baseline; negative = ours lower), wins and losses."""
    out = []
    for dataset, preset in dict.fromkeys((r["dataset"], r["preset"]) for r in rows):
        sub = [r for r in rows if (r["dataset"], r["preset"]) == (dataset, preset)]
        others = [r for r in sub if not r["optimizer"].startswith(ours)]
        # ``ours`` and its runs under other settings files (``ours (adamw_lr=…)``), each paired on its own.
        for mine in (r for r in sub if r["optimizer"] == ours or r["optimizer"].startswith(ours + " (")):
            if others:
                out.append(_pair(runs, dataset, preset, mine, min(others, key=lambda r: r["val_loss"])))
    return out


def _pair(
    runs: list[dict[str, Any]], dataset: str, preset: str, mine: dict[str, Any], base: dict[str, Any]
) -> dict[str, Any]:
    """One row of :func:`paired`: ``mine`` against ``base`` on the seeds both ran."""
    labels = (mine["optimizer"], base["optimizer"])
    by_seed = {
        label: {
            r["seed"]: r["final_val_loss"] for r in runs if _key(r) == (dataset, preset) and r["optimizer"] == label
        }
        for label in labels
    }
    seeds = sorted(set(by_seed[labels[0]]) & set(by_seed[labels[1]]))
    diffs = [by_seed[labels[0]][s] - by_seed[labels[1]][s] for s in seeds]
    return {
        "dataset": dataset,
        "preset": preset,
        "ours": labels[0],
        "baseline": labels[1],
        "seeds": seeds,
        "differences": diffs,
        "wins": sum(d < 0 for d in diffs),
        "losses": sum(d > 0 for d in diffs),
        "mean_difference": statistics.fmean(diffs) if diffs else float("nan"),
        "std_difference": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
        "state_ratio": mine["state_vs_adamw"],
    }


def paired_markdown(pairs: list[dict[str, Any]]) -> str:
    # Where ``ours`` ran under more than one settings file, a column says which row is which.
    named = any(" (" in p["ours"] for p in pairs)
    lines = [
        "| setting |" + (" ours |" if named else "") + " best baseline | per seed (ours − baseline) | wins / losses "
        "| mean ± std |",
        "|---|---|---|---|---|" + ("---|" if named else ""),
    ]
    for p in pairs:
        per = ", ".join(f"{s}: {d:+.3f}" for s, d in zip(p["seeds"], p["differences"]))
        mine = f" {p['ours']} |" if named else ""
        lines.append(
            f"| {p['dataset']} ({p['preset']}) |{mine} {p['baseline']} | {per} | {p['wins']} / {p['losses']} "
            f"| {p['mean_difference']:+.3f} ± {p['std_difference']:.3f} |"
        )
    return "\n".join(lines)


def _cells_and_ranks(rows: list[dict[str, Any]], keys: list[tuple[str, str]]) -> tuple[dict, dict[str, float]]:
    """(optimizer, dataset, preset) → its row, and optimizer → its mean rank by loss over the settings it ran in."""
    cell = {(r["optimizer"], r["dataset"], r["preset"]): r for r in rows}
    rank = {
        n: statistics.fmean(
            sorted(r["val_loss"] for r in rows if (r["dataset"], r["preset"]) == k).index(cell[(n, *k)]["val_loss"])
            for k in keys
            if (n, *k) in cell
        )
        for n in sorted({r["optimizer"] for r in rows})
    }
    return cell, rank


def headline(rows: list[dict[str, Any]]) -> str:
    """A compact table: one row per optimizer, its mean validation loss per (corpus, preset) and its projected-matrix
    state relative to AdamW's, best first by mean rank."""
    keys = sorted({(r["dataset"], r["preset"]) for r in rows}, key=lambda k: _order(*k))
    cell, rank = _cells_and_ranks(rows, keys)
    names = sorted(rank)
    head = "| optimizer | " + " | ".join(f"{d} ({p})" for d, p in keys) + " | state vs AdamW |"
    lines = [head, "|---" * (len(keys) + 2) + "|"]
    for n in sorted(names, key=rank.get):
        vals = []
        for k in keys:
            r = cell.get((n, *k))
            if r is None:
                vals.append("–")
            else:
                spread = f"± {r['val_loss_std']:.3f}" if r["seeds"] > 1 else "(1 seed)"
                vals.append(f"{r['val_loss']:.3f} {spread}")
        # From a setting that has an AdamW run (a setting without one has no ratio).
        ratio = next((r["state_vs_adamw"] for r in rows if r["optimizer"] == n and r["state_vs_adamw"]), None)
        state = f"{100 * ratio:.1f} %" if ratio is not None else "–"
        lines.append(f"| {n} | " + " | ".join(vals) + f" | {state} |")
    return "\n".join(lines)


def protocol_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of plain method specs made at the settings the tuning protocol chose for their preset and length
    (:func:`~rsngd.bench.optimizers.protocol_for`), labelled by their method."""
    out = []
    for r in runs:
        spec = r.get("spec", r["optimizer"])
        want = protocol_for(r["preset"], r.get("steps", r["preset"].get("steps"))).get(spec)
        hp = r.get("hyperparameters") or {}
        if ":" not in spec and want and all(k in hp and math.isclose(hp[k], v) for k, v in want.items()):
            out.append({**r, "optimizer": spec})
    return out


def front_page(runs: list[dict[str, Any]], command: str = "") -> str:
    """The front page's table: each method at the protocol's settings for each length (:func:`protocol_runs`), its
    mean ± std validation loss per corpus and length (the lowest in bold), and its optimizer state against AdamW's,
    of the projected matrices and of the whole model. Settings whose text repeats more than
    :data:`MAX_FRONT_PASSES` times are left to the full tables."""
    rows = [
        r
        for r in summarize(protocol_runs(runs))
        if r["tokens"] and r["train_tokens"] and r["tokens"] <= MAX_FRONT_PASSES * r["train_tokens"]
    ]
    keys = sorted({(r["dataset"], r["preset"]) for r in rows}, key=lambda k: (_order(*k)[1:], k[0]))
    keys.sort(key=lambda k: next(r["tokens"] for r in rows if (r["dataset"], r["preset"]) == k))
    cell, rank = _cells_and_ranks(rows, keys)
    best = {k: min(r["val_loss"] for r in rows if (r["dataset"], r["preset"]) == k) for k in keys}
    names = sorted(rank)

    def heading(k: tuple[str, str]) -> str:
        tokens = next(r["tokens"] for r in rows if (r["dataset"], r["preset"]) == k)
        return f"{CORPORA.get(k[0], k[0])}, {tokens / 1e6:.1f} M tokens"

    def state(n: str) -> str:
        for k in keys:  # the first setting with both the method and AdamW
            ours, ref = cell.get((n, *k)), cell.get(("adamw", *k))
            if ours and ref:
                matrices = ours["projected_state_bytes"] / ref["projected_state_bytes"]
                whole = ours["optimizer_state_bytes"] / ref["optimizer_state_bytes"]
                return f"{100 * matrices:.1f} % / {100 * whole:.0f} %"
        return "–"

    seeds = sorted({r["seeds"] for r in rows})
    lines = [
        (f"Generated by `{command}`. " if command else "")
        + "Validation loss, mean ± std over "
        + (f"{seeds[0]} seeds" if len(seeds) == 1 else "seeds")
        + " (seeds the tuning never used), each method at the settings the tuning protocol chose for that length; "
        "the lowest per column in bold. State: the optimizer's state against AdamW's, of the attention and MLP "
        "matrices / of the whole model (embeddings, norms and head stay in AdamW).",
        "",
        "| optimizer | " + " | ".join(heading(k) for k in keys) + " | state vs AdamW |",
        "|---" * (len(keys) + 2) + "|",
    ]
    for n in sorted(names, key=lambda n: (rank[n], n)):
        vals = []
        for k in keys:
            r = cell.get((n, *k))
            if r is None:
                vals.append("–")
                continue
            text = f"{r['val_loss']:.3f} ± {r['val_loss_std']:.3f}" + (
                f" ({r['seeds']} seeds)" if len(seeds) > 1 else ""
            )
            vals.append(f"**{text}**" if r["val_loss"] == best[k] else text)
        lines.append(f"| {NAMES.get(n, n)} | " + " | ".join(vals) + f" | {state(n)} |")
    return "\n".join(lines)


def leaders_markdown(runs: list[dict[str, Any]]) -> str:
    """One line per setting: the optimizer with the lowest mean validation loss along the run."""
    lines = []
    for key in dict.fromkeys(_key(r) for r in runs):
        segments = leaders(runs, key)
        if segments:
            where = "; ".join(
                f"{label} (steps {a}–{b})" if a != b else f"{label} (step {a})" for a, b, label in segments
            )
            lines.append(f"- {key[0]} ({key[1]}): {where}")
    return "\n".join(lines)


def report(
    results: list[Path],
    out_dir: Path,
    readme: Path | None = None,
    command: str = "",
    summary: Path | None = None,
    ours: str = "rsngd",
    front: list[Path] = (),
    plots_dir: Path | None = None,
) -> str:
    """Write report.md, summary.json and the plots to ``out_dir`` (the plots to ``plots_dir`` when given); optionally
    refresh the results section of ``readme`` (the full tables and plots), the headline section of ``summary``
    (:func:`headline` and the paired comparison of ``ours`` with the best baseline) and the front-page section of
    each file of ``front`` (:func:`front_page`)."""
    runs = load_runs(results)
    rows = summarize(runs)
    pairs = paired(runs, rows, ours)
    table = markdown(rows)
    images = plots(runs, rows, plots_dir or out_dir)
    notes = sorted({f"- {r['dataset']}: {r['dataset_note']}" for r in runs})
    devices = sorted({r["device"] for r in runs})
    parts = [table]
    if pairs:
        parts += [f"**{ours} against the best baseline, seed by seed** (validation loss difference)\n",
                  paired_markdown(pairs), ""]  # fmt: skip
    parts += ["**Lowest mean validation loss along the run**\n", leaders_markdown(runs), ""]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[_key(r)].append(r)
    matched = equal_train_loss_markdown(groups)
    if matched:
        parts += [
            "**Validation loss at equal training loss** (settings whose validation loss rises again as the training "
            "text repeats; at the lowest training loss every run reaches, averaged over the steps since the "
            "evaluation before)\n",
            matched,
            "",
        ]
    body = "\n".join([*parts, "Data: " if notes else "", *notes, f"\nDevice: {', '.join(devices)}.", ""])
    out_dir.mkdir(parents=True, exist_ok=True)
    linked = [Path(os.path.relpath(p.resolve(), out_dir.resolve())) for p in images]
    (out_dir / "report.md").write_text(body + "\n" + "\n".join(f"![{p.stem}]({p})" for p in linked) + "\n")
    (out_dir / "summary.json").write_text(json.dumps({"rows": rows, "paired": pairs}, indent=1))
    if summary is not None:
        note = f"Generated by `{command}` (mean ± std over seeds).\n\n" if command else ""
        extra = (
            f"\n\n{ours} against the best baseline per setting, seed by seed:\n\n" + paired_markdown(pairs)
            if pairs
            else ""
        )
        fill_section(summary, SUMMARY_START, SUMMARY_END, note + headline(rows) + extra)
    for path in front:
        fill_section(path, FRONT_START, FRONT_END, front_page(runs, command))
    if readme is not None:
        rel = [Path(os.path.relpath(p.resolve(), readme.parent.resolve())) for p in images]  # as the file links
        section = "\n".join(
            [f"Generated by `{command}`.\n" if command else "", body, *(f"![{p.stem}]({p})" for p in rel)]
        )
        fill_section(readme, README_START, README_END, section)
    return body
