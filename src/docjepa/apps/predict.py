"""``docjepa predict``: a question about an image or a PDF page → mask PNG, overlay PNG and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from ..core.errors import UsageError
from ..data.importer import OCRUnavailable, PageOutOfRange, read_file
from ..data.record import Page
from ..inference.answer_policy import trust
from ..inference.predictor import SNAP_AGREEMENT, DocumentPredictor, Prediction


def load_page(
    image: Path | None = None, pdf: Path | None = None, page: int = 1, dpi: int = 150, lang: str = "eng"
) -> Page:
    """One page with its words: a PDF's text layer (OCR when it has none) or OCR of an image."""
    path = pdf if pdf is not None else image
    if path is None:
        raise UsageError("give an image or a PDF")
    if not path.is_file():
        raise FileNotFoundError(f"no {'PDF' if pdf is not None else 'image'} at {path}")
    try:
        return read_file(path, dpi, lang, kind="pdf" if pdf is not None else "image", only=page - 1)[0]
    except (OCRUnavailable, PageOutOfRange):
        raise
    except Exception as err:  # corrupt, encrypted, not an image: the library's reason, on one line
        raise UsageError(f"cannot read {path}: {type(err).__name__}: {err}".strip()) from err


def overlay(page: Page, mask: np.ndarray, colour=(230, 40, 40), alpha: float = 0.45) -> Image.Image:
    """The page with the mask tinted over it."""
    base = np.asarray(page.pil(), dtype=np.float32)
    tint = np.array(colour, dtype=np.float32)
    out = base.copy()
    out[mask] = (1 - alpha) * base[mask] + alpha * tint
    return Image.fromarray(out.astype(np.uint8))


CANDIDATE_COLOURS = [(230, 40, 40), (240, 150, 0), (140, 60, 200)]


def _mask_box(mask: np.ndarray) -> list[int] | None:
    ys, xs = np.nonzero(mask)
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1] if len(xs) else None


def candidates_overlay(page: Page, pred: Prediction, question: str, answer: np.ndarray) -> Image.Image:
    """The page with the answer tinted (red) and the other candidates outlined (orange, purple), each labelled with
    its rank; above it a band with the question and, per candidate, the predicted IoU and (calibrated models) the IoU
    to expect, and whether the model knows the answer."""
    from PIL import ImageDraw

    img = overlay(page, answer, CANDIDATE_COLOURS[0])
    draw = ImageDraw.Draw(img)
    order = pred.ranked()
    lines = [f"Q: {question}"]
    for rank, i in enumerate(order):
        colour = CANDIDATE_COLOURS[rank % len(CANDIDATE_COLOURS)]
        box = _mask_box(answer if rank == 0 else pred.masks[i])
        if box and rank > 0:
            draw.rectangle(box, outline=colour, width=3)
        if box:
            draw.rectangle((box[0], max(0, box[1] - 14), box[0] + 14, max(14, box[1])), fill=colour)
            draw.text((box[0] + 4, max(0, box[1] - 13)), str(rank + 1), fill="white")
        score = float(pred.scores[i])
        text = f"{rank + 1}{' (answer)' if rank == 0 else ''}: predicted IoU {score:.2f}"
        if pred.confidence is not None:
            text += f", expected IoU {float(pred.confidence[i]):.2f}"
        lines.append(text if box else text + " (empty)")
    if pred.known is not None:
        lines.append("the model knows the answer" if pred.known else "NOT SURE: the model does not know the answer")
    band = 16 * len(lines) + 8
    out = Image.new("RGB", (img.width, img.height + band), "white")
    out.paste(img, (0, band))
    d = ImageDraw.Draw(out)
    for k, line in enumerate(lines):
        colour = CANDIDATE_COLOURS[(k - 1) % len(CANDIDATE_COLOURS)] if 0 < k <= len(order) else (0, 0, 0)
        d.text((6, 4 + 16 * k), line, fill=colour)
    return out


def write_prediction(
    page: Page,
    pred: Prediction,
    question: str,
    prefix: Path | None,
    all_masks: bool = False,
    prior_box: tuple[float, float, float, float] | None = None,
    model: str | None = None,
) -> dict:
    """The prediction's JSON (``model``: which model answered, recorded as given); with a ``prefix``, also
    PREFIX.mask.png, .overlay.png and .json (and each candidate's mask with ``all_masks``)."""
    best = pred.best
    mask = pred.answer if pred.answer is not None else pred.masks[best]
    files = {}
    if prefix is not None:
        prefix.parent.mkdir(parents=True, exist_ok=True)
        files = {"mask": f"{prefix}.mask.png", "overlay": f"{prefix}.overlay.png", "json": f"{prefix}.json"}
        Image.fromarray((mask * 255).astype(np.uint8)).save(files["mask"])
        candidates_overlay(page, pred, question, mask).save(files["overlay"])
    if all_masks and prefix is not None:
        for i, m in enumerate(pred.masks):
            files[f"mask{i}"] = f"{prefix}.mask{i}.png"
            Image.fromarray((m * 255).astype(np.uint8)).save(files[f"mask{i}"])
    ys, xs = np.nonzero(mask)
    confidence = trust(pred.expected_iou, float(pred.scores[best]))  # the answer's, as extract gives it
    scores = [float(v) for v in pred.scores]
    finite = all(np.isfinite(scores))
    result = {
        "answer": pred.text,  # the answer's words, in reading order ("" when it covers none)
        "confidence": None if confidence is None else round(confidence, 4),
        "known": pred.known,
        "question": question,
        "model": model,
        "source": page.source,
        "page": page.page + 1,
        "width": page.width,
        "height": page.height,
        "scores": [v if np.isfinite(v) else None for v in scores],
        "best": best,
        "answered": bool(mask.any()),  # False: every candidate covered the whole page (or none covered any of it)
        "snapped_to_words": pred.answer_box is not None,
        "mask_box": [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1] if len(xs) else None,
        "mask_pixels": int(mask.sum()),
        "words": [page.words[i].text for i in pred.words or []],
        "lexical_prior_box": [round(float(v), 1) for v in prior_box] if prior_box else None,
        "expected_iou": float(pred.confidence[best]) if pred.confidence is not None else None,
        "path": pred.path,  # "words": the answer is the word decoder's span; "mask": candidate ``best``, snapped
        "words_confidence": pred.words_confidence,
        "candidates": [
            {
                "rank": rank + 1,
                "index": int(i),
                "predicted_iou": float(pred.scores[i]) if np.isfinite(pred.scores[i]) else None,
                "expected_iou": float(pred.confidence[i]) if pred.confidence is not None else None,
                "box": _mask_box(mask if rank == 0 else pred.masks[i]),
            }
            for rank, i in enumerate(pred.ranked())
        ],
        "files": files,
    }
    if not finite:
        result["warning"] = "the model gave non-finite scores (null above): its weights hold NaN or Inf"
    if files:
        Path(files["json"]).write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


def predict_file(
    checkpoint: Path | None,
    question: str,
    out: Path | None,
    doc: Page,
    device: str | None = None,
    multimask: bool = False,
    snap: bool = True,
    answer_path: str = "auto",
) -> dict:
    """Run the model (``checkpoint``; None: the model shipped in the package) on a page (:func:`load_page` reads
    one from an image or a PDF); returns the JSON content, also written with PREFIX.mask.png and .overlay.png when
    ``out`` gives a prefix. ``snap``: the answer becomes the box of the OCR words under the
    chosen mask when they agree (the default); ``answer_path``: see ``DocumentPredictor``."""
    if not question.strip():
        raise UsageError("the question is empty")
    predictor = DocumentPredictor.from_pretrained(
        checkpoint, device=device, snap=SNAP_AGREEMENT if snap else None, answer_path=answer_path
    )
    predictor.set_page(doc)
    pred = predictor.predict(question)
    prefix = Path(out) if out is not None else None
    model = str(checkpoint) if checkpoint is not None else "shipped"
    return write_prediction(doc, pred, question, prefix, multimask, pred.lexical_box, model)
