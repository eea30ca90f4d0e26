"""One optimizer step replayed at full LLaMA shapes on ``device="meta"``: what it would cost a GPU, read on a CPU.

Meta tensors carry shapes and dtypes but no data, so a step of a 7B model replays in seconds without memory. Under
:class:`StepTracker` (a ``TorchDispatchMode``) every aten operation of the step is seen once, and the replay
records:

- **live bytes**: every storage the step allocates is counted from its creation until Python frees it; the peak
  over the step is the step's temporaries (the state, weights and gradients alive before the step are not
  counted, so the figure is what the step adds);
- **matmul FLOPs by dtype** (``mm``, ``bmm``, ``addmm``, ``baddbmm`` by ``torch.utils.flop_counter``'s formulas;
  triangular solves and Cholesky factorisations by their textbook counts), the dtype of the first input;
- **kernel-issuing operations**: every operation but views, ``empty`` and other metadata-only ones; a
  ``_foreach`` operation counts once when it takes CUDA's multi-tensor fast path (one dtype and device, lists of
  matching shapes), else once per tensor; a function that runs compiled on a GPU (``rsngd.fused``: the factors'
  normals) counts once per call (its live bytes are still the eager operations', more than the kernel holds);
- **memory traffic**: the bytes each kernel-issuing operation reads and writes, counted as its distinct tensor
  arguments and its results (an estimate: a matmul's operands once, though its tiles re-read them; a fused call's
  arguments and results; a hand-written kernel's tensors once each way). Elementwise work on a GPU takes about this
  many bytes over the memory's bandwidth;
- **QR factorisations** (``linalg_qr``, ``geqrf``) and **host → device copies** (a ``copy_`` or ``_to_copy`` from
  a CPU tensor of more than one element onto the meta device);
- **host synchronisations** cannot happen: reading a meta tensor's value raises.

:func:`replay` builds a LLaMA's parameters (GaLore's 1B and 7B shapes, bf16) on the meta device, creates the
optimizer by ``rsngd.create_optimizer`` (any RS-SNGD recipe, ``muon`` or ``adamw``), takes one step to create the
state, then replays a second step under the tracker. With ``per_layer`` the second step's backward is simulated:
each gradient appears in reverse order (as backward produces them) and the per-layer hook consumes it, so the
peak is that of weights + the gradients held + state + temporaries, as a GPU would see it with no activations.
With ``kernels`` the hand-written GPU kernels of ``rsngd.kernels`` run as stand-ins (:func:`kernel_stand_ins`), each
launch one kernel.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from rsngd import fused
from rsngd import kernels as _kernels

__all__ = ["SHAPES", "StepTracker", "kernel_stand_ins", "llama_parameters", "replay"]

SHAPES: dict[str, dict[str, int]] = {
    # GaLore's LLaMA configurations (hidden, MLP width, blocks, heads; vocabulary 32,000), as gpu.py builds them.
    "llama-1b": {"hidden": 2048, "intermediate": 5461, "layers": 24, "vocab": 32000},
    "llama-7b": {"hidden": 4096, "intermediate": 11008, "layers": 32, "vocab": 32000},
}

_NO_KERNEL = {
    "empty",
    "empty_strided",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "detach",
    "alias",
    "lift_fresh",
    "_local_scalar_dense",
    "is_same_size",
    "_has_compatible_shallow_copy_type",
    "set_",
    "resize_",
    "promote_types",  # dtype arithmetic, answered on the host
    "result_type",
    "can_cast",
    "_unsafe_view",  # views that the schema does not mark as such
    "squeeze_",
    "unsqueeze_",
    "t_",
    "transpose_",
    "as_strided_",
}
_QR = {"linalg_qr", "geqrf", "_linalg_qr_helper", "orgqr", "linalg_householder_product"}


def _storage(t: torch.Tensor) -> torch.UntypedStorage | None:
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse or other storage-less tensors
        return None


def _foreach_launches(args: tuple) -> int:
    """Kernels a ``_foreach`` op launches on a GPU: one (multi-tensor apply) when its tensors share a dtype and a
    device and corresponding tensors of its lists have one shape; else one per tensor (torch's slow path)."""
    lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
    tensors = [t for lst in lists for t in lst]
    if len({(t.dtype, t.device) for t in tensors}) > 1:
        return len(lists[0])
    if any(len(lst) != len(lists[0]) or any(a.shape != b.shape for a, b in zip(lst, lists[0])) for lst in lists):
        return len(lists[0])
    return 1


def _moved(tensors: Any) -> int:
    """Bytes of the distinct tensors among ``tensors`` (a pytree): what an operation reads or writes of them."""
    seen = {id(t): t for t in tree_flatten(tensors)[0] if isinstance(t, torch.Tensor)}
    return sum(t.numel() * t.element_size() for t in seen.values())


_ACTIVE: list[StepTracker] = []


class StepTracker(TorchDispatchMode):
    """Counts what a stretch of torch code allocates and launches (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.flops: Counter[str] = Counter()
        self.ops = 0
        self.qr = 0
        self.host_to_device = 0
        self.traffic = 0
        self.by_op: Counter[str] = Counter()
        self.traffic_by_op: Counter[str] = Counter()
        self._seen: dict[int, weakref.ref] = {}
        self._fused_call: int | None = None

    def __enter__(self) -> StepTracker:
        _ACTIVE.append(self)
        fused.OBSERVERS.append(self._fused)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.remove(self)
        fused.OBSERVERS.remove(self._fused)
        return super().__exit__(*exc)

    def _fused(self, args: tuple, out: Any) -> None:
        """A fused call's traffic: its arguments read, its results written, as its one compiled kernel moves them."""
        moved = _moved(args) + _moved(out)
        self.traffic += moved
        self.traffic_by_op["fused"] += moved

    def launch(self, name: str, tensors: list[torch.Tensor]) -> None:
        """A hand-written kernel's launch (``rsngd.kernels``, replayed by :func:`kernel_stand_ins`): one launch that
        reads and writes ``tensors``."""
        self.ops += 1
        self.by_op[name] += 1
        moved = 2 * _moved(tensors)
        self.traffic += moved
        self.traffic_by_op[name] += moved

    def _free(self, key: int, nbytes: int, _ref: Any = None) -> None:
        self._seen.pop(key, None)
        self.live -= nbytes

    def _track(self, out: Any, inputs: set[int]) -> None:
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = _storage(t)
            if st is None:
                continue
            key = id(st)
            if key in inputs or key in self._seen:
                continue
            nbytes = st.nbytes()
            self._seen[key] = weakref.ref(st, lambda ref, k=key, n=nbytes: self._free(k, n, ref))
            self.live += nbytes
        self.peak = max(self.peak, self.live)

    def _count(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        name = func._overloadpacket.__name__
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name in _QR:
            self.qr += 1
        if name in ("copy_", "_to_copy") and any(t.device.type == "cpu" and t.numel() > 1 for t in tensors):
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if any(t.device.type != "cpu" for t in outs):
                self.host_to_device += 1
        dtype = str(tensors[0].dtype).replace("torch.", "") if tensors else "none"
        packet = func._overloadpacket
        if packet in flop_registry:
            self.flops[dtype] += int(flop_registry[packet](*args, **kwargs, out_val=out))
        elif name == "linalg_solve_triangular":
            a, b = args[0], args[1]
            self.flops[dtype] += int(a.shape[-1] ** 2 * b.shape[-1] * max(1, b[..., 0, 0].numel()))
        elif name in ("linalg_cholesky_ex", "cholesky"):
            a = args[0]
            self.flops[dtype] += int(a.shape[-1] ** 3 // 3 * max(1, a[..., 0, 0].numel()))
        view = getattr(func, "is_view", False) or any(
            r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns
        )
        if not view and name not in _NO_KERNEL:
            launches = _foreach_launches(args) if name.startswith("_foreach_") else 1
            call = fused.running()
            if call is not None:  # one compiled kernel on a GPU (rsngd.fused): its first operation stands for it
                launches, name = int(call != self._fused_call), "fused"
                self._fused_call = call
            self.ops += launches
            self.by_op[name] += launches
            if call is None:  # a fused call's traffic is its arguments and results (``_fused``)
                moved = _moved((args, kwargs)) + _moved(out)
                self.traffic += moved
                self.traffic_by_op[name] += moved

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        inputs = {id(s) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) for s in [_storage(t)]}
        out = func(*args, **kwargs)
        self._count(func, args, kwargs, out)
        self._track(out, inputs)
        return out

    def report(self) -> dict[str, Any]:
        total = sum(self.flops.values())
        return {
            "temporaries_bytes": self.peak,
            "flops": dict(self.flops),
            "bf16_flop_share": self.flops.get("bfloat16", 0) / total if total else 0.0,
            "kernel_ops": self.ops,
            "qr_calls": self.qr,
            "host_to_device_copies": self.host_to_device,
            "traffic_bytes": self.traffic,
            "top_ops": dict(self.by_op.most_common(12)),
            "top_traffic": dict(self.traffic_by_op.most_common(8)),
        }


class _MetaLaunch:
    """Stands in for a Triton kernel on meta tensors: a launch the active trackers count (``StepTracker.launch``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getitem__(self, grid: Any) -> _MetaLaunch:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        for tracker in _ACTIVE:
            tracker.launch(self.name, [a for a in args if isinstance(a, torch.Tensor)])


@contextlib.contextmanager
def kernel_stand_ins(names: Sequence[str]) -> Iterator[None]:
    """The kernels ``names`` of ``rsngd.kernels`` (``"momentum"``) switched on for meta tensors, each launch counted
    as one kernel that reads and writes its tensors once."""
    unknown = set(names) - {"momentum"}
    if unknown:
        raise ValueError(f"no stand-in for kernels {sorted(unknown)}")
    if not names:
        yield
        return
    saved = _kernels.DEVICES, dict(_kernels.ENABLED), _kernels._kernel
    _kernels.DEVICES = ("meta",)
    _kernels.ENABLED.update({n: True for n in names})
    _kernels._kernel = lambda: _MetaLaunch("momentum kernel")  # type: ignore[assignment]
    try:
        yield
    finally:
        _kernels.DEVICES, _kernels._kernel = saved[0], saved[2]
        _kernels.ENABLED.clear()
        _kernels.ENABLED.update(saved[1])


def llama_parameters(shape: dict[str, int], device: str = "meta", dtype: torch.dtype = torch.bfloat16) -> list:
    """(name, parameter) of a LLaMA of ``shape`` (no tied embeddings), in ``named_parameters`` order."""
    h, inter, vocab = shape["hidden"], shape["intermediate"], shape["vocab"]
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(shape["layers"]):
        pre = f"model.layers.{i}."
        out += [(pre + f"self_attn.{n}_proj.weight", (h, h)) for n in "qkvo"]
        out += [(pre + "mlp.gate_proj.weight", (inter, h)), (pre + "mlp.up_proj.weight", (inter, h))]
        out += [(pre + "mlp.down_proj.weight", (h, inter))]
        out += [(pre + "input_layernorm.weight", (h,)), (pre + "post_attention_layernorm.weight", (h,))]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]
    return [(n, torch.nn.Parameter(torch.empty(s, device=device, dtype=dtype))) for n, s in out]


def _bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def replay(
    method: str,
    shape: str | dict[str, int] = "llama-1b",
    per_layer: bool = False,
    kernels: Sequence[str] = (),
    **kw: Any,
) -> dict[str, Any]:
    """One step of ``create_optimizer(llama, method, **kw)`` (after a first step that creates the state) replayed on
    the meta device; returns :meth:`StepTracker.report` with the weights', gradients' and state's bytes, and with
    ``per_layer``, ``peak_bytes``: weights + state + the peak of what the step holds (gradients included).
    ``kernels``: the hand-written GPU kernels switched on (:func:`kernel_stand_ins`)."""
    with kernel_stand_ins(kernels):
        return _replay(method, shape, per_layer, **kw)


def _replay(method: str, shape: str | dict[str, int], per_layer: bool, **kw: Any) -> dict[str, Any]:
    import rsngd

    dims = SHAPES[shape] if isinstance(shape, str) else shape
    named = llama_parameters(dims)
    params = [p for _, p in named]
    extra = {"per_layer": True} if per_layer else {}
    opt = rsngd.create_optimizer(named, method, **extra, **kw)

    def backward() -> None:
        for p in reversed(params):  # as backward produces them: the head first
            p.grad = torch.empty_like(p)
            if per_layer and opt._layers is not None and p.dim() >= 2 and opt._groups[p]["rank"] is not None:
                opt._layers.absorb(p)

    backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    state = rsngd.optimizer_state_bytes(opt)
    tracker = StepTracker()
    if per_layer:
        with tracker:
            backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        backward()
        with tracker:
            opt.step()
    report = tracker.report()
    weights = _bytes(params)
    report.update(
        method=method,
        shape=shape if isinstance(shape, str) else dims,
        per_layer=per_layer,
        weights_bytes=weights,
        grads_bytes=weights,
        state_bytes=state,
    )
    if per_layer:
        report["peak_bytes"] = weights + state + tracker.peak
    else:
        report["peak_bytes"] = 2 * weights + state + tracker.peak
    return report
