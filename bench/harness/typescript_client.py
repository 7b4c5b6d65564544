"""The TypeScript client (``clients/typescript``) built for a run, and driven from Python.

:func:`build` installs its development dependencies with ``npm ci`` when ``node_modules`` was not
installed from the current lockfile and compiles it with ``npm run build`` when ``dist/`` was not built
from the current sources (stamps record both digests), under a file lock, so two processes on one
checkout (pytest's two passes, a benchmark beside a test run) never rewrite it under each other.
The client's tests (``tests/clients``) and ``bench_turn --clients typescript`` both start here.

:class:`TypeScriptRuntime` runs ``clients/typescript/bench/runtime.mjs``, one Node process that takes
one JSON request a line on its standard input (a client method and its arguments), awaits the call
through ``engram-client`` and answers one JSON line: the result and the call's wall time measured in
Node around the awaited call, or the error's class and code.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

TYPESCRIPT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
#: The oldest Node.js the client supports (its package.json's ``engines``).
NODE_MAJOR = 20


class ClientUnavailable(RuntimeError):
    """Node.js is missing or too old, or the client could not be installed or built."""


def build() -> Path:
    """``clients/typescript`` with its ``dist/`` built from the current sources; its folder."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise ClientUnavailable(
            f"the TypeScript client needs Node.js >= {NODE_MAJOR} and npm on PATH (Debian: apt-get install nodejs "
            "npm); none found"
        )
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    major = re.match(r"v(\d+)\.", version)
    if major is None or int(major.group(1)) < NODE_MAJOR:
        raise ClientUnavailable(f"the TypeScript client needs Node.js >= {NODE_MAJOR}; found {version}")
    installed = _digest([TYPESCRIPT / "package-lock.json"])
    built = _digest([TYPESCRIPT / "package-lock.json", TYPESCRIPT / "tsconfig.json", *(TYPESCRIPT / "src").rglob("*")])
    installed_stamp = TYPESCRIPT / "node_modules" / ".engram-lockfile.sha256"
    # Beside the installed modules, not in dist/, which is what a packed copy ships.
    built_stamp = TYPESCRIPT / "node_modules" / ".engram-sources.sha256"
    with (TYPESCRIPT / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _stamped(installed_stamp, installed):
            _npm("ci", "--no-audit", "--no-fund")
            installed_stamp.write_text(installed)
        if not _stamped(built_stamp, built) or not (TYPESCRIPT / "dist" / "index.js").is_file():
            shutil.rmtree(TYPESCRIPT / "dist", ignore_errors=True)
            _npm("run", "build")
            built_stamp.write_text(built)
    return TYPESCRIPT


def _npm(*args: str) -> None:
    done = subprocess.run(["npm", *args], cwd=TYPESCRIPT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        command = " ".join(args)
        raise ClientUnavailable(
            f"npm {command} failed in {TYPESCRIPT} (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
        )


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in paths if p.is_file()):
        digest.update(str(path.relative_to(TYPESCRIPT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _stamped(stamp: Path, digest: str) -> bool:
    return stamp.is_file() and stamp.read_text().strip() == digest


class RuntimeFailed(RuntimeError):
    """A call through the TypeScript client failed: ``kind`` is its error class, ``code`` the API's code
    and ``ms`` the call's wall time."""

    def __init__(self, kind: str, code: str, message: str, ms: float = 0.0) -> None:
        super().__init__(f"{kind} {code}: {message}")
        self.kind = kind
        self.code = code
        self.ms = ms


class TypeScriptRuntime:
    """One Node process holding one ``Engram`` client of ``base_url`` with the key ``secret``."""

    def __init__(self, base_url: str, secret: str, *, timeout: float) -> None:
        folder = build()
        config = json.dumps({"baseUrl": base_url, "apiKey": secret, "timeout": timeout})
        self.process = subprocess.Popen(
            ["node", str(folder / "bench" / "runtime.mjs"), config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def call(self, method: str, *args: Any) -> tuple[Any, float]:
        """``engram[method](*args)`` in Node: its result as JSON and its wall time in ms, as Node timed it."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"method": method, "args": args}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeFailed("exited", str(self.process.poll()), "the Node process ended")
        answer = json.loads(line)
        if "error" in answer:
            error = answer["error"]
            raise RuntimeFailed(error["name"], error["code"], error["message"], float(answer.get("ms", 0.0)))
        return answer["value"], float(answer["ms"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
