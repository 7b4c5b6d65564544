"""Tooling shared by the benchmark and load commands: corpus specs (``corpus``), the loopback API
server they drive over HTTP (``server``) and the statistics they report (``stats``)."""
