"""The page ↔ square-frame transform and the one "words a mask covers" rule."""

import numpy as np
import torch

from docjepa.data.frame import PageFrame
from docjepa.data.record import Page, Word, words_under


def test_a_page_is_fitted_by_its_longest_side_at_the_top_left():
    frame = PageFrame(width=300, height=600, image_size=256, mask_size=64)
    assert frame.scale == 256 / 600 and frame.frame == 256 / 600 * 64 / 256
    assert frame.shape == (64, 32)
    region = frame.region()
    assert region[:, :32].all() and not region[:, 32:].any()
    assert frame.to_image([[600.0, 300.0]]).tolist() == [[256.0, 128.0]]
    # A mask pixel's centre, back in page pixels, lands in that mask pixel again.
    x, y = frame.to_page_point(10, 5)
    assert int(y * frame.frame) == 10 and int(x * frame.frame) == 5


def test_masks_go_to_the_frame_and_back():
    frame = PageFrame(width=200, height=100, image_size=128, mask_size=64)  # frame 0.32: mask rows 0..31
    page_mask = np.zeros((100, 200), dtype=bool)
    page_mask[50:53, 100:102] = True  # a few page pixels: under one mask pixel at least
    small = frame.to_frame(page_mask)
    assert small.shape == (64, 64) and small.any() and not small[32:].any()
    back = frame.to_page(small)
    assert back.shape == (100, 200) and back[50:53, 100:102].all()
    logits = torch.randn(3, 64, 64)
    assert frame.upsample(logits).shape == (3, 100, 200)


def test_words_under_a_mask_are_those_whose_centre_it_covers():
    page = Page("x", 0, 200, 100, b"", [Word("a", (10, 10, 30, 20)), Word("b", (40, 10, 80, 20))], "t")
    mask = np.zeros((100, 200), dtype=bool)
    mask[14:16, 55:65] = True  # b's centre (60, 15), not a's (20, 15)
    assert words_under(page.word_boxes(), mask) == [1]
    small = np.zeros((50, 50), dtype=bool)
    small[7, 5] = True  # a's centre at frame 0.25: (5, 3.75) → row 3; b's (15, 3.75)
    assert words_under(page.word_boxes(), small, 0.25) == []
    small[3, 5] = True
    assert words_under(page.word_boxes(), small, 0.25) == [0]
    assert words_under([(-50, -50, -10, -10)], mask) == []  # off the mask: never inside
