"""``docjepa benchmark real``: a benchmark of real typeset pages, its questions checked by a person.

Three steps, each a sub-command:

``propose``
    Imports the benchmark's PDFs with the structural rules (:mod:`docjepa.data.structure`), draws up to
    ``--per-kind`` candidate questions of each kind (spread over documents) into a questions file with
    ``"verified": null``, and draws each candidate's answer on its page into contact sheets for checking by eye.
``verify``
    Records the verdicts: ``--good`` / ``--bad`` question ids (a person looked at the sheets).
``run``
    Imports the documents the file names (checking their SHA-256), keeps the verified questions only, and scores
    each model and the OCR-matching baseline per question kind, with a reliability diagram of each model's
    predicted IoU and a grid of overlays; writes ``real.json``, ``reliability.png``, ``overlays.png`` and, with
    ``--markdown``, a table into the marked section of a doc.

The questions file (packaged as ``docjepa/apps/questions/real.json``, named ``real``) holds boxes in page
pixels at its ``dpi``, the documents' digests and the Debian packages they come from, so the benchmark is the same on
every machine.
"""

from __future__ import annotations

import json
import logging
import random
from collections import defaultdict
from importlib import resources
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from ..core.errors import UsageError
from ..data.importer import ImportSummary, PageOutOfRange, file_digest, find_inputs, import_pdf
from ..data.record import Answer, Page, Question, box_polygon
from ..data.shards import ShardWriter
from ..data.structure import KINDS

log = logging.getLogger("docjepa.real")
FORMAT = "docjepa-real-benchmark/1"
COLOURS = {"truth": (40, 170, 60), "model": (230, 40, 40), "baseline": (40, 90, 230)}


PACKAGED = "real"
"""The name of the benchmark that ships with docjepa (``docjepa/apps/questions/real.json``)."""


def questions_file(path: Path | str = PACKAGED) -> Path:
    """A questions file on disk, else the packaged benchmark for ``real`` (or the path earlier docs gave it,
    ``benchmarks/real/questions.json``), found from any working directory."""
    if Path(path).is_file():
        return Path(path)
    if str(path) in (PACKAGED, "benchmarks/real/questions.json"):
        return Path(str(resources.files("docjepa.apps") / "questions" / "real.json"))
    raise UsageError(f"no questions file at {path} (the packaged benchmark is named {PACKAGED!r})")


def load(path: Path | str) -> dict:
    """A questions file (or the packaged benchmark, see :func:`questions_file`), checked."""
    path = questions_file(path)
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{path}: {err}") from None
    if not isinstance(spec, dict) or spec.get("format") != FORMAT:
        raise UsageError(f"{path} is not a real-page benchmark file (format {FORMAT})")
    for q in spec["questions"]:
        if q["doc_id"] not in spec["documents"]:
            raise UsageError(f"{path}: question {q['id']} names an unknown document {q['doc_id']!r}")
    return spec


def benchmark_digests(path: Path) -> set[str]:
    """SHA-256 digests of a benchmark file's documents (``docjepa import --exclude``), or of a text file listing one
    digest per line."""
    path = questions_file(path)
    text = path.read_text()
    if text.lstrip().startswith("{"):
        return {d["sha256"] for d in load(path)["documents"].values()}
    return {line.strip() for line in text.splitlines() if line.strip()}


def _boxes(answer: Answer) -> list[list[float]]:
    out = []
    for r in answer.regions:
        xs, ys = r[0::2], r[1::2]
        out.append([round(min(xs), 1), round(min(ys), 1), round(max(xs), 1), round(max(ys), 1)])
    return out


def propose(root: Path, out: Path, dpi: int = 72, per_kind: int = 20, seed: int = 0, packages: list[str] = ()) -> dict:
    """Candidate questions from the PDFs under ``root`` → ``out/questions.json`` and contact sheets
    ``out/sheet-NN.png`` (each candidate: its page, the answer boxes in green, the question and id)."""
    from tqdm.auto import tqdm

    inputs = [(p, d) for p, d in find_inputs([root]) if p.suffix.lower() == ".pdf"]
    if not inputs:
        raise UsageError(f"no PDF under {root}")
    by_kind: dict[str, list] = defaultdict(list)
    documents = {}
    pages: dict[tuple[str, int], Page] = {}
    for path, doc_id in tqdm(inputs, desc="read PDFs"):
        try:
            found = import_pdf(path, dpi, ImportSummary(), "eng", doc_id, structure=True, max_pages=None)
        except Exception as err:
            log.warning("skipped %s: %s", path, err)
            continue
        documents[doc_id] = {"sha256": file_digest(path)}
        for page in found:
            for q in page.questions:
                by_kind[q.kind].append((doc_id, page.page, q))
                pages[(doc_id, page.page)] = page
    rng = random.Random(seed)
    chosen = []
    for kind in KINDS:
        items = by_kind.get(kind, [])
        docs: dict[str, list] = defaultdict(list)
        for it in items:
            docs[it[0]].append(it)
        order = sorted(docs)
        rng.shuffle(order)
        picked = []
        while len(picked) < per_kind and any(docs[d] for d in order):  # one per document in turn
            for d in order:
                if docs[d] and len(picked) < per_kind:
                    picked.append(docs[d].pop(rng.randrange(len(docs[d]))))
        chosen += picked
    questions = []
    for k, (doc_id, page, q) in enumerate(chosen):
        questions.append(
            {
                "id": f"q{k:04d}",
                "doc_id": doc_id,
                "page": page,
                "kind": q.kind,
                "question": q.text,
                "answers": [_boxes(a) for a in q.answers],
                "text": q.answers[0].text,
                "verified": None,
            }
        )
    used = {q["doc_id"] for q in questions}
    spec = {
        "format": FORMAT,
        "dpi": dpi,
        "packages": list(packages),
        "documents": {d: documents[d] for d in sorted(used)},
        "questions": questions,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "questions.json").write_text(json.dumps(spec, indent=1, ensure_ascii=False) + "\n")
    contact_sheets(spec, pages, out)
    return spec


def contact_sheets(spec: dict, pages: dict, out: Path, per_sheet: int = 10) -> list[Path]:
    """Each question on its page for checking by eye, ``per_sheet`` to a PNG: the page (answer boxes in green)
    beside a close-up of the answer with its surroundings, under the question and its id."""
    tw, th = 940, 420
    tiles = []
    for q in spec["questions"]:
        page = pages[(q["doc_id"], q["page"])]
        img = page.pil().copy()
        draw = ImageDraw.Draw(img)
        boxes = [b for answer in q["answers"] for b in answer]
        for b in boxes:
            draw.rectangle(b, outline=COLOURS["truth"], width=2)
        x0, y0 = min(b[0] for b in boxes), min(b[1] for b in boxes)
        x1, y1 = max(b[2] for b in boxes), max(b[3] for b in boxes)
        cx0, cy0 = max(0, x0 - 160), max(0, y0 - 60)
        crop = img.crop((cx0, cy0, min(img.width, max(x1 + 160, cx0 + 200)), min(img.height, max(y1 + 60, cy0 + 80))))
        crop.thumbnail((640, 370))
        if crop.width < 320:  # small answers: enlarge the close-up
            f = min(640 / crop.width, 370 / crop.height, 3.0)
            crop = crop.resize((int(crop.width * f), int(crop.height * f)))
        small = img.copy()
        small.thumbnail((280, 370))
        tile = Image.new("RGB", (tw, th), "white")
        tile.paste(small, (5, 44))
        tile.paste(crop, (295, 44))
        d = ImageDraw.Draw(tile)
        d.text((4, 4), f"{q['id']} [{q['kind']}] {q['doc_id'][-60:]} p{q['page'] + 1}", fill="black")
        d.text((4, 22), q["question"][:110], fill="black")
        d.rectangle((0, 0, tw - 1, th - 1), outline=(180, 180, 180))
        tiles.append(tile)
    paths = []
    for s in range(0, len(tiles), per_sheet):
        group = tiles[s : s + per_sheet]
        sheet = Image.new("RGB", (2 * tw, -(-len(group) // 2) * th), "white")
        for i, t in enumerate(group):
            sheet.paste(t, ((i % 2) * tw, (i // 2) * th))
        paths.append(out / f"sheet-{s // per_sheet:02d}.png")
        sheet.save(paths[-1])
    return paths


def verify(path: Path, good: list[str], bad: list[str], note: str = "") -> dict:
    """Record verdicts in a questions file: ``good`` ids become ``verified: true``, ``bad`` ones ``false``."""
    path = questions_file(path)
    spec = load(path)
    ids = {q["id"]: q for q in spec["questions"]}
    unknown = [i for i in [*good, *bad] if i not in ids]
    if unknown:
        raise UsageError(f"unknown question ids: {', '.join(unknown[:5])}")
    if set(good) & set(bad):
        raise UsageError(f"ids both good and bad: {', '.join(sorted(set(good) & set(bad))[:5])}")
    for i in good:
        ids[i]["verified"] = True
    for i in bad:
        ids[i]["verified"] = False
        if note:
            ids[i]["note"] = note
    Path(path).write_text(json.dumps(spec, indent=1, ensure_ascii=False) + "\n")
    return counts(spec)


def counts(spec: dict) -> dict:
    out: dict = {"verified": 0, "rejected": 0, "unchecked": 0, "per_kind": {}}
    for q in spec["questions"]:
        key = {True: "verified", False: "rejected", None: "unchecked"}[q.get("verified")]
        out[key] += 1
        if key == "verified":
            out["per_kind"][q["kind"]] = out["per_kind"].get(q["kind"], 0) + 1
    return out


def build(spec: dict, root: Path, out: Path) -> dict:
    """Shards of the benchmark: each document under ``root`` (by its id, checked by SHA-256) imported at the file's
    dpi, the pages with verified questions kept, those questions attached. Missing or changed files are reported
    and their questions left out."""
    wanted: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for q in spec["questions"]:
        if q.get("verified") is True:
            wanted[q["doc_id"]][q["page"]].append(q)
    if not wanted:
        raise UsageError("the questions file has no verified question (run propose, look, then verify)")
    problems, n = [], 0
    with ShardWriter(out, 256) as writer:
        for doc_id in sorted(wanted):
            path = Path(root) / doc_id
            if not path.is_file():
                problems.append(f"{doc_id}: not under {root}")
                continue
            if file_digest(path) != spec["documents"][doc_id]["sha256"]:
                problems.append(f"{doc_id}: SHA-256 differs from the benchmark's (another version of the file?)")
                continue
            keep = []
            for i in sorted(wanted[doc_id]):  # only the pages asked about are rendered and read
                try:
                    (page,) = import_pdf(path, spec["dpi"], ImportSummary(), "eng", doc_id, only=i)
                except PageOutOfRange as err:
                    problems.append(f"{doc_id}: {err}")
                    continue
                for q in wanted[doc_id][i]:
                    answers = [Answer([box_polygon(tuple(b)) for b in boxes], q["text"]) for boxes in q["answers"]]
                    page.questions.append(Question(q["question"], q["kind"], answers, template=q["id"]))
                    n += 1
                keep.append(page)
            writer.add_document(keep)
    for p in problems:
        log.warning("%s", p)
    return {"questions": n, "documents": len(wanted), "problems": problems}


MARKDOWN_START, MARKDOWN_END = "<!-- real-bench:start -->", "<!-- real-bench:end -->"
SUMMARY_START, SUMMARY_END = "<!-- real-summary:start -->", "<!-- real-summary:end -->"


def run(
    spec_path: Path,
    root: Path,
    models: list[tuple[str, Path | None]],
    out: Path,
    progress: bool = True,
    examples_per_kind: int = 2,
) -> dict:
    """Score each model (name, checkpoint; None: the shipped model) and the OCR baseline on the verified
    questions; write ``real.json``, ``reliability.png`` and ``overlays.png`` (the last model's answers) in ``out``."""
    from ..data.split import SplitConfig
    from ..eval.evaluate import evaluate
    from ..inference.calibration import plot_reliability, reliability
    from ..inference.predictor import DocumentPredictor

    if not models:
        raise UsageError("give at least one model (--model NAME=CHECKPOINT)")
    spec = load(spec_path)
    out.mkdir(parents=True, exist_ok=True)
    pages = out / "pages"
    if pages.exists():
        import shutil

        shutil.rmtree(pages)
    built = build(spec, root, pages)
    result: dict = {
        "benchmark": {"file": str(spec_path), "dpi": spec["dpi"], **counts(spec), **built},
        "models": {},
    }
    curves: dict[str, dict] = {"IoU head as predicted": {}, "after calibration": {}}
    examples: list = []
    for name, checkpoint in models:
        predictor = DocumentPredictor.from_pretrained(checkpoint)
        res = evaluate(
            predictor, [pages], SplitConfig([], 0), part="all", progress=progress, keep_rows=True, keep_examples=10**6
        )
        rows, examples = res.pop("rows"), res.pop("examples")
        scores, ious = [r["score"] for r in rows], [r["iou"] for r in rows]
        entry = {
            "checkpoint": str(checkpoint) if checkpoint is not None else "shipped",
            **res["model"],
            "reliability": reliability(scores, ious),
        }
        curves["IoU head as predicted"][name] = entry["reliability"]
        if predictor.policy.calibration is not None:
            cal = predictor.policy.calibration(np.asarray(scores))
            entry["calibrated"] = reliability(cal, ious)
            entry["calibrated"]["fitted_on"] = predictor.policy.calibration.fitted_on
            known = cal >= predictor.policy.calibration.threshold
            entry["known"] = {
                "threshold": predictor.policy.calibration.threshold,
                "fraction": float(known.mean()),
                "iou_known": float(np.mean(np.asarray(ious)[known])) if known.any() else None,
                "iou_unknown": float(np.mean(np.asarray(ious)[~known])) if (~known).any() else None,
            }
            curves["after calibration"][name] = entry["calibrated"]
        entry["questions"] = [{"id": r.pop("template"), **r} for r in rows]
        result["models"][name] = entry
        result["baseline"] = res["baseline"]
        result["questions"] = res["questions"]
    plot_reliability({k: v for k, v in curves.items() if v}, out / "reliability.png")
    overlay_grid(examples, out / "overlays.png", examples_per_kind, models[-1][0])
    (out / "real.json").write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


def overlay_grid(examples: list[dict], path: Path, per_kind: int, name: str) -> Path:
    """``per_kind`` questions of each kind (the first ones): the page with the true answer (green), the model's
    answer (red fill) and the baseline's (blue outline), the question above, IoUs below."""
    from ..eval.scores import best_answer

    chosen: dict[str, list] = defaultdict(list)
    for ex in examples:
        if len(chosen[ex["kind"]]) < per_kind:
            chosen[ex["kind"]].append(ex)
    tiles = []
    for kind in [k for k in KINDS if k in chosen] + [k for k in chosen if k not in KINDS]:
        for ex in chosen[kind]:
            page, frame = ex["page"], ex["frame"]
            h, w = max(1, round(page.height * frame)), max(1, round(page.width * frame))
            base = np.asarray(page.pil(), dtype=np.float32).copy()

            truth, pred, bmask = (_to_page(ex[k], h, w, page) for k in ("truth", "pred", "baseline"))
            base[pred] = 0.5 * base[pred] + 0.5 * np.array(COLOURS["model"], dtype=np.float32)
            img = Image.fromarray(base.astype(np.uint8))
            draw = ImageDraw.Draw(img)
            for mask, colour in ((truth, COLOURS["truth"]), (bmask, COLOURS["baseline"])):
                ys, xs = np.nonzero(mask)
                if len(xs):
                    draw.rectangle((xs.min(), ys.min(), xs.max(), ys.max()), outline=colour, width=3)
            img.thumbnail((420, 540))
            tile = Image.new("RGB", (430, 600), "white")
            tile.paste(img, (5, 40))
            d = ImageDraw.Draw(tile)
            iou_m = _iou(*best_answer(ex["pred"], [ex["truth"]]))
            iou_b = _iou(*best_answer(ex["baseline"], [ex["truth"]]))
            d.text((4, 4), f"[{kind}] {ex['question']}"[:70], fill="black")
            d.text((4, 20), f"{name} IoU {iou_m:.2f} (red)   baseline {iou_b:.2f} (blue)   truth: green", fill="black")
            tiles.append(tile)
    cols = 5
    sheet = Image.new("RGB", (cols * 430, max(1, -(-len(tiles) // cols)) * 600), "white")
    for i, t in enumerate(tiles):
        sheet.paste(t, ((i % cols) * 430, (i // cols) * 600))
    sheet.save(path)
    return path


def _to_page(mask: np.ndarray, h: int, w: int, page: Page) -> np.ndarray:
    """A square-frame mask (the page in its top-left ``h`` × ``w``) at the page's resolution."""
    img = Image.fromarray(mask[:h, :w].astype(np.uint8) * 255).resize((page.width, page.height))
    return np.asarray(img) > 127


def _iou(inter: int, union: int) -> float:
    return inter / union if union else 1.0


def markdown(result: dict, command: str = "") -> str:
    """Per-kind gIoU of the baseline and each model, overall mIoU / gIoU / cIoU, and calibration figures."""
    names = list(result["models"])
    kinds = [k for k in KINDS if k in result["baseline"]["per_type"]]
    head = ["kind", "n", "baseline", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in kinds:
        cells = [k, str(result["baseline"]["per_type"][k]["n"]), f"{result['baseline']['per_type'][k]['gIoU']:.3f}"]
        cells += [f"{result['models'][n]['per_type'][k]['gIoU']:.3f}" for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    for metric in ("mIoU", "gIoU", "cIoU"):
        cells = [f"**{metric}**", str(result["questions"]), f"{result['baseline'][metric]:.3f}"]
        cells += [f"{result['models'][n][metric]:.3f}" for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    cal = [
        "",
        "| model | ECE of the IoU head (raw) | mean gap (raw) | ECE calibrated | known (≥ threshold) "
        "| IoU known / unknown |",
        "|---|---|---|---|---|---|",
    ]
    for n in names:
        m = result["models"][n]
        raw = m["reliability"]
        c = m.get("calibrated")
        k = m.get("known")
        cal.append(
            f"| {n} | {raw['ece']:.3f} | {raw['gap']:+.3f} | {c['ece']:.3f} | {k['fraction']:.0%} | "
            f"{_fmt(k['iou_known'])} / {_fmt(k['iou_unknown'])} |"
            if c
            else f"| {n} | {raw['ece']:.3f} | {raw['gap']:+.3f} | – | – | – |"
        )
    b = result["benchmark"]
    note = (
        f"Generated by `{command}`. " if command else ""
    ) + f"{result['questions']} hand-verified questions on {b['documents']} documents (gIoU per kind)."
    return note + "\n\n" + "\n".join(lines + cal) + "\n"


def summary(result: dict, command: str = "") -> str:
    """One row per model (and the baseline): mIoU, gIoU, cIoU, kinds where it beats the baseline, ECE before and
    after calibration; for the README."""
    base = result["baseline"]
    kinds = list(base["per_type"])
    lines = [
        "| real-page benchmark | mIoU | gIoU | cIoU | kinds above baseline | ECE raw → calibrated |",
        "|---|---|---|---|---|---|",
        f"| OCR-matching baseline | {base['mIoU']:.3f} | {base['gIoU']:.3f} | {base['cIoU']:.3f} | – | – |",
    ]
    for name, m in result["models"].items():
        above = sum(m["per_type"][k]["gIoU"] > base["per_type"][k]["gIoU"] for k in kinds)
        cal = f"{m['reliability']['ece']:.3f} → {m['calibrated']['ece']:.3f}" if "calibrated" in m else "–"
        lines.append(
            f"| {name} | {m['mIoU']:.3f} | {m['gIoU']:.3f} | {m['cIoU']:.3f} | {above} of {len(kinds)} | {cal} |"
        )
    note = f"Generated by `{command}`. " if command else ""
    note += f"{result['questions']} hand-verified questions, {len(kinds)} kinds; per kind in docs/docjepa-real.md."
    return note + "\n\n" + "\n".join(lines) + "\n"


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def report(real_json: Path, targets: list[Path], command: str = "", summaries: list[Path] = ()) -> str:
    """The markdown of a ``real.json`` into the ``real-bench`` section of each target file, and its one-row-per-model
    summary into the ``real-summary`` section of each of ``summaries``."""
    from docsections import fill_section

    result = json.loads(Path(real_json).read_text())
    text = markdown(result, command)
    for t in targets:
        fill_section(Path(t), MARKDOWN_START, MARKDOWN_END, text)
    for t in summaries:
        fill_section(Path(t), SUMMARY_START, SUMMARY_END, summary(result, command))
    return text
