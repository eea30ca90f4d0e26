"""The pre-training model: backbone + EMA target image encoder + I-JEPA predictor + MLM, MIM and D-JEPA heads."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import HieraModel

from .djepa import DJepaHead, djepa_losses
from .heads import MIMHead, MLMHead, mim_loss, mlm_loss
from .ijepa import IJepaPredictor, ema_update, ijepa_loss
from .image_encoder import target_features
from .model import DocJepaConfig, DocJepaModel, DocJepaPreTrainedModel

OBJECTIVES = ("ijepa", "mlm", "mim", "djepa_image", "djepa_text")


@dataclass
class LossWeights:
    """Weight of each pre-training loss; 0 switches an objective off (it is then not computed)."""

    ijepa: float = 1.0
    """I-JEPA on the image encoder."""
    mlm: float = 1.0
    """Masked language modelling on the fused text."""
    mim: float = 1.0
    """Masked image modelling (normalised pixels of hidden patches) on the fused image."""
    djepa_image: float = 1.0
    """D-JEPA text → image: the target embedding of a hidden region predicted from the fused text."""
    djepa_text: float = 1.0
    """D-JEPA image → text: hidden words predicted from the image embedding."""


class DocJepaForPretraining(DocJepaPreTrainedModel):
    """Computes every switched-on pre-training loss from one collated batch (see ``docjepa.data.masking``)."""

    def __init__(self, config: DocJepaConfig, backbone: DocJepaModel | None = None) -> None:
        super().__init__(config)
        self.backbone = backbone or DocJepaModel(config)
        enc = self.backbone.image_encoder
        self.target_encoder = HieraModel(config.hiera(), add_pooling_layer=False)
        self.target_encoder.load_state_dict(enc.hiera.state_dict())
        self.target_encoder.requires_grad_(False)
        vocab = config.bert().vocab_size
        grid, side = config.unit_grid, config.embed_grid
        self.predictor = IJepaPredictor(
            enc.out_dim, config.predictor_dim, config.predictor_layers, config.predictor_heads, grid
        )
        self.mlm_head = MLMHead(config.neck_dim, vocab)
        self.mim_head = MIMHead(config.neck_dim, config.mim_patch)
        self.djepa = DJepaHead(
            config.neck_dim, enc.out_dim, vocab, config.djepa_layers, config.fusion_heads, grid, side
        )
        self.post_init()
        self.target_encoder.load_state_dict(enc.hiera.state_dict())  # post_init may have re-initialised it

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """As ``PreTrainedModel.from_pretrained``, with the target encoder frozen again (loading unfreezes it)."""
        model = super().from_pretrained(*args, **kwargs)
        model.target_encoder.requires_grad_(False)
        return model

    def trainable_named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """Every parameter except the EMA target encoder's."""
        return [(n, p) for n, p in self.named_parameters() if not n.startswith("target_encoder.")]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for _, p in self.trainable_named_parameters()]

    def update_target(self, momentum: float) -> None:
        """EMA step of the target encoder towards the online Hiera."""
        ema_update(self.target_encoder, self.backbone.image_encoder.hiera, momentum)

    def forward(self, batch: dict, weights: LossWeights | None = None) -> dict[str, Tensor]:
        """Returns each switched-on loss, their weighted sum under ``"loss"`` (default: every weight 1), and
        ``"target_std"``, the spread of the target features across positions (a collapse monitor, not a loss)."""
        weights = weights or LossWeights()
        keep = batch["context_keep"]  # (B, U)
        b, u = keep.shape
        out = self.backbone(
            batch["pixel_values"], batch["input_ids"], batch["attention_mask"], batch["bbox"], keep=keep
        )
        need_targets = weights.ijepa > 0 or weights.djepa_image > 0
        targets = target_features(self.target_encoder, batch["pixel_values"]) if need_targets else None
        losses: dict[str, Tensor] = {}
        if weights.ijepa > 0:
            context_idx = keep.nonzero()[:, 1].view(b, -1)  # (B, K), ascending as Hiera keeps them
            pred = self.predictor(out.image.tokens, context_idx, batch["target_idx"])
            losses["ijepa"] = ijepa_loss(pred, targets, batch["target_idx"])
        if weights.mlm > 0:
            losses["mlm"] = mlm_loss(self.mlm_head, out.fused_text, batch["mlm_labels"])
        if weights.mim > 0:
            side = out.fused_image.shape[-1]
            grid = math.isqrt(u)
            hidden = (~keep).float().view(b, 1, grid, grid)
            hidden = F.interpolate(hidden, size=(side, side), mode="nearest").flatten(1).bool()  # (B, G²)
            losses["mim"] = mim_loss(self.mim_head, out.fused_image, batch["pixel_values"], hidden)
        if weights.djepa_image > 0 or weights.djepa_text > 0:
            l_img, l_txt = djepa_losses(
                self.djepa,
                out.fused_text,
                batch["attention_mask"],
                out.image.embedding,
                batch["bbox"],
                targets,
                batch["djepa_image_idx"],
                batch["djepa_text_pos"],
                batch["djepa_text_labels"],
            )
            if weights.djepa_image > 0:
                losses["djepa_image"] = l_img
            if weights.djepa_text > 0:
                losses["djepa_text"] = l_txt
        total = sum(getattr(weights, k) * v for k, v in losses.items())
        losses["loss"] = total
        if targets is not None:  # collapse monitor: spread of the target features across positions (0 = collapsed)
            losses["target_std"] = targets.float().std(dim=1).mean().detach()
        return losses
