"""Answers from a trained model: the predictor (a page encoded once, questions answered from it), the click rules
that make answers agree with a person's corrections, and the calibration of predicted IoU."""
