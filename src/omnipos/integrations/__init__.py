"""Thin adapters that put omnipos into other libraries' models."""
