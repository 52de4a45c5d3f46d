"""The tqdm adapter the command line hands to library functions."""

import pytest

from omnipos.app.progress import tqdm_progress
from omnipos.core import progress_reporter


def test_tqdm_callable_moves_a_bar_to_done(capsys):
    pytest.importorskip("tqdm")
    callback = tqdm_progress(desc="reads", unit=" reads")
    with progress_reporter(callback, total=10) as bar:
        bar.update(3)
        bar.update(7)
    assert callback._bar.n == 10 and callback._bar.total == 10
    assert "reads" in capsys.readouterr().err


def test_disabled_is_false():
    assert tqdm_progress(False) is False
