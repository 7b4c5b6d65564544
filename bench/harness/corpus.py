"""What a benchmark corpus is made of, shared by the commands that build one.

A corpus deals ``revisions`` memories and ``messages`` messages evenly over ``agents`` agents. Each
command names its agents after the arguments that shaped them (its ``name_format``), so a second run
with the same arguments finds its corpus and reuses it, and the agent at an index holds the same
share whatever else the database holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from django.conf import settings
from django.db import connection

from bench.management.commands.eval_locomo import ANALYZED_TABLES

#: The tables a corpus load writes (those the LoCoMo evaluation analyses after its import, the search
#: sidecars and vectors among them) and the grants recall's eligibility reads.
CORPUS_TABLES = (*ANALYZED_TABLES, "memory_sharinggrant")


def settle(tables: Sequence[str] = CORPUS_TABLES) -> None:
    """Bring freshly loaded tables to the state a running system keeps them in before measuring:
    planner statistics and, outside a transaction, GIN pending lists emptied (``VACUUM (ANALYZE)``, as
    autovacuum does). A plain ``ANALYZE`` leaves a bulk load's entries in the pending lists, which
    every search then scans. VACUUM cannot run inside a transaction (a test's): there ANALYZE alone
    still gives the planner its statistics."""
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"{'ANALYZE' if connection.in_atomic_block else 'VACUUM (ANALYZE)'} {table}")


#: Where the benchmark data folder (``bench/``) is looked for, in order, unless ENGRAM_BENCH_DIR names it:
#: ``shared/`` beside the checkout, then the workspace's shared folder (a clone elsewhere still finds it).
BENCH_DATA_CANDIDATES = (Path(settings.BASE_DIR).parent / "shared" / "bench", Path("/work/shared/bench"))


def locomo_dev_path() -> Path:
    """The LoCoMo dev file the corpora take their text from: ``$ENGRAM_BENCH_DIR/locomo/locomo_dev.json``,
    else the first of ``BENCH_DATA_CANDIDATES`` that holds it (the first, for the error, if none does)."""
    relative = Path("locomo") / "locomo_dev.json"
    if named := settings.ENGRAM_BENCH_DIR:
        return Path(named) / relative
    found = [folder / relative for folder in BENCH_DATA_CANDIDATES if (folder / relative).exists()]
    return found[0] if found else BENCH_DATA_CANDIDATES[0] / relative


def share(total: int, parts: int, index: int) -> int:
    """Part ``index`` of ``total`` dealt over ``parts``: the first ``total % parts`` parts get one more."""
    return total // parts + (1 if index < total % parts else 0)


@dataclass(frozen=True)
class CorpusSpec:
    agents: int
    seed: int
    revisions: int = 0
    messages: int = 0

    #: ``str.format`` of the agent name over the fields and ``index``.
    name_format: ClassVar[str] = "bench-r{revisions}-m{messages}-a{agents}-s{seed}-{index:03d}"

    def agent_name(self, index: int) -> str:
        return self.name_format.format(
            revisions=self.revisions, messages=self.messages, agents=self.agents, seed=self.seed, index=index
        )

    def revisions_of(self, index: int) -> int:
        return share(self.revisions, self.agents, index)

    def messages_of(self, index: int) -> int:
        return share(self.messages, self.agents, index)
