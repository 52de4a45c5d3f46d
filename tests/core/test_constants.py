"""ConstantBuffers: derived float64 constants survive dtype casts, follow devices, are rebuilt after meta init."""

import copy
import io
import pickle

import torch

from omnipos.core import ConstantBuffers


class Periods(ConstantBuffers):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = tuple(seconds)
        self.scale = torch.nn.Parameter(torch.ones(1))
        self.register_constants()

    def compute_constants(self, device):
        return {"periods": torch.tensor(self.seconds, dtype=torch.float64, device=device)}

    def forward(self, t):
        return torch.remainder(t.to(torch.float64), self.periods).to(self.scale.dtype) * self.scale


SECONDS = (86400.0 * 3650, 0.1, 3600.0)  # ten years overflows float16; 0.1 rounds in float16


def test_dtype_casts_leave_constants_float64_and_set_the_output_dtype():
    module = Periods(SECONDS)
    for convert, dtype in ((torch.nn.Module.half, torch.float16), (torch.nn.Module.bfloat16, torch.bfloat16),
                           (torch.nn.Module.double, torch.float64), (lambda m: m.to(torch.float16), torch.float16)):
        converted = convert(copy.deepcopy(module))
        assert converted.periods.dtype == torch.float64
        torch.testing.assert_close(converted.periods, torch.tensor(SECONDS, dtype=torch.float64), rtol=0, atol=0)
        assert converted.scale.dtype == dtype
        assert converted(torch.tensor([1e9])).dtype == dtype


def test_meta_init_rebuilds_the_constants_on_to_empty():
    with torch.device("meta"):
        module = Periods(SECONDS)
    assert module.periods.is_meta
    module.to_empty(device="cpu")
    torch.testing.assert_close(module.periods, torch.tensor(SECONDS, dtype=torch.float64), rtol=0, atol=0)


def test_constants_are_not_saved_and_survive_copies():
    module = Periods(SECONDS)
    assert "periods" not in module.state_dict()
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    for clone in (copy.deepcopy(module), pickle.loads(pickle.dumps(module)), torch.load(buffer, weights_only=False)):
        torch.testing.assert_close(clone.periods, module.periods, rtol=0, atol=0)
        assert clone.periods.data_ptr() != module.periods.data_ptr()


def test_a_plain_buffer_would_have_been_rounded():
    """The reason for the class: the same constant as an ordinary buffer is inf after .half()."""
    plain = torch.nn.Module()
    plain.register_buffer("periods", torch.tensor(SECONDS, dtype=torch.float64))
    assert torch.isinf(plain.half().periods).any()
