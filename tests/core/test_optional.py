"""core.require: the one helper that turns a missing optional package into an ImportError naming its extra."""

from __future__ import annotations

import json

import pytest

from omnipos.core import require


def test_returns_the_module_dotted_names_included():
    assert require("json", "clinical", "anything") is json
    decoder = require("json.decoder", "clinical", "anything")
    assert decoder.__name__ == "json.decoder"


def test_missing_package_names_the_extra_and_keeps_the_cause():
    with pytest.raises(ImportError, match=r'the widget needs omnipos_no_such_pkg: pip install "omnipos\[graph\]"') \
            as info:
        require("omnipos_no_such_pkg.sub", "graph", "the widget", hint=" (or pass parser='python')")
    assert str(info.value).endswith("(or pass parser='python')")
    assert isinstance(info.value.__cause__, ImportError)
