"""The names of the predictor's answer paths, apart from the code that follows them (which needs torch), so that
the command line can offer them as choices without importing torch."""

ANSWER_PATHS = ("mask", "words", "auto")
"""How the predictor answers a question: ``mask``: the mask decoder's chosen candidate (snapped to the OCR words
it covers; the word span only when that mask covers no word's centre); ``words``: the word span whenever
the word decoder has logits; ``auto``: the word span when the word decoder's confidence reaches the threshold the
model's calibration chose on its calibration pages (``Calibration.words_threshold``), else as ``mask``."""

__all__ = ["ANSWER_PATHS"]
