"""Document-JEPA modules: shapes, masked encoding without leakage, masks, losses, EMA, save/load."""

import pytest
import torch

pytest.importorskip("transformers")

from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

from docjepa.data.collate import CollateConfig
from docjepa.data.masking import MaskConfig, MultiBlockMasker, PretrainCollator, token_units
from docjepa.data.shards import DocumentDataset
from docjepa.modeling import DocJepaForPretraining, DocJepaModel, LossWeights, build_config
from docjepa.modeling.common import patchify, sincos_2d
from docjepa.modeling.ijepa import ema_momentum, ema_update
from docjepa.modeling.image_encoder import ImageEncoder, hiera_forward, units_to_map
from docjepa.modeling.text_encoder import LayoutTextEncoder


def tiny_config(vocab: int = 600):
    return build_config("tiny", vocab_size=vocab)


@pytest.fixture
def batch(docs):
    tok = PreTrainedTokenizerFast.from_pretrained(str(docs / "tok"))
    ds = DocumentDataset(docs / "d")
    collate = PretrainCollator(tok, CollateConfig(image_size=256, max_tokens=128), MaskConfig(grid=16), seed=3)
    return collate([(i, ds[i]) for i in range(3)]), tok


def test_image_encoder_shapes_full_and_masked():
    torch.manual_seed(0)
    cfg = tiny_config()
    enc = ImageEncoder(cfg.hiera(), cfg.neck_dim).eval()
    x = torch.randn(2, 3, 256, 256)
    full = enc(x)
    assert full.tokens.shape == (2, 256, enc.out_dim)  # one last-stage token per 16-px mask unit
    assert full.embedding.shape == (2, cfg.neck_dim, 16, 16)  # 1/16 of the input
    keep = torch.zeros(2, 256, dtype=torch.bool)
    keep[0, torch.randperm(256)[:40]] = True
    keep[1, torch.randperm(256)[:40]] = True
    part = enc(x, keep)
    assert part.tokens.shape == (2, 40, enc.out_dim) and part.embedding.shape == full.embedding.shape
    with pytest.raises(ValueError, match="expects"):
        enc(torch.randn(1, 3, 128, 128))
    with pytest.raises(ValueError, match="same number"):
        bad = keep.clone()
        bad[0, (~keep[0]).nonzero()[0]] = True
        enc(x, bad)


def test_masked_path_with_every_unit_visible_equals_the_full_path():
    torch.manual_seed(0)
    enc = ImageEncoder(tiny_config().hiera(), 128).eval()
    x = torch.randn(2, 3, 256, 256)
    keep = torch.ones(2, 256, dtype=torch.bool)
    full, masked = hiera_forward(enc.hiera, x), hiera_forward(enc.hiera, x, keep)
    for f, m in zip(full, masked):
        torch.testing.assert_close(units_to_map(m, keep, (16, 16)), f, atol=1e-5, rtol=1e-5)


def test_context_encoder_never_sees_hidden_units():
    torch.manual_seed(0)
    enc = ImageEncoder(tiny_config().hiera(), 128).eval()
    x = torch.randn(1, 3, 256, 256)
    keep = torch.zeros(1, 256, dtype=torch.bool)
    keep[0, :128] = True  # top half of the unit grid
    y = x.clone()
    y[..., 128:, :] = torch.randn(1, 3, 128, 256)  # change only the hidden bottom half
    a, b = enc(x, keep), enc(y, keep)
    torch.testing.assert_close(a.tokens, b.tokens)
    torch.testing.assert_close(a.embedding, b.embedding)
    assert not torch.allclose(enc(x).tokens, enc(y).tokens)  # without the mask, it would


def test_multi_block_masks():
    cfg = MaskConfig(grid=16)
    masker = MultiBlockMasker(cfg)
    for seed in range(5):
        keep, targets, (h, w) = masker(6, torch.Generator().manual_seed(seed))
        assert keep.shape == (6, 256) and targets.shape == (6, 4, 256)
        assert len(set(keep.sum(1).tolist())) == 1 and int(keep[0].sum()) >= cfg.min_context
        assert (targets.sum(2) == h * w).all()  # every target is one h×w block
        assert 0.12 <= h * w / 256 <= 0.23 and 0.5 <= h / w <= 2.0  # scale 0.15–0.2, aspect 0.75–1.5 (rounded)
        assert not (keep.unsqueeze(1) & targets).any()  # no target unit in the context
        for row in targets.view(6 * 4, 16, 16):  # each block is a solid rectangle
            rows, cols = row.any(1).nonzero().squeeze(1), row.any(0).nonzero().squeeze(1)
            assert row[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1].all()
    a = masker(4, torch.Generator().manual_seed(9))
    b = masker(4, torch.Generator().manual_seed(9))
    assert all(torch.equal(x, y) for x, y in zip(a[:2], b[:2]))


def test_pretrain_collate_masks_text_in_place(batch, docs):
    b, tok = batch
    plain = PretrainCollator(
        tok, CollateConfig(image_size=256, max_tokens=128), MaskConfig(grid=16, mlm_probability=0.0), seed=3
    ).base
    ds = DocumentDataset(docs / "d")
    ref = plain([(ds[i], None) for i in range(3)])
    assert torch.equal(b["bbox"], ref["bbox"])  # boxes untouched by masking
    changed = b["input_ids"] != ref["input_ids"]
    labels = b["mlm_labels"]
    assert (changed & (labels == -100)).sum() == sum(  # only D-JEPA and MLM positions change
        int((b["input_ids"][i, b["djepa_text_pos"][i][b["djepa_text_labels"][i] != -100]] == tok.mask_token_id).sum())
        for i in range(3)
    )
    real = ref["attention_mask"].bool()
    special = (ref["input_ids"] == tok.cls_token_id) | (ref["input_ids"] == tok.sep_token_id) | ~real
    assert (labels[special] == -100).all()
    assert torch.equal(labels[labels != -100], ref["input_ids"][labels != -100])
    frac = float((labels != -100).sum() / (real & ~special).sum())
    assert 0.08 < frac < 0.22  # ~15 % of the text tokens (minus the D-JEPA ones)
    # D-JEPA text positions: [MASK]ed, labelled with the original ids, outside MLM, inside one block.
    for i in range(3):
        pos = b["djepa_text_pos"][i][b["djepa_text_labels"][i] != -100]
        assert len(pos) > 0
        assert (b["input_ids"][i, pos] == tok.mask_token_id).all() and (labels[i, pos] == -100).all()
        assert torch.equal(b["djepa_text_labels"][i][: len(pos)], ref["input_ids"][i, pos])
    # D-JEPA image region is one of the targets.
    for i in range(3):
        region = set(b["djepa_image_idx"][i].tolist())
        assert any(region == set(t.tolist()) for t in b["target_idx"][i])
    units = token_units(b["bbox"], 16)
    assert units.min() >= 0 and units.max() < 256


def test_module_shapes(batch):
    b, tok = batch
    torch.manual_seed(0)
    model = DocJepaForPretraining(tiny_config(len(tok))).eval()
    out = model.backbone(b["pixel_values"], b["input_ids"], b["attention_mask"], b["bbox"], keep=b["context_keep"])
    B, L = b["input_ids"].shape
    K = int(b["context_keep"][0].sum())
    assert out.image.tokens.shape == (B, K, 128)
    assert out.fused_text.shape == (B, L, 128) and out.fused_image.shape == (B, 128, 16, 16)
    ctx_idx = b["context_keep"].nonzero()[:, 1].view(B, -1)
    pred = model.predictor(out.image.tokens, ctx_idx, b["target_idx"])
    assert pred.shape == (*b["target_idx"].shape, 128)
    assert model.mlm_head(out.fused_text).shape == (B, L, len(tok))
    assert model.mim_head(out.fused_image).shape == (B, 256, 16 * 16 * 3)
    logits = model.djepa.predict_text(out.image.embedding, b["bbox"], b["djepa_text_pos"])
    assert logits.shape == (*b["djepa_text_pos"].shape, len(tok))
    assert patchify(b["pixel_values"], 16).shape == (B, 256, 768)
    assert sincos_2d(4, 4, 8).shape == (16, 8)


def test_text_encoder_uses_layout_and_loads_bert(tmp_path):
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    enc = LayoutTextEncoder(cfg).eval()
    ids = torch.randint(5, 100, (2, 7))
    att = torch.ones(2, 7, dtype=torch.long)
    box = torch.randint(0, 500, (2, 7, 4))
    box[..., 2:] += box[..., :2]
    h = enc(ids, att, box)
    assert h.shape == (2, 7, 32)
    moved = box.clone()
    moved[0, 3] = torch.tensor([900, 900, 950, 960])
    assert not torch.allclose(enc(ids, att, moved)[0], h[0])
    with pytest.raises(ValueError, match="0…1000"):
        enc(ids, att, box + 2000)
    src = BertModel(cfg, add_pooling_layer=False)
    src.save_pretrained(tmp_path / "bert")
    enc.load_bert(tmp_path / "bert")
    assert torch.equal(enc.bert.embeddings.word_embeddings.weight, src.embeddings.word_embeddings.weight)
    with pytest.raises(ValueError, match="hidden_size"):
        LayoutTextEncoder(
            BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        ).load_bert(tmp_path / "bert")


def test_text_encoder_freezes_its_embeddings_and_lower_layers():
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32)
    enc = LayoutTextEncoder(cfg)
    enc.freeze(0)
    assert all(p.requires_grad for p in enc.parameters())
    enc.freeze(2)
    layers = enc.bert.encoder.layer
    assert not any(p.requires_grad for p in enc.bert.embeddings.parameters())
    assert not any(p.requires_grad for layer in layers[:2] for p in layer.parameters())
    assert all(p.requires_grad for p in layers[2].parameters())
    assert all(p.requires_grad for p in enc.layout.parameters())
    ids, att = torch.randint(5, 50, (2, 4)), torch.ones(2, 4, dtype=torch.long)
    box = torch.tensor([10, 10, 60, 40]).expand(2, 4, 4)
    enc(ids, att, box).sum().backward()
    assert enc.layout.x.weight.grad is not None and layers[0].output.dense.weight.grad is None
    enc.freeze(-1)
    assert not any(p.requires_grad for p in layers[2].parameters())
    with pytest.raises(ValueError, match="freeze_text_layers"):
        enc.freeze(4)


def test_ema_update_and_momentum_schedule():
    torch.manual_seed(0)
    online, target = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    before = [p.detach().clone() for p in target.parameters()]
    ema_update(target, online, 0.9)
    for b, t, o in zip(before, target.parameters(), online.parameters()):
        torch.testing.assert_close(t, 0.9 * b + 0.1 * o)
    assert ema_momentum(0, 100) == pytest.approx(0.996)
    assert ema_momentum(50, 100) == pytest.approx(0.998)
    assert ema_momentum(100, 100) == 1.0 and ema_momentum(500, 100) == 1.0


@pytest.mark.slow
def test_every_loss_is_finite_and_falls_when_overfitting_one_batch(batch):
    b, tok = batch
    torch.manual_seed(0)
    model = DocJepaForPretraining(tiny_config(len(tok)))
    model.train()
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=2e-3)
    history = []
    for _ in range(40):
        losses = model(b)
        assert all(torch.isfinite(v) for v in losses.values())
        history.append({k: float(v) for k, v in losses.items()})
        losses["loss"].backward()
        opt.step()
        opt.zero_grad()
        model.update_target(0.996)
    for k in ("ijepa", "mlm", "mim", "djepa_image", "djepa_text"):
        first, last = history[0][k], min(h[k] for h in history[-5:])
        assert last < 0.8 * first, (k, first, last)


def test_switched_off_objectives_are_not_computed(batch):
    b, tok = batch
    model = DocJepaForPretraining(tiny_config(len(tok)))
    losses = model(b, LossWeights(ijepa=0.0, mim=0.0, djepa_image=0.0, djepa_text=0.0))
    assert set(losses) == {"mlm", "loss"}
    torch.testing.assert_close(losses["loss"], losses["mlm"])


def test_save_pretrained_round_trip(batch, tmp_path):
    b, tok = batch
    torch.manual_seed(0)
    model = DocJepaForPretraining(tiny_config(len(tok))).eval()
    model.save_pretrained(tmp_path / "m")
    again = DocJepaForPretraining.from_pretrained(tmp_path / "m").eval()
    torch.manual_seed(1)
    a = model(b)
    torch.manual_seed(1)
    c = again(b)
    for k in a:
        torch.testing.assert_close(a[k], c[k])
    backbone = DocJepaModel.from_pretrained(tmp_path / "m")
    for k, v in backbone.state_dict().items():
        assert torch.equal(v, model.state_dict()["backbone." + k]), k


def test_size_presets():
    from docjepa.modeling import PRESETS
    from docjepa.modeling.image_encoder import check_hiera_config

    expect = {"tiny": (256, 16, 128), "small": (512, 16, 256), "base": (1024, 32, 256)}
    for preset in PRESETS:
        cfg = build_config(preset, vocab_size=1000)
        check_hiera_config(cfg.hiera())  # one last-stage token per mask unit
        assert (cfg.image_size, cfg.unit_grid, cfg.mask_size) == expect[preset]
        assert cfg.bert().vocab_size == 1000 and cfg.question_tower["vocab_size"] == 1000
    with pytest.raises(ValueError, match="unknown model preset"):
        build_config("huge", vocab_size=10)


def test_config_written_before_the_question_tower_rename_loads():
    from docjepa.modeling import DocJepaConfig

    spec = {"hidden_size": 32, "vocab_size": 100}
    old = DocJepaConfig(clip=spec)  # config.json of checkpoints written when the key was "clip"
    assert old.question_tower == spec and "clip" not in old.to_dict()
    assert DocJepaConfig.from_dict(old.to_dict()).question_tower == spec


def test_a_question_tower_stored_in_half_precision_loads_as_float32(tmp_path):
    from docjepa.modeling.prompt_encoder import load_tower

    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    src = BertModel(cfg)
    src.half().save_pretrained(tmp_path / "tower")
    tower = load_tower(tmp_path / "tower")
    assert {p.dtype for p in tower.parameters()} == {torch.float32}
    want = src.state_dict()["encoder.layer.0.attention.self.query.weight"].float()
    assert torch.equal(tower.state_dict()["encoder.layer.0.attention.self.query.weight"], want)
