"""Conformance of ``RotaryEmbedding.from_config`` with every transformers family that carries RoPE parameters.

The cases are discovered, not listed: every model type of transformers' config mapping whose configuration file
mentions RoPE is built with its default config; a family counts when its text-level config (the config or its
``text_config``) holds ``rope_parameters``. For each rope type the family supports (its own, and the standard
scalings substituted into its rope dict; a type the family's rotary class refuses or ignores is not one it
supports), the family's own rotary class and ``from_config`` are run at the same positions and compared: inverse
frequencies, the factor multiplying cos/sin, cos/sin, and q/k rotated by the family's own apply function whatever its
name (``apply_rotary_pos_emb``; DeepSeek-V3's ``apply_rotary_pos_emb_interleave`` on cat-form cos/sin; Llama 4 and
DeepSeek-V2's ``apply_rotary_emb`` on complex ``freqs_cis``), fed what the family's rotary module returned.

``PYTHONPATH=tests python -m core.rope_conformance`` prints the table (the README's); the tests are in
``test_rope_conformance.py``. Verified with transformers 5.24.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omnipos.core import RotaryEmbedding, deinterleaved_channel_order

HALF = 8
SCALINGS = {  # the standard scalings substituted into a family's rope dict (lengths: max_position_embeddings 64)
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32},
    "longrope": {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 32},
}
# Where transformers' default config cannot run its own rotary class, the released checkpoints' values
# (GLM-4.1V and GLM-Image rotate half of a 128-channel head: mrope_section [8, 12, 12] fills 32 slots).
RELEASED_VALUES = {"glm4v_text": {"partial_rotary_factor": 0.5}, "glm_image_text": {"partial_rotary_factor": 0.5}}
_SKIP_CLASS_WORDS = ("Vision", "Visual", "Audio", "Image", "Patch", "Speech", "Encoder", "Depth")


@dataclass
class FamilyResult:
    model_type: str
    status: str  # "reproduced", "exception", "not counted"
    reason: str = ""
    rope_types: list[str] = field(default_factory=list)
    rotation: set[str] = field(default_factory=set)  # the apply functions the rotated q/k were compared through


class Unsupported(Exception):
    """The family does not support this rope type (its rotary class refuses or ignores it)."""


@contextlib.contextmanager
def quiet():
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logger.setLevel(level)


def rope_model_types() -> list[tuple[str, str]]:
    """(model_type, module name) of every family whose configuration file mentions RoPE (read as text: cheap)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name

    root = Path(transformers.__file__).parent / "models"
    found = []
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        module = model_type_to_module_name(model_type)
        path = root / module / f"configuration_{module}.py"
        if path.exists() and "rope" in path.read_text(errors="ignore"):
            found.append((model_type, module))
    return found


def _text(config):
    text = getattr(config, "text_config", None)
    return text if text is not None and getattr(config, "num_attention_heads", None) is None else config


def _rotary_classes(module_name: str, model_type: str, text_only: bool = True):
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    every = [obj for name, obj in vars(module).items() if name.endswith("RotaryEmbedding") and isinstance(obj, type)]
    classes = [c for c in every if not text_only or not any(w in c.__name__ for w in _SKIP_CLASS_WORDS)]
    classes.sort(key=lambda c: ("Text" not in c.__name__, len(c.__name__)))
    return module, classes


def _nested_types(params) -> list[str | None]:
    if params and not any(k in params for k in ("rope_type", "type", "rope_theta")) and all(
            v is None or isinstance(v, dict) for v in params.values()):
        return [k for k, v in params.items() if v is not None]
    return [None]


def _hf_output(rotary, positions, layer_type, head_dim):
    """The family's rotary module's own output at ``positions`` (``[L]`` or ``[L, 3]``), batch 1."""
    ids = positions[None] if positions.ndim == 1 else positions.T[:, None]
    x = torch.zeros(1, positions.shape[0], head_dim)
    return rotary(x, ids) if layer_type is None else rotary(x, ids, layer_type=layer_type)


def _hf_cos_sin(rotary, positions, layer_type, head_dim):
    return _cos_sin_of(_hf_output(rotary, positions, layer_type, head_dim), positions.shape[0])


def _cos_sin_of(out, length):
    if isinstance(out, torch.Tensor) and out.is_complex():  # freqs_cis (Llama 4): half-width, interleaved pairs
        return torch.cat((out.real, out.real), -1)[0], torch.cat((out.imag, out.imag), -1)[0]
    cos, sin = out
    return cos.reshape(-1, cos.shape[-1])[-length:], sin.reshape(-1, sin.shape[-1])[-length:]


def _complex_apply(apply):
    """Llama 4 / DeepSeek-V2's ``apply_rotary_emb(xq, xk, freqs_cis)``: q/k ``[B, L, H, D]`` (Llama 4,
    ``freqs_cis[:, :, None]``) or ``[B, H, L, D]`` (DeepSeek-V2, ``freqs_cis.unsqueeze(1)``); returns q/k as
    ``[B, H, L, D]``."""
    def rotate(q, k, out):
        try:
            return apply(q, k, out)
        except RuntimeError:  # the other axis order
            q_hf, k_hf = apply(q.transpose(1, 2), k.transpose(1, 2), out)
            return q_hf.transpose(1, 2), k_hf.transpose(1, 2)
    return rotate


def _rotate_partial(apply, q, k, out, rotary_dim):
    """``apply`` on the whole head, or (Phi, Persimmon, StableLM: the attention slices q/k first) on the rotary
    channels, the rest passed through."""
    try:
        return apply(q, k, out)
    except RuntimeError:
        if rotary_dim == q.shape[-1]:
            raise
    q_rot, k_rot = apply(q[..., :rotary_dim], k[..., :rotary_dim], out)
    return torch.cat((q_rot, q[..., rotary_dim:]), -1), torch.cat((k_rot, k[..., rotary_dim:]), -1)


def apply_function(module, config):
    """The family's own q/k rotation, whatever its name, as ``rotate(q, k, output) -> (q, k)`` on ``[B, H, L, D]``
    (``output``: what its rotary module returned), the name, and whether it returns the channels de-interleaved
    (DeepSeek-V3's ``apply_rotary_pos_emb_interleave``); ``(None, None, False)`` when the module has none."""
    if getattr(config, "rope_interleave", False) and hasattr(module, "apply_rotary_pos_emb_interleave"):
        f = module.apply_rotary_pos_emb_interleave
        return (lambda q, k, out: f(q, k, out[0], out[1])[:2]), "apply_rotary_pos_emb_interleave", True
    f = getattr(module, "apply_rotary_pos_emb", None)
    if f is not None:
        return (lambda q, k, out: f(q, k, out[0], out[1])[:2]), "apply_rotary_pos_emb", False
    f = getattr(module, "apply_rotary_emb", None)
    if f is not None:
        return _complex_apply(f), "apply_rotary_emb", False
    return None, None, False


def compare(model_type, config, module, rotary_cls, layer_type, positions, tol, checked=None) -> str | None:
    """None when omnipos reproduces the family here, else what differs. ``checked`` (a set) receives the name of
    the family's apply function when the rotated q/k were compared through it."""
    text = _text(config)
    try:
        rotary = rotary_cls(text)
        out_hf = _hf_output(rotary, positions, layer_type, 16)
        cos_hf, sin_hf = _cos_sin_of(out_hf, positions.shape[0])
    except Exception as error:  # the family's own class refuses this config
        raise Unsupported(f"{type(error).__name__}: {error}") from error
    bound = tol * (1 + float(positions.max()) / 16)  # transformers' float32 angles: ~ulp(position) each
    # the family's rotary class returns cos/sin in its own layout (cat: half; repeat_interleave: interleaved; or
    # only the d/2 distinct values): the layout is checked by the rotated q/k below
    problem = None
    for layout in ("half", "interleaved"):
        ours = RotaryEmbedding.from_config(config, layer_type=layer_type, layout=layout)
        cos, sin = ours.cos_sin(positions)
        if cos_hf.shape[-1] * 2 == cos.shape[-1]:
            cos, sin = cos[..., :cos.shape[-1] // 2], sin[..., :sin.shape[-1] // 2]
            if layout == "interleaved":
                break
        if cos.shape != cos_hf.shape:
            problem = f"cos/sin shape {tuple(cos.shape)} vs transformers {tuple(cos_hf.shape)}"
            continue
        if torch.allclose(cos, cos_hf.float(), rtol=0, atol=bound) and \
                torch.allclose(sin, sin_hf.float(), rtol=0, atol=bound):
            problem = None
            break
        problem = f"cos/sin differ by {float(max((cos - cos_hf).abs().max(), (sin - sin_hf).abs().max())):.2g}"
    if problem is not None:
        return problem
    prefix = "" if layer_type is None else f"{layer_type}_"
    inv_hf = getattr(rotary, f"{prefix}inv_freq", None)
    inv = ours.frequencies(positions)
    if isinstance(inv_hf, torch.Tensor) and inv_hf.shape == inv.shape and not torch.allclose(
            inv, inv_hf.double(), rtol=5e-6, atol=0):
        return "inverse frequencies differ"
    factor_hf = float((cos_hf.double() ** 2 + sin_hf.double() ** 2).sqrt().mean())
    if abs(float(ours.attention_factor_at(positions)) - factor_hf) > 5e-6 * factor_hf:
        return f"attention factor {float(ours.attention_factor_at(positions)):.6g} vs {factor_hf:.6g}"
    apply, name, deinterleaved = apply_function(module, text)
    if apply is None:
        return None
    rope = RotaryEmbedding.from_config(config, layer_type=layer_type)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, positions.shape[0], rope.dim, generator=g)
    k = torch.randn(1, 2, positions.shape[0], rope.dim, generator=g)
    if not isinstance(out_hf, torch.Tensor):  # (cos, sin) for batch 1, as the model hands them to its apply
        out_hf = tuple(t.reshape(-1, t.shape[-1])[-positions.shape[0]:][None].float() for t in out_hf)
    try:
        with torch.no_grad():
            q_hf, k_hf = _rotate_partial(apply, q, k, out_hf, rope.rotary_dim)
    except Exception:  # an apply function with another signature (M-RoPE's own, ...): cos/sin were compared
        return None
    q_ours, k_ours = rope(q, k, positions[None])
    if deinterleaved:
        order = deinterleaved_channel_order(rope.dim, rope.rotary_dim)
        q_ours, k_ours = q_ours[..., order], k_ours[..., order]
    if q_hf.shape != q_ours.shape:
        return None  # the family's apply rotates a slice of its own choosing: cos/sin were compared
    if not torch.allclose(q_ours, q_hf, rtol=0, atol=20 * bound) or \
            not torch.allclose(k_ours, k_hf, rtol=0, atol=20 * bound):
        return f"rotated q/k differ by {float((q_ours - q_hf).abs().max()):.2g} (layout {rope.layout!r}, {name})"
    if checked is not None:
        checked.add(name)
    return None


def _substituted(config, kind):
    """A copy of ``config`` whose text-level rope dict carries the scaling ``kind`` (lengths 64 / 32)."""
    config = copy.deepcopy(config)
    text = _text(config)
    old = dict(text.rope_parameters)
    params = dict(SCALINGS[kind])
    for key in ("rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"):
        if key in old:
            params[key] = old[key]
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    rotary_half = int(head_dim * params.get("partial_rotary_factor", 1.0)) // 2
    if kind == "longrope":
        params["short_factor"] = [1.0 + 0.05 * i for i in range(rotary_half)]
        params["long_factor"] = [1.5 + 0.2 * i for i in range(rotary_half)]
    text.rope_parameters = params
    text.max_position_embeddings = 64
    if getattr(text, "original_max_position_embeddings", None) is not None:
        text.original_max_position_embeddings = 32
    return config


def check_family(model_type: str, module_name: str, *, all_types: bool, positions_1d, positions_3d,
                 tol: float = 4e-6) -> FamilyResult:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    with quiet():
        try:
            config = CONFIG_MAPPING[model_type]()
        except Exception as error:
            return FamilyResult(model_type, "exception", f"default config cannot be built ({type(error).__name__})")
        text = _text(config)
        params = getattr(text, "rope_parameters", None)
        if not params:
            return FamilyResult(model_type, "not counted", "no rope_parameters at the text level")
        kind = params.get("rope_type", params.get("type")) if _nested_types(params) == [None] else None
        if kind == "axial":
            return FamilyResult(model_type, "not counted", "a vision tower's axial 2-D RoPE (omnipos.vision)")
        try:
            module, classes = _rotary_classes(module_name, model_type)
            text_type = getattr(text, "model_type", None)
            if not classes and text is not config and text_type:  # a composite model: its language model's family
                from transformers.models.auto.configuration_auto import model_type_to_module_name

                module, classes = _rotary_classes(model_type_to_module_name(text_type), text_type)
            if not classes:  # an encoder family (audio, ...): its only rotary class
                module, classes = _rotary_classes(module_name, model_type, text_only=False)
        except ModuleNotFoundError:
            return FamilyResult(model_type, "not counted", "transformers ships its config only (no modeling file)")
        if not classes:
            return FamilyResult(model_type, "exception", "no text rotary class in its modeling file")
        _even_head_dim(text)
        if getattr(text, "model_type", None) in RELEASED_VALUES:
            text.rope_parameters = {**text.rope_parameters, **RELEASED_VALUES[text.model_type]}
        variants = [("own", config)]
        if all_types and _nested_types(params) == [None]:
            for kind in SCALINGS:
                try:
                    variants.append((kind, _substituted(config, kind)))
                except Exception:  # a config without a readable head dim: its own type is checked (and reported)
                    pass
        done = []
        checked: set[str] = set()
        for kind, variant in variants:
            layer_types = _nested_types(_text(variant).rope_parameters)
            used = getattr(_text(variant), "layer_types", None)
            if layer_types != [None] and used:  # the rotary class builds only the layer types the model has
                layer_types = [t for t in layer_types if t in set(used)] or layer_types
            if kind == "own" and layer_types == [None] and _needs_layer_type(variant, classes[0]):
                layer_types = sorted(set(_text(variant).layer_types))  # a flat dict shared by every layer type
            for layer_type in layer_types:
                try:
                    ours = RotaryEmbedding.from_config(variant, layer_type=layer_type)
                except Exception as error:
                    if kind != "own":
                        continue  # ours refuses what the family's validation would refuse too (checked below)
                    return FamilyResult(model_type, "exception", f"from_config: {type(error).__name__}: {error}")
                positions = positions_3d if ours.position_axes == 3 else positions_1d
                last_error = None
                for rotary_cls in classes:
                    try:
                        problem = compare(model_type, variant, module, rotary_cls, layer_type, positions, tol,
                                          checked)
                        break
                    except Unsupported as error:
                        last_error = error
                else:
                    if kind != "own":
                        continue
                    return FamilyResult(model_type, "exception", f"its rotary class refuses its own default config "
                                                                 f"({str(last_error)[:80]})")
                if kind != "own" and problem is not None and _ignores(variant, config, classes[0], positions):
                    continue  # the family ignores this rope type: not one it supports
                if problem is not None:
                    label = kind if layer_type is None else f"{kind}/{layer_type}"
                    return FamilyResult(model_type, "exception", f"{label}: {problem}")
                done.append(kind if layer_type is None else f"{kind}/{layer_type}")
        return FamilyResult(model_type, "reproduced", rope_types=sorted(set(done)), rotation=checked)


def _even_head_dim(text) -> None:
    """A default config whose head dim gives an odd rotary dim (hidden_size // heads = 42 with factor 0.5, 73) is no
    model anyone ships: give it head_dim 128, as the released checkpoints of those families have."""
    try:
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    except Exception:  # heterogeneous or head-less configs: from_config reports them
        return
    params = text.rope_parameters
    partial = params.get("partial_rotary_factor", 1.0) if _nested_types(params) == [None] else 1.0
    if int(head_dim * partial) % 2:
        text.head_dim = 128


def _needs_layer_type(config, rotary_cls) -> bool:
    """A family whose rotary class is keyed by layer type although its default rope dict is flat (Laguna, ...)."""
    if not getattr(_text(config), "layer_types", None):
        return False
    try:
        _hf_cos_sin(rotary_cls(_text(config)), torch.arange(4), None, 16)
    except KeyError:
        return True
    except Exception:
        return False
    return False


def _ignores(variant, config, rotary_cls, positions) -> bool:
    """True when the family's rotary class gives the same cos/sin for ``variant`` as for its default config."""
    try:
        a = _hf_cos_sin(rotary_cls(_text(variant)), positions, None, 16)[0]
        b = _hf_cos_sin(rotary_cls(_text(config)), positions, None, 16)[0]
    except Exception:
        return True
    return a.shape == b.shape and torch.allclose(a, b)


def run(*, sample: int | None = None, all_types: bool = False, long: bool = False) -> list[FamilyResult]:
    """Every family (or every ``sample``-th of them, by name), own rope type only unless ``all_types``."""
    g = torch.Generator().manual_seed(0)
    length = 160 if long else 24
    positions_1d = torch.arange(length)
    positions_3d = torch.randint(0, length, (length, 3), generator=g)
    families = rope_model_types()
    if sample is not None:
        families = families[::sample]
    return [check_family(t, m, all_types=all_types, positions_1d=positions_1d, positions_3d=positions_3d)
            for t, m in families]


def table(results: list[FamilyResult]) -> str:
    counted = [r for r in results if r.status != "not counted"]
    good = [r for r in counted if r.status == "reproduced"]
    lines = [f"families reproduced: {len(good)} / {len(counted)} ({100 * len(good) / max(len(counted), 1):.1f}%)",
             f"not counted (no text-level rope_parameters): {len(results) - len(counted)}", "",
             "| family | why not reproduced |", "|---|---|"]
    lines += [f"| {r.model_type} | {r.reason} |" for r in counted if r.status == "exception"]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    results = run(all_types="--all-types" in sys.argv, long="--long" in sys.argv)
    print(table(results))
    if "--types" in sys.argv:
        for r in results:
            if r.status == "reproduced":
                print(r.model_type, r.rope_types)
