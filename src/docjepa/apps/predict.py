"""``docjepa predict``: a question about an image or a PDF page → mask PNG, overlay PNG and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from ..data.importer import ImportSummary, OCRUnavailable, import_image, import_pdf
from ..data.record import Page
from ..errors import UsageError
from ..predictor import SNAP_AGREEMENT, DocumentPredictor, Prediction


def load_page(
    image: Path | None = None, pdf: Path | None = None, page: int = 1, dpi: int = 150, lang: str = "eng"
) -> Page:
    """One page with its words: a PDF's text layer (OCR when it has none) or OCR of an image."""
    summary = ImportSummary()
    path = pdf if pdf is not None else image
    if path is None:
        raise UsageError("give an image or a PDF")
    if not path.is_file():
        raise FileNotFoundError(f"no {'PDF' if pdf is not None else 'image'} at {path}")
    try:
        pages = import_pdf(path, dpi, summary, lang) if pdf is not None else import_image(path, summary, lang)
    except OCRUnavailable:
        raise
    except Exception as err:  # corrupt, encrypted, not an image: the library's reason, on one line
        raise UsageError(f"cannot read {path}: {type(err).__name__}: {err}".strip()) from err
    if not 1 <= page <= len(pages):
        raise ValueError(f"page {page} out of range: the file has {len(pages)} page(s)")
    return pages[page - 1]


def overlay(page: Page, mask: np.ndarray, colour=(230, 40, 40), alpha: float = 0.45) -> Image.Image:
    """The page with the mask tinted over it."""
    base = np.asarray(page.pil(), dtype=np.float32)
    tint = np.array(colour, dtype=np.float32)
    out = base.copy()
    out[mask] = (1 - alpha) * base[mask] + alpha * tint
    return Image.fromarray(out.astype(np.uint8))


def words_in(page: Page, mask: np.ndarray) -> list[str]:
    """OCR words whose centre lies inside the mask, in reading order."""
    h, w = mask.shape
    out = []
    for word in page.words:
        cx, cy = int((word.box[0] + word.box[2]) / 2), int((word.box[1] + word.box[3]) / 2)
        if 0 <= cx < w and 0 <= cy < h and mask[cy, cx]:
            out.append(word.text)
    return out


def write_prediction(
    page: Page,
    pred: Prediction,
    question: str,
    prefix: Path,
    all_masks: bool = False,
    prior_box: tuple[float, float, float, float] | None = None,
) -> dict:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    best = pred.best
    mask = pred.answer if pred.answer is not None else pred.masks[best]
    files = {"mask": f"{prefix}.mask.png", "overlay": f"{prefix}.overlay.png", "json": f"{prefix}.json"}
    Image.fromarray((mask * 255).astype(np.uint8)).save(files["mask"])
    overlay(page, mask).save(files["overlay"])
    if all_masks:
        for i, m in enumerate(pred.masks):
            files[f"mask{i}"] = f"{prefix}.mask{i}.png"
            Image.fromarray((m * 255).astype(np.uint8)).save(files[f"mask{i}"])
    ys, xs = np.nonzero(mask)
    scores = [float(v) for v in pred.scores]
    finite = all(np.isfinite(scores))
    result = {
        "question": question,
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
        "words": words_in(page, mask),
        "lexical_prior_box": [round(float(v), 1) for v in prior_box] if prior_box else None,
        "files": files,
    }
    if not finite:
        result["warning"] = "the model gave non-finite scores (null above): its weights hold NaN or Inf"
    Path(files["json"]).write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


def predict_file(
    checkpoint: Path,
    question: str,
    out: Path,
    image: Path | None = None,
    pdf: Path | None = None,
    page: int = 1,
    dpi: int = 150,
    lang: str = "eng",
    device: str | None = None,
    multimask: bool = False,
    snap: bool = True,
) -> dict:
    """Load the page, run the model, write PREFIX.mask.png / .overlay.png / .json; returns the JSON content.
    ``snap``: the answer becomes the box of the OCR words under the chosen mask when they agree (the default)."""
    if not question.strip():
        raise UsageError("the question is empty")
    doc = load_page(image, pdf, page, dpi, lang)
    predictor = DocumentPredictor.from_pretrained(checkpoint, device=device, snap=SNAP_AGREEMENT if snap else None)
    predictor.set_page(doc)
    pred = predictor.predict(question)
    return write_prediction(doc, pred, question, Path(out), multimask, pred.lexical_box)
