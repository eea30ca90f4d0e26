"""The Document-JEPA backbone: image encoder + text encoder + fusion, composed from injected parts.

``DocJepaConfig`` holds everything needed to rebuild the model (the Hiera and BERT configurations as
dictionaries, the neck and fusion sizes, the pre-training heads' sizes), so ``save_pretrained`` /
``from_pretrained`` round-trip any model of this package.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn
from transformers import BertConfig, HieraConfig, PretrainedConfig, PreTrainedModel

from .fusion import CrossModalFusion
from .image_encoder import EMBED_STRIDE, ImageEncoder, ImageFeatures, unit_grid
from .key_neighbours import PATHS
from .relative_layout import GAIN
from .text_encoder import LayoutTextEncoder


class DocJepaConfig(PretrainedConfig):
    """Configuration of every Document-JEPA model (backbone, pre-training heads, segmentation heads)."""

    model_type = "docjepa"

    def __init__(
        self,
        image: dict | None = None,
        text: dict | None = None,
        neck_dim: int = 256,
        fusion_layers: int = 2,
        fusion_heads: int = 8,
        predictor_dim: int = 384,
        predictor_layers: int = 6,
        predictor_heads: int = 12,
        djepa_layers: int = 2,
        mim_patch: int = 16,
        question_tower: dict | None = None,
        decoder_heads: int = 8,
        decoder_mlp_dim: int = 2048,
        decoder_layers: int = 2,
        mask_outputs: int = 3,
        mask_scale: int = 1,
        lexical_prior: bool = False,
        prior_gain: float = 0.0,
        freeze_question_tower: bool = False,
        page_reader: bool = False,
        prompt_gate: bool = False,
        joint_layers: int = 0,
        joint_relative: bool = False,
        relative_gain: float = GAIN,
        key_neighbours: bool = False,
        key_paths: tuple[str, ...] | list[str] = PATHS,
        **kwargs,
    ) -> None:
        self.image = dict(image or {})
        """HieraConfig keyword arguments."""
        self.text = dict(text or {})
        """BertConfig keyword arguments."""
        self.neck_dim = neck_dim
        self.fusion_layers = fusion_layers
        self.fusion_heads = fusion_heads
        self.predictor_dim = predictor_dim
        self.predictor_layers = predictor_layers
        self.predictor_heads = predictor_heads
        self.djepa_layers = djepa_layers
        self.mim_patch = mim_patch
        legacy = kwargs.pop("clip", None)  # the key's name in checkpoints written before it was renamed
        self.question_tower = dict(question_tower or legacy or {})
        """Configuration of the question tower: CLIPTextConfig keyword arguments, or a loaded pre-trained tower's
        configuration with its ``model_type`` (see ``prompt_encoder.tower_config``)."""
        self.decoder_heads = decoder_heads
        self.decoder_mlp_dim = decoder_mlp_dim
        self.decoder_layers = decoder_layers
        self.mask_outputs = mask_outputs
        self.mask_scale = mask_scale
        """Masks are 4 · mask_scale × the embedding grid (SAM: 4, i.e. 256 px for a 1024-px input)."""
        self.lexical_prior = lexical_prior
        """The OCR matcher's answer box is given to the decoder as its mask prompt (training and prediction)."""
        self.prior_gain = prior_gain
        """Initial weight of a mask prompt (as ±1) added to the mask logits; 0 = not added."""
        self.freeze_question_tower = freeze_question_tower
        """The question tower's weights stay as loaded while the rest of the segmentation model trains."""
        self.page_reader = page_reader
        """The question tower also reads the page's words, added to the page tokens (``modeling.page_reader``)."""
        self.prompt_gate = prompt_gate
        """The matcher's box, as mask prompt, weighs ``prior_gain`` × 2·sigmoid(a linear map of the pooled question)
        in the mask logits, a map that starts at zero (×1, the ungated model). A prompt with clicks (the answer
        being refined) keeps ``prior_gain``."""
        self.joint_layers = joint_layers
        """The question tower's top N layers, copied and trained, read the question and the page's words in one
        sequence, added to the page tokens the word decoder reads (``modeling.joint_reader``; needs
        ``page_reader``); 0: none."""
        self.joint_relative = joint_relative
        """The joint layers' attention also reads where each pair of page words stands relative to each other, through
        a learnt bias that starts at zero (``modeling.relative_layout``); needs ``joint_layers``."""
        self.relative_gain = relative_gain
        """That bias is its learnt tables times this: how much faster than the rest of the model it moves."""
        self.key_neighbours = key_neighbours
        """Before each of its blocks the word decoder adds to every word a learnt map, starting at zero, of the words
        left of it on its line and above it (``modeling.key_neighbours``); needs ``joint_layers``."""
        self.key_paths = list(key_paths)
        """The paths from a word to the neighbours it reads (``modeling.key_neighbours.STEPS``: ``l`` left, ``a`` up,
        ``L`` to the run's first word, ``A`` to the top); a model saved before they were chosen reads the default."""

        super().__init__(**kwargs)

    @property
    def mask_size(self) -> int:
        """Side of the decoder's output masks."""
        return self.embed_grid * 4 * self.mask_scale

    @property
    def embed_grid(self) -> int:
        """Side of the image embedding grid (input pixels / ``EMBED_STRIDE``)."""
        return self.image_size // EMBED_STRIDE

    def hiera(self) -> HieraConfig:
        return HieraConfig(**self.image)

    def bert(self) -> BertConfig:
        return BertConfig(**self.text)

    @property
    def image_size(self) -> int:
        return int(self.hiera().image_size[0])

    @property
    def unit_grid(self) -> int:
        return int(unit_grid(self.hiera())[0])


@dataclass
class BackboneOutput:
    """Everything downstream heads may use."""

    image: ImageFeatures
    """Image encoder output (last-stage tokens and the pre-fusion embedding map)."""
    fused_text: Tensor
    """(B, L, D) text tokens after fusion."""
    fused_image: Tensor
    """(B, D, G, G) image embedding after fusion."""


class DocJepaPreTrainedModel(PreTrainedModel):
    """Shared base: configuration class and weight initialisation of this package's own layers."""

    config_class = DocJepaConfig
    base_model_prefix = "backbone"
    main_input_name = "pixel_values"
    _supports_sdpa = True  # lets transformers set the attention implementation of the SAM decoder's config

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


class DocJepaModel(DocJepaPreTrainedModel):
    """Image encoder (Hiera + neck), layout-aware BERT text encoder and two-way cross-attention fusion."""

    def __init__(
        self,
        config: DocJepaConfig,
        image_encoder: ImageEncoder | None = None,
        text_encoder: LayoutTextEncoder | None = None,
        fusion: CrossModalFusion | None = None,
    ) -> None:
        super().__init__(config)
        self.image_encoder = image_encoder or ImageEncoder(config.hiera(), config.neck_dim)
        self.text_encoder = text_encoder or LayoutTextEncoder(config.bert())
        self.fusion = fusion or CrossModalFusion(
            self.text_encoder.hidden_size, config.neck_dim, config.fusion_layers, config.fusion_heads
        )
        self.post_init()

    def forward(
        self, pixel_values: Tensor, input_ids: Tensor, attention_mask: Tensor, bbox: Tensor, keep: Tensor | None = None
    ) -> BackboneOutput:
        """pixel_values (B, 3, S, S); input_ids, attention_mask (B, L); bbox (B, L, 4) in 0…1000;
        keep (B, U) visible mask units (None: the whole image)."""
        image = self.image_encoder(pixel_values, keep)
        text = self.text_encoder(input_ids, attention_mask, bbox)  # (B, L, H)
        fused_text, fused_image = self.fusion(text, attention_mask, image.embedding)
        return BackboneOutput(image=image, fused_text=fused_text, fused_image=fused_image)
