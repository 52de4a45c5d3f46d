"""omnipos: positional encodings for transformers across time series, vision, graphs and DNA."""

__version__ = "0.1.0"
