"""Document-JEPA: a promptable document model (document image + OCR words + question → answer mask).

Layers, each importing only from the ones before it: ``config`` and ``data`` (page records, shards, importers,
synthetic pages, tokenizer, collators, the question prompt); ``modeling`` (encoders, pre-training heads, the
segmentation model, saved-model lookup); ``train`` (the one ``Trainer`` and its tasks) and ``predictor``
(encode a page once, answer many questions); ``textenc`` (the text-encoder chain) and ``eval``; then the
applications: ``apps`` (demo, predict, report, the real-page benchmark, and ``apps.engine``, the data engine: an
annotation service where the model proposes answers, people correct them, and rounds retrain it) and ``cli`` (the
``docjepa`` command).
"""

__version__ = "0.1.0"
