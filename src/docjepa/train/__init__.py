"""Training: the one :class:`~docjepa.train.trainer.Trainer` and its tasks (pre-training, the question tower,
fine-tuning), optimizers, checkpoints, metrics logs and several processes under torchrun."""
