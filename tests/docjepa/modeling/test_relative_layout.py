"""The relative-layout bias of the joint reader: buckets, the bias of each pair, step 0, and what it learns."""

import math

import pytest
import torch

pytest.importorskip("transformers")

from transformers import BertConfig

from docjepa.modeling import build_config
from docjepa.modeling.joint_reader import JointReader
from docjepa.modeling.relative_layout import DISTANCES, GAIN, RelativeLayoutBias, relative_bucket
from docjepa.modeling.segmentation import DocJepaForSegmentation
from tests.helpers import tiny_bert_folder


def bucket_reference(d: int, buckets: int, max_distance: int) -> int:
    half = buckets // 2
    exact = half // 2
    n = abs(d)
    if n < exact:
        b = n
    else:
        b = min(half - 1, exact + int(math.log(n / exact) / math.log(max_distance / exact) * (half - exact)))
    return b + (half if d > 0 else 0)


def test_buckets_are_signed_exact_when_near_and_logarithmic_when_far():
    d = torch.arange(-1000, 1001)
    got = relative_bucket(d, 32, 500)
    assert got.min() == 0 and got.max() == 31
    assert [int(b) for b in got] == [bucket_reference(int(x), 32, 500) for x in d]
    assert len(set(relative_bucket(torch.arange(0, 8), 32, 500).tolist())) == 8  # each small distance its own
    pos, neg = relative_bucket(torch.arange(1, 1001), 32, 500), relative_bucket(-torch.arange(1, 1001), 32, 500)
    assert set(pos.tolist()).isdisjoint(neg.tolist())  # right of and left of never share a bucket
    assert (pos.diff() >= 0).all() and (neg.diff() >= 0).all()
    with pytest.raises(ValueError, match="even"):
        relative_bucket(d, 7)


def test_each_pair_gets_the_bias_of_its_three_distances(gen):
    heads, b, w = 3, 2, 6
    bias = RelativeLayoutBias(heads, gain=3.0)
    assert bias(torch.randint(0, 1000, (b, w, 4), generator=gen)).abs().max() == 0  # starts at zero
    with torch.no_grad():
        bias.tables.normal_(generator=gen)
    x0, y0 = torch.randint(0, 900, (b, w), generator=gen), torch.randint(0, 900, (b, w), generator=gen)
    box = torch.stack([x0, y0, x0 + torch.randint(1, 99, (b, w), generator=gen), y0 + 12], -1)
    got = bias(box)
    assert got.shape == (b, heads, w, w)
    for n in range(b):
        for i in range(w):
            for j in range(w):
                (ax0, ay0, ax1, ay1), (bx0, by0, _, by1) = box[n, i].tolist(), box[n, j].tolist()
                distances = (bx0 - ax0, bx0 - ax1, (by0 + by1) // 2 - (ay0 + ay1) // 2)
                expected = 3.0 * sum(
                    bias.tables[k, bucket_reference(distances[k], 32, 500)] for k in range(len(DISTANCES))
                )
                torch.testing.assert_close(got[n, :, i, j], expected)
    shifted = box + torch.tensor([37, 50, 37, 50])  # the same words elsewhere on the page: the same bias
    torch.testing.assert_close(bias(shifted), got)
    with pytest.raises(ValueError, match="gain"):
        RelativeLayoutBias(heads, gain=0.0)


def reader_pair(tok, tmp_path):
    folder = tiny_bert_folder(tok, tmp_path / "bert", layers=2)
    config = BertConfig.from_pretrained(folder)
    torch.manual_seed(0)
    plain = JointReader(config, 1, 16)
    relative = JointReader(config, 1, 16, relative=True)
    missing, unexpected = relative.load_state_dict(plain.state_dict(), strict=False)
    assert missing == ["relative.tables"] and not unexpected
    return config, plain.eval(), relative.eval()  # no dropout


def inputs(config, gen, b=2, t=4, w=7):
    h = config.hidden_size
    question = torch.randn(b, t, h, generator=gen)
    q_mask = torch.ones(b, t, dtype=torch.long)
    q_mask[1, -1] = 0
    words = torch.randn(b, w, h, generator=gen)
    words[0, -2:] = 0  # words not read
    box = torch.randint(0, 1000, (b, w, 4), generator=gen).sort(-1).values  # x0 ≤ y0 ≤ x1 ≤ y1: a valid box
    return question, q_mask, words, box


def test_at_step_0_it_reads_as_without_it_and_then_learns_its_tables(tok, tmp_path, gen):
    config, plain, relative = reader_pair(tok, tmp_path)
    for r in (plain, relative):
        with torch.no_grad():
            r.out.weight.normal_(generator=torch.Generator().manual_seed(1))
    args = inputs(config, gen)
    torch.testing.assert_close(relative(*args), plain(*args), rtol=0, atol=0)
    relative(*args).square().sum().backward()
    assert relative.relative.tables.grad.abs().sum() > 0
    with torch.no_grad():
        relative.relative.tables.normal_(generator=gen)
    assert (relative(*args) - plain(*args)).abs().amax() > 1e-3


def test_with_a_bias_it_matches_a_float64_reference_and_padding_changes_nothing(tok, tmp_path, gen):
    import copy

    config, _, reader = reader_pair(tok, tmp_path)
    with torch.no_grad():
        reader.out.weight.normal_(generator=gen)
        reader.relative.tables.normal_(generator=gen)
    question, q_mask, words, box = inputs(config, gen)
    got = reader(question, q_mask, words, box)
    ref = copy.deepcopy(reader).double()
    valid = words.abs().amax(-1) > 0
    x = torch.cat([question.double(), (words.double() + ref.layout(box)) * valid.unsqueeze(-1)], 1)
    keep = torch.cat([q_mask > 0, valid], 1)
    t, length = question.shape[1], x.shape[1]
    bias = torch.zeros(x.shape[0], config.num_attention_heads, length, length, dtype=torch.float64)
    bias[:, :, t:, t:] = ref.relative(box)
    bias = bias.masked_fill(~keep[:, None, None, :], torch.finfo(torch.float64).min)
    for layer in ref.layers:
        x = layer(x, attention_mask=bias)
    expected = ref.out(x[:, t:]) * valid.unsqueeze(-1)
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-4)
    padded = reader(
        question,
        q_mask,
        torch.cat([words, torch.zeros_like(words[:, :2])], 1),
        torch.cat([box, torch.randint_like(box[:, :2], 0, 1000)], 1),
    )
    torch.testing.assert_close(padded[:, : got.shape[1]], got, rtol=1e-4, atol=1e-5)


def test_it_needs_the_joint_reader_and_takes_its_gain_from_the_config(tok, tmp_path):
    config = build_config("tiny", len(tok))
    config.joint_relative = True
    with pytest.raises(ValueError, match="joint_layers"):
        DocJepaForSegmentation(config)
    assert config.relative_gain == GAIN
    config.question_tower = BertConfig.from_pretrained(tiny_bert_folder(tok, tmp_path / "b", layers=2)).to_dict()
    config.page_reader, config.joint_layers, config.relative_gain = True, 1, 2.5
    model = DocJepaForSegmentation(config)
    assert model.joint_reader.relative.gain == 2.5 and model.joint_reader.relative.tables.abs().max() == 0
    config.joint_relative = False
    assert DocJepaForSegmentation(config).joint_reader.relative is None
