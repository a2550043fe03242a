"""Maintainer tooling: the compatibility matrix, pull requests, writing trees back as the series, the pins."""
