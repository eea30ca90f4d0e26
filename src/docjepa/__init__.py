"""Document-JEPA: a promptable document model (document image + OCR words + question → answer mask).

Layers, each a folder importing only from the ones before it: ``core`` (typed configs, expected errors) and
``data`` (page records, shards, importers, synthetic pages, tokenizer, collators, the question prompt, the page ↔
frame transform); ``modeling`` (encoders, pre-training heads, the segmentation model, saved-model lookup);
``train`` (the one ``Trainer`` and its tasks) and ``inference`` (the predictor: a page encoded once, questions
answered from it; the click rules; calibration); ``textenc`` (the text-encoder chain) and ``eval``; then
``apps`` (demo, predict, report, the real-page benchmark, the ``docjepa`` command in ``apps.cli``, and
``apps.engine``, the data engine: an annotation service where the model proposes answers, people correct them,
and rounds retrain it).
"""

__version__ = "0.1.0"

__all__ = ["DocumentPredictor", "__version__"]


def __getattr__(name: str):
    """``docjepa.DocumentPredictor``, imported when first asked for (``import docjepa`` stays light)."""
    if name == "DocumentPredictor":
        from .inference.predictor import DocumentPredictor

        return DocumentPredictor
    raise AttributeError(f"module 'docjepa' has no attribute {name!r}")
