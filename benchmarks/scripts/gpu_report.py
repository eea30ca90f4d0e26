"""``gpu.py merge`` (a later run's JSON into a device's
folder) and ``gpu.py report`` (docs/gpu.md from the GPU JSON).

The report reads every ``benchmarks/results/gpu/<device>/`` folder (a dry run's folder, ``cpu-dry-run``, is never
reported) and fills the ``gpu`` section of docs/gpu.md: per device, the memory table, the loss table with its
plot (``docs/images/gpu/<device>-lm.png``), the optimizer step alone (``gpu_step.py``) and the Document-JEPA
tables. With no folder, the section says so.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from docsections import fill_section

START, END = "<!-- gpu:start -->", "<!-- gpu:end -->"
GALORE_7B_GB = 22.0
SCALE_1B_GB = 2.81


def merge(run: Path, into: Path) -> list[str]:
    """A later run on the same kind of device (``run``: its ``--out``) folded into ``into``, the device's results.

    Memory rows replace the rows of the same shape and optimizer (a skipped row is filled) and keep their own number
    of timed steps; every other part's JSON replaces the earlier one whole, so each table comes from one run. The
    later run's command is appended to ``summary.json``'s ``followup`` and each part it ran points there. Returns
    the files written."""
    from gpu_common import write_json
    from gpu_memory import ARMS

    read = lambda path: json.loads(path.read_text())  # noqa: E731
    new_summary, summary = read(run / "summary.json"), read(into / "summary.json")
    device, ours = new_summary["environment"]["device"], summary["environment"]["device"]
    if device != ours:
        raise SystemExit(f"gpu.py merge: {run} ran on {device}, {into} holds {ours}")
    written = []
    for name in new_summary["parts"]:
        src = run / f"{name}.json"
        if not src.is_file():
            continue
        data = read(src)
        if name == "memory" and (into / src.name).is_file():
            old = read(into / src.name)
            steps = lambda d: d["protocol"]["timed_steps"]  # noqa: E731
            rows = {(r["shape"], r["optimizer"]): {"timed_steps": steps(old), **r} for r in old["rows"]}
            rows |= {(r["shape"], r["optimizer"]): {"timed_steps": steps(data), **r} for r in data["rows"]}
            order = {label: i for i, label in enumerate(label for label, *_ in ARMS)}
            shapes = {**old["protocol"]["shapes"], **data["protocol"]["shapes"]}
            old["rows"] = sorted(
                rows.values(), key=lambda r: (list(shapes).index(r["shape"]), order.get(r["optimizer"], len(order)))
            )
            old["protocol"] = {**old["protocol"], "shapes": shapes, "timed_steps": "per row"}
            data = old
        write_json(into / src.name, data)
        written.append(str(into / src.name))
    follow = summary.get("followup") or []
    follow = [follow] if isinstance(follow, dict) else follow
    follow.append({k: new_summary[k] for k in ("command", "parts", "wall_s", "environment") if k in new_summary})
    summary["followup"] = follow
    for name in new_summary["parts"]:
        summary["parts"].setdefault(name, {})["rerun"] = f"followup[{len(follow) - 1}]"
    write_json(into / "summary.json", summary)
    return [*written, str(into / "summary.json")]


def gb(n: float | None) -> str:
    return "–" if n is None else f"{n / 1e9:.2f}"


def memory_table(data: dict) -> list[str]:
    p = data["protocol"]
    steps = p["timed_steps"]
    lines = [
        f"Memory and step time, whole models with bf16 weights, one micro-batch of {p['batch']} × {p['seq']} "
        f"tokens, median of {'the timed steps in the last column' if steps == 'per row' else f'{steps} steps'} "
        f"after {p['warmup_steps']} warm-up steps. GB = 10⁹ bytes (as GaLore and SCALE report). With "
        "`per_layer=True` each layer's update runs inside the backward pass, so its optimizer step is in fwd+bwd.",
        "",
        "| model | optimizer | peak GB | weights | gradients | optimizer state | rest (activations, temporaries) "
        "| weights + state | optimizer step ms | fwd+bwd ms | timed steps |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        head = f"| {r['shape']} | {r['optimizer']} |"
        if "peak_bytes" not in r:
            what = "skipped (budget)" if r.get("skipped") else "out of memory" if r.get("oom") else "error"
            lines.append(f"{head} {what} | | | | | | | | |")
            continue
        lines.append(
            f"{head} {gb(r['peak_bytes'])} | {gb(r['weights_bytes'])} | {gb(r['grads_bytes'])} | "
            f"{gb(r['state_bytes'])} | {gb(r['rest_bytes'])} | {gb(r['model_plus_state_bytes'])} | "
            f"{1000 * r['opt_step_median_s']:.1f} | {1000 * r['fwd_bwd_median_s']:.1f} | "
            f"{r.get('timed_steps', steps)} |"
        )
    by = {(r["shape"], r["optimizer"]): r for r in data["rows"] if "peak_bytes" in r}
    seven = by.get(("llama-7b", "rsngd per_layer"))
    one = [r for (s, _), r in by.items() if s == "llama-1b" and r["optimizer"].startswith("rsngd")]
    lines.append("")
    if seven:
        verdict = "under" if seven["peak_bytes"] / 1e9 < GALORE_7B_GB else "over"
        lines.append(
            f"- LLaMA-7B with per-layer RS-SNGD peaks at {gb(seven['peak_bytes'])} GB, {verdict} GaLore's "
            f"{GALORE_7B_GB:.0f} GB."
        )
    for shape in ("llama-1b", "llama-7b"):
        mu = by.get((shape, "muon"))
        for label in ("rsngd", "rsngd-momentum", "rsngd cache_factors"):
            rs = by.get((shape, label))
            if rs and mu:
                lines.append(
                    f"- {shape}: the `{label}` optimizer step takes "
                    f"{rs['opt_step_median_s'] / mu['opt_step_median_s']:.2f} × Muon's; peak {gb(rs['peak_bytes'])} "
                    f"GB against Muon's {gb(mu['peak_bytes'])} GB, temporaries (the rest column) {gb(rs['rest_bytes'])}"
                    f" GB against {gb(mu['rest_bytes'])} GB."
                )
    if one:
        best = min(one, key=lambda r: r["model_plus_state_bytes"])
        verdict = "below" if best["model_plus_state_bytes"] / 1e9 < SCALE_1B_GB else "above"
        lines.append(
            f"- LLaMA-1B weights + optimizer state: {gb(best['model_plus_state_bytes'])} GB with "
            f"`{best['optimizer']}`, {verdict} SCALE's {SCALE_1B_GB} GB."
        )
    return lines


def step_table(data: dict) -> list[str]:
    """The optimizer step alone (``gpu_step.py``): each arm's median at both shapes against Muon's, where RS-SNGD's
    7B step goes, and the factor draw's parts."""
    rows = {(r["shape"], r["optimizer"]): r for r in data["rows"]}
    shapes = [s for s in ("llama-1b", "llama-7b") if any(k[0] == s for k in rows)]
    p = data["protocol"]
    lines = [
        f"The optimizer step alone (`benchmarks/scripts/gpu_step.py`: the whole model's parameters with random bf16 "
        f"gradients, median of {p['timed_steps']} steps after {p['warmup_steps']} warm-up steps). Normals: the "
        "factors' random normals eagerly or in one compiled kernel (`rsngd.fused`); orthonormalisation: float32 "
        "Cholesky QR (a float64 factorisation and a triangular solve per matrix) or with bfloat16 matmuls "
        "(`orthonormalize_narrow`).",
        "",
        "| optimizer | normals | orthonormalisation | " + " | ".join(f"{s} ms | × Muon" for s in shapes) + " |",
        "|---|---|---|" + "---|---|" * len(shapes),
    ]
    for label in dict.fromkeys(k[1] for k in rows):
        first = next(rows[(s, label)] for s in shapes if (s, label) in rows)
        sw = first.get("switches", {})
        name = label + (" (momentum compiled)" if sw.get("momentum") and "momentum" in label else "")
        forms = (
            ["–", "–"]
            if label == "muon"
            else [
                "compiled" if sw.get("normals") else "eager",
                "bfloat16 matmuls" if sw.get("NARROW") else "float32 Cholesky QR",
            ]
        )
        cells = []
        for s in shapes:
            r, mu = rows.get((s, label)), rows.get((s, "muon"))
            cells += (
                ["–", "–"]
                if r is None
                else [
                    f"{r['opt_step_median_ms']:.1f}",
                    f"{r['opt_step_median_ms'] / mu['opt_step_median_ms']:.2f}" if mu else "–",
                ]
            )
        lines.append(f"| {name} | {forms[0]} | {forms[1]} | " + " | ".join(cells) + " |")
    lines.append("")
    if any(r.get("switches", {}).get("momentum") and "momentum" in r["optimizer"] for r in data["rows"]):
        lines.append(
            "- Rows marked (momentum compiled) stepped the residual's quantised momentum in one compiled kernel, a "
            "form the package does not keep: it measured no faster than the eager one (the `eager momentum` row). "
            "The memory table's `rsngd-momentum` rows of the same run (3 timed steps) ran it too."
        )
    for s in shapes:
        r = rows.get((s, "rsngd"))
        if r and "phases" in r:
            parts = ", ".join(f"{k} {v:.0f} ms" for k, v in r["phases"]["parts_ms"].items())
            whole = r["phases"]["step_ms"]
            lines.append(f"- {s}, `rsngd`, one step with each part synchronised ({whole:.0f} ms): {parts}.")
    draws = data.get("draw_parts", {})
    if draws:
        lines += [
            "",
            "The factor draw alone, all of a model's matrices of one shape at once (both modes), ms: the normals eager "
            "and compiled; one Cholesky QR pass in float32 and with bfloat16 matmuls; and the largest distance of "
            "QᵀQ from the identity, float32 factors rounded to bfloat16 against the bfloat16-matmul ones.",
            "",
            "| model | matrix | matrices | rank | normals eager | compiled | float32 QR | bfloat16 matmuls | "
            "‖QᵀQ − I‖ float32 | bfloat16 |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s, parts in draws.items():
            for d in parts:
                lines.append(
                    f"| {s} | {d['shape'][0]} × {d['shape'][1]} | {d['matrices']} | {d['rank']} | "
                    f"{d['normals_eager_ms']:.1f} | {d['normals_compiled_ms']:.1f} | "
                    f"{d['orthonormalise_float32_ms']:.1f} | {d['orthonormalise_narrow_ms']:.1f} | "
                    f"{d['orthonormality_float32_rounded']:.1e} | {d['orthonormality_narrow']:.1e} |"
                )
    return lines + kernel_check_table(data)


def kernel_check_table(data: dict) -> list[str]:
    """The momentum kernel's check in ``gpu_step.py`` (``momentum_kernel``), per shape where it ran."""
    checks = {s: c for s, c in data.get("momentum_kernel", {}).items() if c.get("ran")}
    if not checks:
        return []
    lines = [
        "",
        "The 8-bit residual momentum's Triton kernel (`rsngd.kernels`, the `kernel` rows) on one random MLP-shaped "
        "bf16 residual: its time and the eager step's, and how far its codes and direction are from a float64 "
        "reference of the same step.",
        "",
        "| model | matrix | kernel ms | eager ms | codes equal | largest code gap | direction rel. error |",
        "|---|---|---|---|---|---|---|",
    ]
    for s, c in checks.items():
        lines.append(
            f"| {s} | {c['matrix'][0]} × {c['matrix'][1]} | {c['kernel_ms']:.2f} | {c['eager_ms']:.2f} | "
            f"{100 * c['codes_equal_share']:.2f} % | {c['codes_max_gap']} | {c['direction_max_rel']:.1e} |"
        )
    return lines


def train_seconds(run: dict) -> list[float]:
    """The cumulative training time after each step (forward, backward and optimizer step; evaluations left out)."""
    total, out = 0.0, []
    for fwd, opt in zip(run.get("fwd_bwd_curve_s", []), run.get("optimizer_step_curve_s", [])):
        total += fwd + opt
        out.append(total)
    return out


def loss_at(run: dict, seconds: float) -> float | None:
    """The validation loss at ``seconds`` of training, linear between evaluations (None before the first)."""
    times = train_seconds(run)
    points = [(times[s - 1], v) for s, v in run.get("val_curve", []) if s - 1 < len(times)]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t0 <= seconds <= t1:
            return v0 + (v1 - v0) * (seconds - t0) / max(t1 - t0, 1e-12)
    return points[-1][1] if points and abs(points[-1][0] - seconds) < 1e-9 else None


def lm_table(data: dict, plot: str | None) -> list[str]:
    p = data["protocol"]
    if "skipped" in data:
        return [f"Loss at llama-60m: skipped ({data['skipped']})."]
    runs = [r for r in data["runs"] if "final_val_loss" in r]
    timed = [train_seconds(r)[-1] for r in runs if train_seconds(r)]
    equal = min(timed) if len(timed) == len(runs) and runs else None
    lines = [
        f"Loss at llama-60m ({p['data']}, {p.get('steps')} steps of {p['batch']} × {p['seq']} tokens, seed "
        f"{p['seed']}, the `{p['settings']}` settings; one seed, so differences under about 0.02 are noise). Equal "
        "tokens: the val loss column; equal wall-clock: the loss each reached after the training time of the "
        "fastest run (evaluations left out), interpolated between evaluations.",
        "",
        "| optimizer | val loss | train s | val loss at equal time | state MiB | peak GB | tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        if "final_val_loss" not in r:
            lines.append(f"| {r['optimizer']} | skipped ({r.get('skipped')}) | | | | | |")
            continue
        seconds = train_seconds(r)
        at = loss_at(r, equal) if equal is not None else None
        lines.append(
            f"| {r['optimizer']} | {r['final_val_loss']:.3f} | {f'{seconds[-1]:.1f}' if seconds else '–'} | "
            f"{'–' if at is None else f'{at:.3f} ({equal:.1f} s)'} | {r['optimizer_state_bytes'] / 2**20:.1f} | "
            f"{gb(r['peak_memory_bytes'])} | {r['tokens_per_s']:.0f} |"
        )
    if plot:
        lines += ["", f"![llama-60m loss curves, by step and by training time]({plot})"]
    return lines


def docjepa_tables(
    base: dict | None, train: dict | None, part: dict | None = None, real: dict | None = None
) -> list[str]:
    lines: list[str] = []
    if base:
        p = base["protocol"]
        lines += [
            f"Document-JEPA `{p['preset']}` preset at {p['image_size']}², batch {p['batch']}, on {p['pages']} "
            "generated pages:",
            "",
            "| stage | steps | s/step | pages/s | peak GB | loss, first → last quarter |",
            "|---|---|---|---|---|---|",
        ]
        for stage in ("pretrain", "finetune"):
            s = base.get(stage, {})
            if "skipped" in s:
                lines.append(f"| {stage} | skipped ({s['skipped']}) | | | | |")
            if "steps" in s:
                lines.append(
                    f"| {stage} | {s['steps']} | {s['median_step_s']:.3f} | {s['pages_per_s']:.1f} | "
                    f"{gb(s['peak_memory_bytes'])} | {s['loss_first_quarter']:.3f} → {s['loss_last_quarter']:.3f} |"
                )
        lines.append("")
    if train:
        plan = train.get("finetune_plan", {})
        held = train.get("heldout", {})
        score = (
            f"held-out synthetic mIoU {held['model']['mIoU']:.3f} (baseline {held['baseline']['mIoU']:.3f})"
            if held
            else "not scored there"
        )
        ckpt = train.get("checkpoint") or (part or {}).get("checkpoint") or {}
        status = (part or {}).get("status", "ok")
        done = f"{ckpt['step']} of them done ({status})" if ckpt.get("step") is not None else status
        recipe = (
            "The shipped model trained on as `finetune/business` trains it"
            + (" (with the real training pages)" if train.get("recipe", {}).get("real_train") else "")
            if train.get("recipe", {}).get("name") == "shipped"
            else "The demo recipe"
        )
        lines.append(
            f"{recipe}, {plan.get('steps', '?')} fine-tuning steps planned, {done} (question tower: "
            f"{train.get('question_tower', '?')}): {score}."
        )
    if real and "real" in real.get("sets", {}):
        r = real["sets"]["real"]
        lines += [
            "",
            f"Its checkpoint scored back on the CPU (`word_answers.py`, `docjepa-train-real.json`): real-page "
            f"benchmark mIoU {r['mask']['mIoU']:.3f} (baseline {r['baseline']['mIoU']:.3f}, {r['questions']} "
            f"questions), {'with' if train and train.get('recipe', {}).get('real_train') else 'without'} the "
            "demo's real training pages.",
        ]
    return lines


def plot_lm(data: dict, path: Path) -> bool:
    runs = [r for r in data.get("runs", []) if r.get("val_curve")]
    if not runs:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for r in runs:
        steps, losses = zip(*r["val_curve"])
        axes[0].plot(steps, losses, label=r["optimizer"])
        times = train_seconds(r)
        if times:
            axes[1].plot(
                [times[s - 1] for s in steps if s - 1 < len(times)], losses[: len(steps)], label=r["optimizer"]
            )
    axes[0].set_xlabel("step (equal tokens)")
    axes[1].set_xlabel("training time, s (equal wall-clock)")
    axes[0].set_ylabel("validation loss")
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def report(results: Path, doc: Path) -> str:
    """Fill docs/gpu.md's generated section from every device folder under ``results``; returns the section."""
    folders = sorted(d for d in results.glob("*") if d.is_dir() and d.name != "cpu-dry-run") if results.is_dir() else []
    lines: list[str] = []
    for d in folders:

        def read(name: str, d: Path = d) -> dict | None:
            f = d / f"{name}.json"
            return json.loads(f.read_text()) if f.is_file() else None

        summary = read("summary") or {}
        env = summary.get("environment", {})
        lines += [
            f"### {env.get('device', d.name)}",
            "",
            f"`{summary.get('command', 'gpu.py run')}`, torch {env.get('torch', '?')}; JSON in "
            f"`benchmarks/results/gpu/{d.name}/`.",
            "",
        ]
        follow = summary.get("followup") or []
        for run in [follow] if isinstance(follow, dict) else follow:  # one later run, or a list of them
            lines += [f"Then, on the same kind of device: `{run['command']}`.", ""]
        if (mem := read("memory")) is not None:
            lines += [*memory_table(mem), ""]
        if (step := read("step")) is not None:
            lines += [*step_table(step), ""]
        if (lm := read("lm")) is not None:
            image = doc.parent / "images" / "gpu" / f"{d.name}-lm.png"
            lines += [*lm_table(lm, f"images/gpu/{d.name}-lm.png" if plot_lm(lm, image) else None), ""]
        lines += docjepa_tables(
            read("docjepa-base"),
            read("docjepa-train"),
            summary.get("parts", {}).get("docjepa-train"),
            read("docjepa-train-real"),
        )
        lines.append("")  # a blank line before the next device's heading
    if not folders:
        lines = [
            "No GPU results are committed yet: every figure in these docs comes from 2 CPU cores. The command "
            "above is ready for the first GPU that is at hand."
        ]
    body = "\n".join(["Generated by `python benchmarks/scripts/gpu.py report`.", "", *lines])
    fill_section(doc, START, END, body)
    return body
