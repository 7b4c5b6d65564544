"""Tooling shared by the benchmark and load commands: corpus specs (``corpus``), the loopback API
server they drive over HTTP (``server``), the statistics they report (``stats``), and the TypeScript
client built and driven from Python (``typescript_client``, which the client's tests build with too)."""
