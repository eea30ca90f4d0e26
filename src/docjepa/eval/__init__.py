"""Evaluation of promptable segmentation: metrics, the OCR-matching baseline, the ``evaluate`` command."""
