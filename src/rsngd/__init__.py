"""RS-SNGD: random-subspace stochastic natural gradient descent for memory-light training."""

from . import ablations, projection, recipes
from .factory import TARGETS, create_optimizer, param_groups, split_parameters
from .history import fisher_gram
from .memory import optimizer_state_bytes
from .optimizer import RSNGD
from .recipes import RECIPES
from .schedule import lr_factor, warmup_cosine
from .settings import Settings
from .subspaces import tag_parameter_names
from .woodbury import damped_cholesky_solve, natural_gradient

__all__ = [
    "RECIPES",
    "RSNGD",
    "TARGETS",
    "Settings",
    "ablations",
    "create_optimizer",
    "damped_cholesky_solve",
    "fisher_gram",
    "lr_factor",
    "natural_gradient",
    "optimizer_state_bytes",
    "param_groups",
    "projection",
    "recipes",
    "split_parameters",
    "tag_parameter_names",
    "warmup_cosine",
]
__version__ = "0.1.0"
