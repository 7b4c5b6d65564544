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

#: The tables an import of conversations and memories writes (the LoCoMo evaluation's), the search
#: sidecars among them.
IMPORTED_TABLES = (
    "history_conversation",
    "history_message",
    "history_messagesearchdocument",
    "history_messagesourceevidence",
    "memory_memoryentry",
    "memory_memoryrevision",
    "memory_memoryevidence",
    "memory_revisionsearchdocument",
)
#: The vectors' tables, which exist only on a server with pgvector.
EMBEDDING_TABLES = ("memory_messageembedding", "memory_revisionembedding")
#: The tables a corpus load writes and the grants recall's eligibility reads.
CORPUS_TABLES = (*IMPORTED_TABLES, "memory_sharinggrant")
#: The GIN indexes of some tables (``%s``: their names), whose pending lists a running system's
#: autovacuum empties.
_GIN_INDEXES = (
    "SELECT i.indexrelid::regclass::text FROM pg_index i"
    " JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam"
    " WHERE am.amname = 'gin' AND i.indrelid = ANY(%s::regclass[]) ORDER BY 1"
)


def settle(tables: Sequence[str] = CORPUS_TABLES) -> None:
    """Bring freshly loaded tables to the state a running system keeps them in before measuring:
    planner statistics and GIN pending lists emptied, as autovacuum does. A plain ``ANALYZE`` leaves a
    bulk load's entries in the pending lists, which every search then scans, and the planner, seeing
    them, reads every sidecar row instead of the index. Outside a transaction ``VACUUM (ANALYZE)`` does
    both; VACUUM cannot run inside one (a test's, an evaluation's that is rolled back), so there the
    lists are emptied by ``gin_clean_pending_list`` and the tables analysed (which counts the
    transaction's own rows)."""
    with connection.cursor() as cursor:
        if not connection.in_atomic_block:
            for table in tables:
                cursor.execute(f"VACUUM (ANALYZE) {table}")
            return
        cursor.execute(_GIN_INDEXES, [list(tables)])
        for (index,) in cursor.fetchall():
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index])
        cursor.execute(f"ANALYZE {', '.join(tables)}")


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
