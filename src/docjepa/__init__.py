"""Document-JEPA: a promptable document model (document image + OCR words + question → answer mask).

Layers, each importing only from the ones before it: ``config`` and ``data`` (page records, shards, importers,
synthetic pages, tokenizer, collators, the question prompt); ``modeling`` (encoders, pre-training heads, the
segmentation model, saved-model lookup); ``train`` (the one ``Trainer`` and its tasks) and ``predictor``
(encode a page once, answer many questions); ``textenc`` (the text-encoder chain) and ``eval``; then the
applications: ``apps`` (demo, predict, report) and ``cli`` (the ``docjepa`` command).
"""

__version__ = "0.1.0"
