"""progress= for long-running library functions: silent, a plain stderr line, or a (done, total) callable."""

import pytest

from omnipos.core import progress_reporter


def test_silent_for_false_and_none(capsys):
    for value in (False, None):
        with progress_reporter(value, total=3, desc="x") as bar:
            bar.update(2)
            bar.update()
        assert bar.done == 3
    assert capsys.readouterr().err == ""


def test_true_writes_one_line_on_stderr(capsys):
    with progress_reporter(True, total=4, desc="shards") as bar:
        bar.update(4)
    err = capsys.readouterr().err
    assert "shards: 4/4 (100%)" in err and err.endswith("\n")


def test_callable_receives_done_and_total():
    calls = []
    with progress_reporter(lambda done, total: calls.append((done, total))) as bar:
        bar.update(5)
        bar.update(2)
    assert calls == [(5, None), (7, None)]


def test_close_is_forwarded_to_the_callable():
    class Bar:
        closed = False

        def __call__(self, done, total):
            pass

        def close(self):
            self.closed = True

    target = Bar()
    with progress_reporter(target, total=1):
        pass
    assert target.closed


@pytest.mark.parametrize("bad", ["yes", 1, 0.5])
def test_anything_else_is_a_type_error(bad):
    with pytest.raises(TypeError, match="progress"):
        progress_reporter(bad)
