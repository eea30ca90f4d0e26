"""The benchmark's plots: validation loss against tokens, one panel per corpus and preset."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from .runs import _best, _key


def _panels(plt, keys: list[tuple[str, str]]):
    """One panel per setting: a row per corpus, a column per preset and horizon (a grid, not one long row)."""
    datasets = list(dict.fromkeys(d for d, _ in keys))
    presets = list(dict.fromkeys(p for _, p in keys))
    fig, grid = plt.subplots(len(datasets), len(presets), figsize=(6 * len(presets), 4.5 * len(datasets)),
                             squeeze=False)  # fmt: skip
    axes = {(d, p): grid[i][j] for i, d in enumerate(datasets) for j, p in enumerate(presets)}
    for key, ax in axes.items():
        if key not in keys:
            ax.set_axis_off()
    return fig, {k: axes[k] for k in keys}


def _save(fig, axes: dict, path: Path) -> Path:
    import matplotlib.pyplot as plt

    # One legend of every label drawn in any panel, where the most methods are drawn.
    handles: dict[str, Any] = {}
    for ax in axes.values():
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        best = max(axes.values(), key=lambda ax: len(ax.get_legend_handles_labels()[1]))
        best.legend(list(handles.values()), list(handles), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(runs: list[dict[str, Any]], rows: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """loss.png (validation loss vs training tokens, mean ± std over seeds), pareto.png (final loss vs optimizer
    state), time.png (step time split)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(_key(r) for r in runs))
    labels = list(dict.fromkeys(r["optimizer"] for r in runs))
    # One colour per spec; its rows under other settings files (label_settings) in the same colour, dashed.
    spec = {r["optimizer"]: r.get("spec", r["optimizer"]) for r in runs}
    specs = list(dict.fromkeys(spec.values()))
    palette = plt.cm.tab10 if len(specs) <= 10 else plt.cm.tab20  # tab20's neighbours are hard to tell apart
    colors = {label: palette(specs.index(spec[label]) % palette.N) for label in labels}
    variant = {label: [k for k in labels if spec[k] == spec[label]].index(label) for label in labels}
    line = {label: ("-", "--", ":", "-.")[variant[label] % 4] for label in labels}
    marker = {label: "osD^"[variant[label] % 4] for label in labels}
    paths = []

    fig, axes = _panels(plt, keys)
    for key, ax in axes.items():
        for label in labels:
            rs = [r for r in runs if _key(r) == key and r["optimizer"] == label and r["val_curve"]]
            if not rs:
                continue
            per_step = rs[0]["preset"].get("batch", 1) * rs[0]["preset"].get("seq", 1)
            steps = [s for s, _ in rs[0]["val_curve"]]
            curves = [[v for _, v in r["val_curve"]] for r in rs if len(r["val_curve"]) == len(steps)]
            tokens = [s * per_step / 1e6 for s in steps]
            mean = [statistics.fmean(c[i] for c in curves) for i in range(len(steps))]
            std = [statistics.stdev(c[i] for c in curves) if len(curves) > 1 else 0.0 for i in range(len(steps))]
            ax.plot(tokens, mean, label=label, color=colors[label], ls=line[label], lw=1.4)
            ax.fill_between(tokens, [m - d for m, d in zip(mean, std)], [m + d for m, d in zip(mean, std)],
                            color=colors[label], alpha=0.15, lw=0)  # fmt: skip
        ax.set(title=f"{key[0]} / {key[1]}", xlabel="training tokens (M)", ylabel="validation loss (mean ± std)")
        lows = [_best(r)[1] for r in runs if _key(r) == key and math.isfinite(_best(r)[1])]
        if lows:  # the first evaluations are far above the rest: show where the methods separate
            ax.set_ylim(min(lows) - 0.1, min(lows) + 1.5)
        ax.grid(alpha=0.3)
    paths.append(_save(fig, axes, out_dir / "loss.png"))

    fig, axes = _panels(plt, keys)
    for key, ax in axes.items():
        for r in (r for r in rows if (r["dataset"], r["preset"]) == key):
            for field, fill in (("projected_state_bytes", None), ("optimizer_state_bytes", "none")):
                ax.errorbar(
                    r[field] / 2**20,
                    r["val_loss"],
                    yerr=r["val_loss_std"],
                    fmt=marker[r["optimizer"]],
                    color=colors[r["optimizer"]],
                    mfc=fill,
                    label=r["optimizer"] if fill is None else None,
                    capsize=3,
                )
        ax.set(
            title=f"{key[0]} / {key[1]}",
            xlabel="optimizer state (MiB, log): projected matrices (filled) / whole model (hollow)",
            ylabel="final validation loss",
            xscale="log",
        )
        ax.grid(alpha=0.3)
    paths.append(_save(fig, axes, out_dir / "pareto.png"))

    fig, axes = _panels(plt, keys)
    for key, ax in axes.items():
        sub = [r for r in rows if (r["dataset"], r["preset"]) == key]
        names = [r["optimizer"] for r in sub]
        fb = [1000 * r["fwd_bwd_s"] for r in sub]
        op = [1000 * r["optimizer_step_s"] for r in sub]
        ax.barh(names, fb, label="forward+backward", color="#9ab")
        ax.barh(names, op, left=fb, label="optimizer step", color="#d62")
        ax.set(title=f"{key[0]} / {key[1]}", xlabel="median ms per step")
        ax.tick_params(axis="y", labelsize=7)
    paths.append(_save(fig, axes, out_dir / "time.png"))
    return paths
