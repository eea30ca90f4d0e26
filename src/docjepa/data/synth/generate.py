"""``docjepa generate``: synthetic document pages with questions and answer masks.

Every page is generated from its own seed (``seed`` and the page index), so the output is the
same for a seed whatever the number of workers, and pages can be made in any order.
"""

from __future__ import annotations

import io
import math
import multiprocessing as mp
import random
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageFilter

from ..record import Page, Word, union_box
from ..shards import ShardOptions, ShardWriter
from .business import EXTRA_LAYOUTS
from .canvas import Canvas
from .layouts import LAYOUTS, locale_faker
from .vocabulary import Vocabulary

LOCALES = ["en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "en_IE"]


@dataclass(frozen=True)
class NoiseOptions:
    """Scan-like degradations, each applied to a page with probability ``p``."""

    p: float = 0.0
    """Probability of each degradation (0 disables them all)."""
    max_rotation: float = 1.5
    """Largest rotation in degrees."""
    blur: float = 0.8
    """Largest Gaussian blur radius in pixels."""
    speckle: float = 0.004
    """Fraction of pixels flipped to dark or light specks."""
    jpeg_quality: tuple[int, int] = (35, 80)
    """Range of JPEG qualities when the page is stored as JPEG."""


def page_seed(seed: int, index: int) -> int:
    return (seed * 1_000_003 + index * 7919 + 17) % (2**31 - 1)


PHRASINGS = ("original", "extended", "business")


def generate_page(
    index: int,
    seed: int = 0,
    size: int = 1024,
    layout: str | None = None,
    noise: NoiseOptions = NoiseOptions(),
    phrasings: str = "extended",
) -> Page:
    """Generate page ``index`` of the synthetic set with ``seed``; ``size`` is the page height in px (A4 shape).

    ``phrasings``: ``original`` asks each question kind in the layouts' own wordings; ``extended`` also in the
    extra wordings of :mod:`.phrasings` (same page, same answers; only some questions are worded differently);
    ``business`` is ``extended`` on pages whose labels and amounts are printed as real invoices and receipts print
    them (:mod:`.vocabulary`: "Amount due", "Invoice #", 1.234,56 €; same layout, values and questions).
    """
    if phrasings not in PHRASINGS:
        raise ValueError(f"phrasings must be one of {', '.join(PHRASINGS)}, not {phrasings!r}")
    rng = random.Random(page_seed(seed, index))
    wording = random.Random(page_seed(seed, index) ^ 0x5EED) if phrasings != "original" else None
    vocab = Vocabulary(random.Random(page_seed(seed, index) ^ 0xB1115)) if phrasings == "business" else None
    name = layout or rng.choice(sorted(LAYOUTS))
    fake = locale_faker(rng.choice(LOCALES))
    fake.seed_instance(rng.getrandbits(32))
    width = round(size / math.sqrt(2))
    canvas = Canvas(width, size, font_choice=rng.randrange(4))
    questions = (LAYOUTS.get(name) or EXTRA_LAYOUTS[name])(canvas, fake, rng, wording, vocab=vocab)
    variant = getattr(canvas, "variant", None)  # business/<family>/<language>
    image, words = canvas.image, canvas.words
    fmt = "PNG"
    if noise.p > 0:
        image, words, questions, fmt = _degrade(image, words, questions, rng, noise)
    buf = io.BytesIO()
    if fmt == "JPEG":
        image.save(buf, "JPEG", quality=rng.randint(*noise.jpeg_quality))
    else:
        image.save(buf, "PNG", compress_level=1)
    return Page(
        doc_id=f"synth-{seed}-{index:07d}",
        page=0,
        width=width,
        height=size,
        image=buf.getvalue(),
        words=words,
        source=f"synthetic:{name}",
        layout=f"{name}/{variant}" if variant else name,
        questions=questions,
    )


def _degrade(image, words, questions, rng: random.Random, noise: NoiseOptions):
    fmt = "PNG"
    if rng.random() < noise.p:
        angle = rng.uniform(-noise.max_rotation, noise.max_rotation)
        image = image.rotate(angle, resample=Image.BILINEAR, fillcolor="white")
        cx, cy = image.width / 2, image.height / 2
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))

        def rot(poly):  # PIL rotates counter-clockwise about the centre
            out = []
            for i in range(0, len(poly), 2):
                x, y = poly[i] - cx, poly[i + 1] - cy
                out += [cx + x * cos + y * sin, cy - x * sin + y * cos]
            return out

        def rot_box(b):
            p = rot([b[0], b[1], b[2], b[1], b[2], b[3], b[0], b[3]])
            return union_box([(p[i], p[i + 1], p[i], p[i + 1]) for i in range(0, 8, 2)])

        words = [Word(w.text, rot_box(w.box)) for w in words]
        for q in questions:
            for a in q.answers:
                a.regions = [rot(r) for r in a.regions]
    if rng.random() < noise.p:
        image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, noise.blur)))
    if rng.random() < noise.p:
        px = image.load()
        for _ in range(int(noise.speckle * image.width * image.height)):
            x, y = rng.randrange(image.width), rng.randrange(image.height)
            px[x, y] = (30, 30, 30) if rng.random() < 0.5 else (255, 255, 255)
    if rng.random() < noise.p:
        fmt = "JPEG"
    return image, words, questions, fmt


def _work(args: tuple[int, int, int, str | None, NoiseOptions, str]) -> Page:
    return generate_page(*args)


def generate(
    n: int,
    out: Path,
    seed: int = 0,
    size: int = 1024,
    workers: int | None = None,
    layout: str | None = None,
    noise: NoiseOptions = NoiseOptions(),
    progress: bool = True,
    phrasings: str = "extended",
    shards: ShardOptions | None = None,
) -> dict:
    """Generate ``n`` pages into shards under ``out`` (``shards``: pages per shard, appending); returns a summary
    (pages, questions, seconds)."""
    from tqdm.auto import tqdm

    shards = shards or ShardOptions()
    if n < 1:
        raise ValueError("n must be at least 1")
    if shards.resume:
        raise ValueError("generated pages are made again, not resumed: use append to add to a folder")
    if phrasings not in PHRASINGS:
        raise ValueError(f"phrasings must be one of {', '.join(PHRASINGS)}, not {phrasings!r}")
    if layout is not None and layout not in LAYOUTS and layout not in EXTRA_LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose from {', '.join([*LAYOUTS, *EXTRA_LAYOUTS])}")
    workers = workers or mp.cpu_count()
    jobs = [(i, seed, size, layout, noise, phrasings) for i in range(n)]
    start = time.perf_counter()
    questions = 0
    with (
        ShardWriter(out, shards.pages_per_shard, append=shards.append) as writer,
        tqdm(total=n, desc="pages", disable=not progress) as bar,
    ):
        if workers == 1:
            pages = map(_work, jobs)
            pool = None
        else:
            pool = mp.get_context("fork").Pool(workers)
            pages = pool.imap(_work, jobs, chunksize=8)  # in order: output independent of workers
        try:
            for page in pages:
                writer.add(page)
                questions += len(page.questions)
                bar.update()
        finally:
            if pool is not None:
                pool.close()
                pool.join()
    seconds = time.perf_counter() - start
    return {"pages": n, "questions": questions, "seconds": seconds, "pages_per_s": n / seconds, "workers": workers}
