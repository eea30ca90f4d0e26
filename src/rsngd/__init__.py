"""RS-SNGD: random-subspace stochastic natural gradient descent for memory-light training."""

from . import projection
from .groups import param_groups
from .memory import optimizer_state_bytes
from .optimizer import RSNGD, fisher_gram
from .woodbury import damped_cholesky_solve, natural_gradient

__all__ = [
    "RSNGD",
    "damped_cholesky_solve",
    "fisher_gram",
    "natural_gradient",
    "optimizer_state_bytes",
    "param_groups",
    "projection",
]
__version__ = "0.1.0"
