import torch

from docjepa.data.touching import one_line, touching


def test_touching_is_symmetric_and_batched_as_one_page_at_a_time(gen):
    x0, y0 = torch.rand(3, 12, generator=gen) * 300, torch.rand(3, 12, generator=gen) * 300
    w, h = 5 + torch.rand(3, 12, generator=gen) * 40, 8 + torch.rand(3, 12, generator=gen) * 6
    boxes = torch.stack([x0, y0, x0 + w, y0 + h], -1)
    near = touching(boxes)
    assert near.shape == (3, 12, 12) and near.dtype == torch.bool
    assert torch.equal(near, near.transpose(1, 2)) and near.diagonal(dim1=1, dim2=2).all()
    assert 0 < near.sum() < near.numel()  # random words: some touch, not all
    for i in range(3):
        assert torch.equal(touching(boxes[i]), near[i])
    # Wider gaps reach at least the words the narrow ones do.
    assert (touching(boxes, row_gap=6.0, line_gap=2.0) | ~near).all()


def test_one_line_is_half_the_smaller_height_in_common():
    boxes = torch.tensor([[0, 10, 40, 22], [50, 16, 90, 28], [100, 17, 140, 29], [0, 40, 40, 52], [60, 12, 70, 18]])
    line = one_line(boxes)
    assert torch.equal(line, line.T) and line.diagonal().all()
    assert line[0, 1] and not line[0, 2]  # 6 of 12 px in common: one line; 5: not
    assert not line[0, 3]  # the line below
    assert line[0, 4]  # a small word inside the line's height
    # Words on one line that touch are on one line; words that touch across lines are not.
    near = touching(boxes)
    assert not (near & ~line)[0, 1]
