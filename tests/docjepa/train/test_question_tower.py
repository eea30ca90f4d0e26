"""CLIP pre-training of the question tower."""

import pytest
import torch

pytest.importorskip("transformers")

from transformers import CLIPTextConfig, CLIPTextModel

from docjepa.data.shards import DocumentDataset
from docjepa.modeling import build_config
from docjepa.modeling.segmentation import DocJepaForSegmentation
from docjepa.train.question_tower import ClipCollator, ClipPretrainer


def test_clip_tower_learns_region_text_pairs_and_loads_user_checkpoints(docs, tok, tmp_path):
    torch.manual_seed(0)
    seg = DocJepaForSegmentation(build_config("tiny", len(tok)))
    tower = CLIPTextModel(seg.question_encoder.clip.config)
    model = ClipPretrainer(seg.backbone, tower, dim=64)
    ds = DocumentDataset(docs / "d")
    batch = ClipCollator(tok, 256, per_page=6, max_tokens=16, seed=0)([(i, ds[i]) for i in range(4)])
    assert batch["cells"].shape[1:] == (16, 16) and (batch["cells"].flatten(1).sum(1) > 0).all()
    assert len(batch["owner"]) == len(batch["text_ids"]) > 8
    opt = torch.optim.AdamW([p for _, p in model.trainable_named_parameters()], lr=2e-3)
    model.train()
    losses = []
    for _ in range(50):
        out = model(batch)
        losses.append(float(out["loss"].detach()))
        out["loss"].backward()
        opt.step()
        opt.zero_grad()
    assert sum(losses[-5:]) / 5 < 0.6 * losses[0], losses[::5]
    assert all(not p.requires_grad for p in model.image_encoder.parameters())
    model.save_pretrained(tmp_path / "clip")
    assert CLIPTextModel.from_pretrained(tmp_path / "clip").config.hidden_size == tower.config.hidden_size
    # A user's CLIP with another width: the projection adapts.
    other = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=32,
            eos_token_id=tok.sep_token_id,
            pad_token_id=0,
        )
    )
    other.save_pretrained(tmp_path / "user_clip")
    seg.question_encoder.load_pretrained_tower(tmp_path / "user_clip")
    ids = tok(["Where is the total?"], return_tensors="pt")
    n = ids["input_ids"].shape[1]
    assert seg.question_encoder(ids["input_ids"], ids["attention_mask"]).shape == (1, 1 + n, 128)
