"""Compile a Triton kernel for an NVIDIA target without a GPU (Triton's own compiler and the ptxas it ships): the
device branch of a kernel (libdevice calls, launch options) lowers to PTX, which Triton's interpreter never shows."""

import pytest


def compile_for(fn, types: dict, constexprs: dict, *, capability: int = 90, **options):
    """``fn`` compiled for ``cuda`` ``sm_<capability>`` with argument ``types`` (``"*fp32"``, ``"i32"``, ...) and
    ``constexprs`` (name -> value); returns the PTX text. Skips where Triton cannot compile here."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = dict(types)
    signature.update({name: "constexpr" for name in constexprs})
    source = ASTSource(fn=fn, signature=signature,
                       constexprs={(fn.arg_names.index(name),): value for name, value in constexprs.items()})
    try:
        kernel = triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)
    except (FileNotFoundError, RuntimeError) as err:  # no ptxas / no NVIDIA backend in this installation
        if "ptxas" in str(err) or "backend" in str(err).lower():
            pytest.skip(f"Triton cannot compile for sm_{capability} here: {err}")
        raise
    return kernel.asm["ptx"]
