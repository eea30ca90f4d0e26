"""Data made by a seed is the same bytes in every process, whatever PYTHONHASHSEED is."""

import hashlib
import os
import subprocess
import sys

import pytest

pytest.importorskip("faker")
pytest.importorskip("transformers")

# Table page 23 of seed 0 includes Italian cities, whose order in Faker follows the hash seed unless sorted.
SCRIPT = """
import sys
from pathlib import Path
from docjepa.data.synth.generate import generate
from docjepa.data.tokenizer import train_tokenizer
out = Path(sys.argv[1])
generate(28, out / "d", seed=0, size=128, workers=1, layout="table", progress=False)
train_tokenizer([out / "d"], out / "tok", vocab_size=300)
"""


def _digests(root):
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and (p.suffix == ".parquet" or p.name == "tokenizer.json")
    }


def test_generate_and_tokenizer_identical_across_hash_seeds(tmp_path):
    runs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"hash{hash_seed}"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, "-c", SCRIPT, str(out)], check=True, env=env, timeout=300)
        runs.append(_digests(out))
    assert set(runs[0]) == {"d/shard-00000.parquet", "tok/tokenizer.json"}
    assert runs[0] == runs[1]


def test_tokenizer_is_wordpiece_with_continuation_pieces(tmp_path):
    from docjepa.data.tokenizer import SPECIAL, train_tokenizer_on_texts

    texts = ["the unbelievable thing", "believing things", "the thing", "unthinkable things"] * 5
    tok = train_tokenizer_on_texts(texts, tmp_path / "t", vocab_size=40)
    vocab = tok.get_vocab()
    assert [vocab[s] for s in SPECIAL] == list(range(len(SPECIAL)))
    assert any(t.startswith("##") for t in vocab) and "t" in vocab and "##e" in vocab
    assert not any(ord(ch) >= 0xF0000 for t in vocab for ch in t)  # every marked character mapped back
    pieces = tok.tokenize("unbelievable")
    assert len(pieces) > 1 and "".join(p.removeprefix("##") for p in pieces) == "unbelievable"
    assert not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:])
