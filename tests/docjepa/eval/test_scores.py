"""Segmentation metrics on hand-made masks."""

import numpy as np
import pytest

pytest.importorskip("transformers")


from docjepa.eval.scores import Scores, best_answer, iou_parts


def test_metrics_on_hand_made_masks():
    a = np.zeros((4, 4), bool)
    a[:2, :2] = True  # 4 px
    b = np.zeros((4, 4), bool)
    b[:2, :3] = True  # 6 px, 4 shared
    assert iou_parts(a, b) == (4, 6)
    assert best_answer(a, [b, a]) == (4, 4)
    s = Scores()
    s.add("key", 4, 6, "What is the {l}?")  # 0.667
    s.add("key", 0, 10, "Give the {l}.")  # 0.0
    s.add("table", 3, 4, "What is the {l}?")  # 0.75
    out = s.summary()
    assert out["n"] == 3
    assert out["gIoU"] == pytest.approx((4 / 6 + 0 + 0.75) / 3)
    assert out["cIoU"] == pytest.approx(7 / 20)
    assert out["mIoU"] == pytest.approx(((4 / 6 + 0) / 2 + 0.75) / 2)
    assert out["per_type"]["table"] == {"n": 1, "gIoU": 0.75, "cIoU": 0.75}
    assert out["per_template"]["What is the {l}?"]["gIoU"] == pytest.approx((4 / 6 + 0.75) / 2)
    assert out["per_template"]["Give the {l}."] == {"n": 1, "gIoU": 0.0, "cIoU": 0.0}
    untemplated = Scores()
    untemplated.add("key", 1, 2)  # imported pages have no templates: no per-template table
    assert "per_template" not in untemplated.summary()
