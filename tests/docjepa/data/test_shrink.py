"""A dataset shrunk to a model's input side feeds the model exactly what the original does, in fewer bytes."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

from docjepa.data.collate import CollateConfig, DocumentCollator
from docjepa.data.record import Page, Word
from docjepa.data.shards import DocumentDataset, ShardWriter, shard_paths
from docjepa.data.shrink import MANIFEST, fitted_image, shrink
from tests.helpers import cli_error


def test_the_collated_batch_is_the_same_from_the_shrunk_pages(docs, tok, tmp_path):
    summary = shrink(docs / "d", tmp_path / "small", side=128, progress=False)
    before, after = DocumentDataset(docs / "d"), DocumentDataset(tmp_path / "small")
    assert summary["pages"] == len(after) == len(before) and summary["unreadable"] == 0
    assert summary["image_bytes_after"] < 0.3 * summary["image_bytes_before"]
    assert json.loads((tmp_path / "small" / MANIFEST).read_text())["side"] == 128

    collate = DocumentCollator(tok, CollateConfig(image_size=128, mask_size=64, max_tokens=128))
    items = [(before[i], 0) for i in range(len(before))]
    shrunk = [(after[i], 0) for i in range(len(after))]
    for (a, _), (b, _) in zip(items, shrunk):  # the row is the row, only the image is smaller
        assert dataclasses.replace(a, image=b"") == dataclasses.replace(b, image=b"")
        assert max(b.pil().size) == 128 and b.pil().size != a.pil().size
    want, got = collate(items), collate(shrunk)
    assert set(want) == set(got)
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, got[key]), key


def _page(doc: str, rgb: tuple[int, int, int], questions: bool) -> Page:
    img = Image.new("RGB", (300, 400), "white")
    img.paste(Image.new("RGB", (100, 50), rgb), (20, 30))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    page = Page(
        doc_id=doc,
        page=0,
        width=300,
        height=400,
        image=buf.getvalue(),
        words=[Word("Total", (20, 30, 120, 80))],
        source="test",
    )
    if questions:
        from docjepa.data.record import Answer, Question

        page.questions = [
            Question("What is the total?", "key", [Answer([[20, 30, 120, 30, 120, 80, 20, 80]], "Total")])
        ]
    return page


def test_grey_pages_are_stored_grey_colour_kept_and_pages_without_questions_dropped_on_request(tmp_path):
    with ShardWriter(tmp_path / "src") as w:
        w.add(_page("grey", (90, 90, 90), questions=True))
        w.add(_page("red", (200, 10, 10), questions=True))
        w.add(_page("none", (90, 90, 90), questions=False))
    summary = shrink(tmp_path / "src", tmp_path / "out", side=64, questions_only=True, progress=False)
    assert (summary["pages"], summary["dropped"], summary["questions"]) == (2, 1, 2)
    pages = {p.doc_id: p for p in DocumentDataset(tmp_path / "out")}
    assert set(pages) == {"grey", "red"}
    modes = {k: Image.open(io.BytesIO(p.image)).mode for k, p in pages.items()}
    assert modes == {"grey": "L", "red": "RGB"}
    red = np.asarray(pages["red"].pil())
    assert red.shape == (64, 48, 3) and (red[..., 0] > red[..., 1] + 100).any()

    from docjepa.data.show import render_page

    drawn = np.asarray(render_page(pages["red"]))  # drawn at the page's size, the boxes where they belong
    assert drawn.shape[1] == 300 and drawn.shape[0] > 400
    assert drawn[35:75, 25:115, 0].mean() > drawn[35:75, 25:115, 1].mean() + 50


def test_an_image_already_small_is_kept_and_bad_requests_are_refused(tmp_path, capsys):
    page = _page("x", (0, 0, 0), questions=True)
    assert fitted_image(page.image, page.width, page.height, 400) is page.image
    with ShardWriter(tmp_path / "src") as w:
        w.add(page)
    shrink(tmp_path / "src", tmp_path / "out", side=64, progress=False)
    with pytest.raises(FileExistsError, match="already holds shards"):
        shrink(tmp_path / "src", tmp_path / "out", side=64, progress=False)
    with pytest.raises(ValueError, match="at least 16"):
        shrink(tmp_path / "src", tmp_path / "other", side=8, progress=False)
    err = cli_error(["shrink", str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--side", "64"], capsys)
    assert "already holds shards" in err


def test_the_command_prints_what_it_did(tmp_path, capsys):
    from docjepa.apps.cli import main

    with ShardWriter(tmp_path / "src") as w:
        w.add(_page("x", (0, 0, 0), questions=True))
    main(["shrink", str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--side", "64", "--no-progress"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["pages"] == 1 and printed["out"] == str(tmp_path / "out")
    assert len(shard_paths(tmp_path / "out")) == 1
