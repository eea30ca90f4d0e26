"""Document data: record format, synthetic generator, shards, info."""

import re

import numpy as np
import pytest

pytest.importorskip("faker")
pytest.importorskip("pyarrow")

from docjepa.apps.cli import main
from docjepa.apps.cli.data import dataset_info
from docjepa.data.record import Page, rasterize
from docjepa.data.shards import DocumentDataset, ShardWriter, iter_pages
from docjepa.data.synth.generate import NoiseOptions, generate, generate_page
from docjepa.data.synth.layouts import LAYOUTS
from docjepa.data.synth.phrasings import EXTRA
from tests.helpers import cli_error

SIZE = 384


def center(box):
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def test_generator_is_deterministic_per_seed_and_index():
    a, b = generate_page(7, seed=1, size=SIZE), generate_page(7, seed=1, size=SIZE)
    assert a.image == b.image and a.to_row() == b.to_row()
    c = generate_page(7, seed=2, size=SIZE)
    assert c.image != a.image


def test_generator_variety():
    pages = [generate_page(i, seed=0, size=SIZE) for i in range(36)]
    assert {p.layout for p in pages} == set(LAYOUTS)
    kinds_seen = {q.kind for p in pages for q in p.questions}
    assert {"key", "field", "table", "layout"} <= kinds_seen
    texts = {q.text for p in pages for q in p.questions}
    assert len(texts) > 100  # templates × content, not a handful of fixed strings
    assert all(p.words and p.questions for p in pages)
    assert any(len(q.answers) > 1 for p in pages for q in p.questions)  # ambiguity is kept


def test_extended_phrasings_change_only_the_wording():
    fields = re.compile(r"\{(\w+)\}")
    extra = {t: key for key, more in EXTRA.items() for t in more}
    assert not set(extra) & set(EXTRA)  # no extra wording repeats a kind's first original template
    assert len(extra) == sum(map(len, EXTRA.values()))  # nor asks for two things
    for key, more in EXTRA.items():
        assert len(more) >= 3 and all(set(fields.findall(t)) == set(fields.findall(key)) for t in more), key
    changed = total = 0
    for i in range(30):
        a = generate_page(i, seed=3, size=SIZE, phrasings="original")
        b = generate_page(i, seed=3, size=SIZE, phrasings="extended")
        assert a.image == b.image and a.words == b.words and a.layout == b.layout
        assert [(q.kind, q.answers) for q in a.questions] == [(q.kind, q.answers) for q in b.questions]
        assert not any(q.template in extra for q in a.questions)
        for qa, qb in zip(a.questions, b.questions):
            total += 1
            if qa.template != qb.template:
                changed += 1
                assert qb.template in extra and qb.text == qb.template.format(**_slots(qa))
    # Each kind has 1-3 original wordings and 3 or more extra ones, all equally likely: about 60 % are reworded.
    assert 0.45 < changed / total < 0.8, (changed, total)
    with pytest.raises(ValueError, match="phrasings"):
        generate_page(0, phrasings="paraphrased")


def _slots(q) -> dict[str, str]:
    """The values a question's template was filled with, read back from its text."""
    pattern = re.escape(q.template)
    for name in re.findall(r"\{(\w+)\}", q.template):
        pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>.+)", 1)
    return re.fullmatch(pattern, q.text).groupdict()


@pytest.mark.parametrize("layout", [*sorted(LAYOUTS), "business"])
@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_answer_masks_cover_exactly_the_answer_words(layout, noise):
    page = generate_page(3, seed=5, size=768, layout=layout, noise=NoiseOptions(p=noise))
    checked = 0
    for qi, q in enumerate(page.questions):
        mask = page.answer_mask(qi)
        assert mask.shape == (page.height, page.width) and mask.any()
        for a in q.answers:
            inside = {i for i in a.word_ids}
            for i in inside:
                x, y = center(page.words[i].box)
                assert mask[int(y), int(x)], (q.text, page.words[i].text)
            if q.kind in ("key", "table") and a.word_ids and len(q.answers) == 1:
                # No other word's centre falls inside a key/cell answer.
                others = [w for j, w in enumerate(page.words) if j not in inside]
                assert not any(mask[int(center(w.box)[1]), int(center(w.box)[0])] for w in others), q.text
                checked += 1
    assert checked > 0 or layout == "multicolumn"


def test_masks_rasterise_at_any_resolution():
    page = generate_page(1, seed=0, size=768, layout="invoice")
    full = page.answer_mask(0)
    half = page.answer_mask(0, size=(page.height // 2, page.width // 2))
    assert half.shape == (page.height // 2, page.width // 2)
    assert abs(half.mean() - full.mean()) < 0.2 * full.mean()
    with pytest.raises(ValueError, match="3"):
        rasterize([[0, 0, 1, 1]], (10, 10))


def test_words_are_inside_the_page():
    for i in range(12):
        page = generate_page(i, seed=3, size=SIZE, noise=NoiseOptions(p=0.5))
        for w in page.words:
            x0, y0, x1, y1 = w.box
            assert -3 <= x0 < x1 <= page.width + 3 and -3 <= y0 < y1 <= page.height + 3, w


def test_shards_round_trip_and_random_access(tmp_path):
    pages = [generate_page(i, seed=4, size=SIZE) for i in range(23)]
    with ShardWriter(tmp_path, pages_per_shard=10) as writer:
        for p in pages:
            writer.add(p)
    assert sorted(f.name for f in tmp_path.iterdir()) == [f"shard-0000{i}.parquet" for i in range(3)]
    ds = DocumentDataset(tmp_path)
    assert len(ds) == 23
    for i in (0, 9, 10, 22, 5, -1):
        got = ds[i]
        assert isinstance(got, Page)
        want = pages[i].to_row()
        row = got.to_row()
        assert row["image"] == want["image"] and row["doc_id"] == want["doc_id"]
        assert [w["text"] for w in row["words"]] == [w["text"] for w in want["words"]]
        np.testing.assert_allclose([w["box"] for w in row["words"]], [w["box"] for w in want["words"]], atol=1e-3)
        assert [q["text"] for q in row["questions"]] == [q["text"] for q in want["questions"]]
        assert np.array_equal(got.answer_mask(0), pages[i].answer_mask(0))
    assert [p.doc_id for p in iter_pages(tmp_path)] == [p.doc_id for p in pages]
    with pytest.raises(IndexError):
        ds[23]


def test_random_access_decodes_each_row_group_once_within_its_cache(tmp_path, monkeypatch):
    import pickle

    import docjepa.data.shards as shards

    pages = [generate_page(i, seed=5, size=256) for i in range(40)]  # row groups of 16: 16, 16, 8 pages
    with ShardWriter(tmp_path, pages_per_shard=40) as writer:
        for p in pages:
            writer.add(p)
    reads = []
    real = shards.pq.ParquetFile

    class Counting(real):
        def read_row_group(self, i, *args, **kwargs):
            reads.append(i)
            return super().read_row_group(i, *args, **kwargs)

    monkeypatch.setattr(shards.pq, "ParquetFile", Counting)
    order = np.random.default_rng(0).permutation(2 * len(pages)) % len(pages)
    ds = DocumentDataset(tmp_path)
    assert [ds[int(i)].doc_id for i in order] == [pages[i].doc_id for i in order]
    assert sorted(reads) == [0, 1, 2]  # each group decoded once, however the pages are drawn
    assert pickle.loads(pickle.dumps(ds))._held == 0  # a loader's worker starts empty
    reads.clear()
    small = DocumentDataset(tmp_path, cache_bytes=1)  # one group held at a time: still the right pages
    got = [small[int(i)].to_row() for i in order[:12]]
    assert [(r["doc_id"], r["image"]) for r in got] == [(pages[i].doc_id, pages[i].image) for i in order[:12]]
    assert len(small._groups) == 1 and len(reads) > 3


def test_generate_output_does_not_depend_on_workers(tmp_path):
    one = generate(10, tmp_path / "one", seed=9, size=256, workers=1, progress=False)
    two = generate(10, tmp_path / "two", seed=9, size=256, workers=2, progress=False)
    assert one["pages"] == two["pages"] == 10 and one["questions"] == two["questions"]
    rows1 = [p.to_row() for p in iter_pages(tmp_path / "one")]
    rows2 = [p.to_row() for p in iter_pages(tmp_path / "two")]
    assert rows1 == rows2


def test_info_and_cli(tmp_path, capsys):
    main(["generate", "--n", "6", "--out", str(tmp_path / "d"), "--size", "256", "--workers", "1", "--no-progress"])
    info = dataset_info(tmp_path / "d")
    pages = list(iter_pages(tmp_path / "d"))
    assert info["pages"] == info["documents"] == 6
    assert info["words"] == sum(len(p.words) for p in pages)
    assert info["questions"] == sum(len(p.questions) for p in pages) == sum(info["question_kinds"].values())
    assert info["image_sizes"] == {"181x256": 6}
    main(["info", str(tmp_path / "d")])
    assert '"pages": 6' in capsys.readouterr().out
    assert "no dataset folder" in cli_error(["info", str(tmp_path / "missing")], capsys)
    with pytest.raises(SystemExit) as exc:  # argparse's own usage error, status 2
        main(["generate", "--n", "0", "--out", str(tmp_path / "e")])
    assert exc.value.code == 2 and "--n: must be at least 1, got 0" in capsys.readouterr().err


def test_business_vocabulary_prints_labels_and_amounts_as_real_documents_do():
    import random

    from docjepa.data.synth.vocabulary import LABELS, Vocabulary

    plain = Vocabulary()
    assert plain.money(1234.5) == "1,234.50" and plain.money(1234.5, grouped=False) == "1234.50"
    assert plain.label("Total") == "Total"  # no stream: the layouts' own wording
    seen_money, seen_labels = set(), set()
    for s in range(40):
        v = Vocabulary(random.Random(s))
        seen_money.add(v.money(1234567.891))
        first = v.label("Total")
        assert v.label("Total") == first and first in ("Total", *LABELS["Total"])  # one wording per page
        seen_labels.add(first)
        assert v.label("Not a label") == "Not a label"
    bare = {m.split(" ")[0].lstrip("$£") if m[-1].isalpha() else m.lstrip("$£") for m in seen_money}
    assert {"1,234,567.89", "1.234.567,89", "1234567.89"} <= bare and "1 234" in " ".join(seen_money)
    assert any(m.startswith(("$", "£")) for m in seen_money) and any(m.endswith("EUR") for m in seen_money)
    assert len(seen_labels) >= 4


def test_business_pages_keep_layout_values_and_questions():
    changed = 0
    for i in range(24):
        a = generate_page(i, seed=5, size=SIZE, phrasings="extended")
        b = generate_page(i, seed=5, size=SIZE, phrasings="business")
        assert a.layout == b.layout
        assert [(q.kind, q.template, q.text) for q in a.questions] == [
            (q.kind, q.template, q.text) for q in b.questions
        ]
        if a.layout not in ("invoice", "receipt"):
            assert a.image == b.image and a.words == b.words
            continue
        for qa, qb in zip(a.questions, b.questions):  # an amount's answer is the same number, printed otherwise
            ta, tb = qa.answers[0].text, qb.answers[0].text
            if re.fullmatch(r"[\d,]+\.\d\d", ta):
                digits = re.sub(r"\D", "", tb)
                assert digits == re.sub(r"\D", "", ta), (ta, tb)
                changed += ta != tb
    assert changed > 0  # some amounts are printed in another format


def test_fonts_fall_back_to_matplotlibs_dejavu_where_none_is_installed(tmp_path, monkeypatch):
    """A machine without Debian's fonts (a lent GPU machine) draws pages in matplotlib's DejaVu, not in Pillow's
    bitmap font; where the system's fonts exist they are used as before."""
    from docjepa.data.synth import canvas

    installed = canvas.available_fonts()
    monkeypatch.setattr(canvas, "FONT_DIRS", [tmp_path / "no-fonts-here"])
    canvas.available_fonts.cache_clear()
    try:
        fonts = canvas.available_fonts()
        assert all(fonts[fam] for fam in canvas.FAMILIES)
        assert all(f.parent == canvas.bundled_font_dir() and f.name.startswith("DejaVu") for f in fonts["serif"])
        monkeypatch.setattr(canvas, "bundled_font_dir", lambda: None)
        canvas.available_fonts.cache_clear()
        assert not any(canvas.available_fonts().values())
    finally:
        monkeypatch.undo()
        canvas.available_fonts.cache_clear()
    assert canvas.available_fonts() == installed
