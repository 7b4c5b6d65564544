"""A tolerant reader for conversations in the LoCoMo benchmark's schema.

LoCoMo ("Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL 2024) ships a JSON list
of conversations: ``sample_id``; ``conversation`` with ``speaker_a``, ``speaker_b``,
``session_N_date_time`` ("1:56 pm on 8 May, 2023") and ``session_N`` turn lists (``speaker``,
``dia_id`` "D3:12", ``text`` and, for image turns, ``img_url``, ``blip_caption``, ``query``);
``observation`` (per session and speaker, ``[fact, dia_id]`` pairs); and ``qa``.

Upstream data has a few malformed evidence ids. They are normalised here, and every repair or drop
is counted in ``NormalisationReport`` so an evaluation can say exactly what it scored:

- an entry holding several ids ("D8:6; D9:17") is split into each of them;
- stray separators and zero padding are removed ("D:11:26" -> "D11:26", "D30:05" -> "D30:5");
- an entry that is no id at all ("D") is dropped as malformed;
- an id naming a turn the conversation does not have is dropped as missing.

Session dates carry no time zone; they are read as UTC. Turns within a session get increasing
timestamps one minute apart, in file order, so a transcript sorts the way it was spoken.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: Spacing between consecutive turns of one session.
TURN_SPACING = timedelta(minutes=1)
#: Stand-in start for a first session whose date cannot be read.
FALLBACK_START = datetime(2000, 1, 1, tzinfo=UTC)

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_DATE = re.compile(
    r"(?:(?P<hour>\d{1,2})[:.](?P<minute>\d{2})\s*(?P<meridiem>[ap])\.?\s*m\.?\s*(?:on\s+)?)?"
    r"(?P<day>\d{1,2})\s+(?P<month>[a-z]+)\.?,?\s+(?P<year>\d{4})",
    re.IGNORECASE,
)
_DIA_ID = re.compile(r"D:?(\d+):(\d+)", re.IGNORECASE)
_SESSION_KEY = re.compile(r"session_(\d+)")
_ID_SEPARATORS = re.compile(r"[;,\s]+")


def parse_session_datetime(text: str) -> datetime | None:
    """Read "1:56 pm on 8 May, 2023" (or "8 May 2023") as an aware UTC datetime; None if unreadable."""
    match = _DATE.search(text or "")
    if match is None:
        return None
    month = _MONTHS.get(match["month"].lower())
    if month is None:
        return None
    hour = minute = 0
    if match["hour"] is not None:
        hour, minute = int(match["hour"]) % 12, int(match["minute"])
        if match["meridiem"].lower() == "p":
            hour += 12
    try:
        return datetime(int(match["year"]), month, int(match["day"]), hour, minute, tzinfo=UTC)
    except ValueError:
        return None


def canonical_dia_id(token: str) -> str | None:
    """The canonical form "D<session>:<turn>" of one id token, or None if it is not an id."""
    match = _DIA_ID.fullmatch(token.strip())
    if match is None:
        return None
    return f"D{int(match[1])}:{int(match[2])}"


@dataclass
class NormalisationReport:
    """What normalising evidence ids and reading turns changed, summed over a file."""

    evidence_kept: int = 0
    evidence_split: int = 0  # entries that held several ids
    evidence_reformatted: int = 0  # ids rewritten to the canonical form
    evidence_dropped_malformed: int = 0
    evidence_dropped_missing: int = 0  # well-formed ids naming a turn that does not exist
    turn_ids_repaired: int = 0
    turns_skipped_empty: int = 0
    dates_unparsed: int = 0
    observations_dropped: int = 0  # no source id left after normalising
    examples: list[str] = field(default_factory=list)

    def note(self, example: str) -> None:
        if len(self.examples) < 20:
            self.examples.append(example)

    def merge(self, other: NormalisationReport) -> None:
        for name in (
            "evidence_kept",
            "evidence_split",
            "evidence_reformatted",
            "evidence_dropped_malformed",
            "evidence_dropped_missing",
            "turn_ids_repaired",
            "turns_skipped_empty",
            "dates_unparsed",
            "observations_dropped",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for example in other.examples:
            self.note(example)

    def summary(self) -> str:
        return (
            f"evidence ids: {self.evidence_kept} kept, {self.evidence_split} combined entries split, "
            f"{self.evidence_reformatted} reformatted, {self.evidence_dropped_malformed} dropped as malformed, "
            f"{self.evidence_dropped_missing} dropped as naming no turn; turns: {self.turn_ids_repaired} ids "
            f"repaired, {self.turns_skipped_empty} empty skipped; {self.dates_unparsed} session dates unreadable; "
            f"{self.observations_dropped} observations without a source turn dropped"
        )


@dataclass(frozen=True)
class LocomoTurn:
    dia_id: str
    session: int
    speaker: str
    text: str
    created_at: datetime
    image_caption: str = ""


@dataclass(frozen=True)
class LocomoSession:
    number: int
    started_at: datetime
    turns: tuple[LocomoTurn, ...]


@dataclass(frozen=True)
class LocomoQuestion:
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]
    #: Category 5 questions have a false premise; ``answer`` is then upstream's ``adversarial_answer``.
    adversarial: bool = False


@dataclass(frozen=True)
class LocomoObservation:
    """A fact distilled from the conversation, with the turns it came from (the first is ``dia_id``)."""

    speaker: str
    fact: str
    dia_ids: tuple[str, ...]
    session: int

    @property
    def dia_id(self) -> str:
        return self.dia_ids[0]


@dataclass(frozen=True)
class LocomoConversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[LocomoSession, ...]
    questions: tuple[LocomoQuestion, ...]
    observations: tuple[LocomoObservation, ...]

    @property
    def turns(self) -> Iterator[LocomoTurn]:
        for session in self.sessions:
            yield from session.turns

    @property
    def turn_count(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    @property
    def speakers(self) -> tuple[str, ...]:
        """Both named speakers first, then anyone else who spoke, in order of appearance."""
        names = dict.fromkeys([self.speaker_a, self.speaker_b])
        names.update(dict.fromkeys(t.speaker for t in self.turns))
        return tuple(n for n in names if n)


@dataclass(frozen=True)
class LocomoFile:
    conversations: tuple[LocomoConversation, ...]
    report: NormalisationReport


def load_locomo(path: str | Path) -> LocomoFile:
    with Path(path).open(encoding="utf-8") as handle:
        return parse_locomo(json.load(handle))


def parse_locomo(data: Any) -> LocomoFile:
    """Parse a decoded LoCoMo file: a list of conversations (a single conversation object also works)."""
    items = [data] if isinstance(data, dict) else list(data or [])
    report = NormalisationReport()
    conversations = []
    for position, item in enumerate(items):
        conversation_report = NormalisationReport()
        conversations.append(parse_conversation(item, conversation_report, default_id=f"conv-{position + 1}"))
        report.merge(conversation_report)
    return LocomoFile(conversations=tuple(conversations), report=report)


def parse_conversation(item: dict[str, Any], report: NormalisationReport, *, default_id: str) -> LocomoConversation:
    sample_id = str(item.get("sample_id") or default_id)
    body = item.get("conversation") or {}
    sessions = _parse_sessions(sample_id, body, report)
    known = {turn.dia_id for session in sessions for turn in session.turns}
    speakers = list(dict.fromkeys(t.speaker for s in sessions for t in s.turns))
    speaker_a = str(body.get("speaker_a") or (speakers[0] if speakers else ""))
    speaker_b = str(body.get("speaker_b") or next((s for s in speakers if s != speaker_a), ""))
    questions = tuple(_parse_question(sample_id, qa, known, report) for qa in item.get("qa") or [])
    observations = tuple(_parse_observations(sample_id, item.get("observation") or {}, known, report))
    return LocomoConversation(
        sample_id=sample_id,
        speaker_a=speaker_a,
        speaker_b=speaker_b,
        sessions=sessions,
        questions=questions,
        observations=observations,
    )


def _parse_sessions(sample_id: str, body: dict[str, Any], report: NormalisationReport) -> tuple[LocomoSession, ...]:
    numbers = sorted(
        int(match[1])
        for key, value in body.items()
        if (match := _SESSION_KEY.fullmatch(key)) is not None and isinstance(value, list)
    )
    sessions: list[LocomoSession] = []
    previous_end: datetime | None = None
    for number in numbers:
        started_at = parse_session_datetime(str(body.get(f"session_{number}_date_time") or ""))
        if started_at is None:
            report.dates_unparsed += 1
            report.note(f"{sample_id} session {number}: unreadable date {body.get(f'session_{number}_date_time')!r}")
            # Keep the transcript in order: an undated session follows the previous one.
            started_at = previous_end + timedelta(days=1) if previous_end is not None else FALLBACK_START
        turns: list[LocomoTurn] = []
        seen: set[str] = set()
        for position, raw in enumerate(body[f"session_{number}"], start=1):
            turn = _parse_turn(sample_id, number, position, raw, started_at + TURN_SPACING * len(turns), seen, report)
            if turn is not None:
                turns.append(turn)
                seen.add(turn.dia_id)
        if turns:
            sessions.append(LocomoSession(number=number, started_at=started_at, turns=tuple(turns)))
            previous_end = turns[-1].created_at
    return tuple(sessions)


def _parse_turn(
    sample_id: str,
    session: int,
    position: int,
    raw: Any,
    created_at: datetime,
    seen: set[str],
    report: NormalisationReport,
) -> LocomoTurn | None:
    if not isinstance(raw, dict):
        report.turns_skipped_empty += 1
        return None
    text = str(raw.get("text") or "").strip()
    caption = str(raw.get("blip_caption") or "").strip()
    if caption:
        text = f"{text} [image: {caption}]" if text else f"[image: {caption}]"
    if not text:
        report.turns_skipped_empty += 1
        return None
    raw_id = str(raw.get("dia_id") or "")
    dia_id = canonical_dia_id(raw_id)
    if dia_id is None or dia_id in seen:
        # Evidence refers to turns by id, so an unusable one is replaced by its position in the session.
        dia_id = f"D{session}:{position}"
        report.turn_ids_repaired += 1
        report.note(f"{sample_id}: turn id {raw_id!r} -> {dia_id}")
    elif dia_id != raw_id:
        report.turn_ids_repaired += 1
    return LocomoTurn(
        dia_id=dia_id,
        session=session,
        speaker=str(raw.get("speaker") or "").strip() or "unknown speaker",
        text=text,
        created_at=created_at,
        image_caption=caption,
    )


def normalise_evidence(raw: Any, known: set[str], report: NormalisationReport, *, where: str = "") -> tuple[str, ...]:
    """Canonical, existing, de-duplicated turn ids from an evidence list (or a single string)."""
    entries: Iterable[Any] = [raw] if isinstance(raw, str) else (raw or [])
    result: dict[str, None] = {}
    for entry in entries:
        tokens = [t for t in _ID_SEPARATORS.split(str(entry).strip()) if t]
        if len(tokens) > 1:
            report.evidence_split += 1
            report.note(f"{where}: split {entry!r}")
        if not tokens:
            report.evidence_dropped_malformed += 1
            report.note(f"{where}: dropped empty evidence {entry!r}")
        for token in tokens:
            dia_id = canonical_dia_id(token)
            if dia_id is None:
                report.evidence_dropped_malformed += 1
                report.note(f"{where}: dropped malformed {token!r}")
                continue
            if dia_id != token:
                report.evidence_reformatted += 1
                report.note(f"{where}: {token!r} -> {dia_id}")
            if dia_id not in known:
                report.evidence_dropped_missing += 1
                report.note(f"{where}: dropped {dia_id} (no such turn)")
                continue
            if dia_id not in result:
                report.evidence_kept += 1
                result[dia_id] = None
    return tuple(result)


def _parse_question(sample_id: str, qa: dict[str, Any], known: set[str], report: NormalisationReport) -> LocomoQuestion:
    adversarial = qa.get("answer") is None and qa.get("adversarial_answer") is not None
    answer = qa.get("adversarial_answer") if adversarial else qa.get("answer")
    try:
        category = int(qa.get("category") or 0)
    except (TypeError, ValueError):
        category = 0
    question = str(qa.get("question") or "")
    return LocomoQuestion(
        question=question,
        answer="" if answer is None else str(answer),
        category=category,
        evidence=normalise_evidence(qa.get("evidence"), known, report, where=f"{sample_id} qa {question[:40]!r}"),
        adversarial=adversarial,
    )


def _parse_observations(
    sample_id: str, observation: dict[str, Any], known: set[str], report: NormalisationReport
) -> Iterator[LocomoObservation]:
    for key, per_speaker in observation.items():
        match = re.search(r"session_(\d+)", key)
        if match is None or not isinstance(per_speaker, dict):
            continue
        for speaker, facts in per_speaker.items():
            for item in facts or []:
                sources: Any
                if isinstance(item, str):
                    fact, sources = item, []
                elif isinstance(item, list | tuple) and item:
                    fact, sources = str(item[0]), item[1] if len(item) > 1 else []
                else:
                    continue
                # Observation sources are counted apart, so the evidence counters describe questions only.
                dia_ids = normalise_evidence(sources, known, NormalisationReport())
                if not (fact.strip() and dia_ids):
                    report.observations_dropped += 1
                    report.note(f"{sample_id}: dropped observation {fact[:40]!r} (sources {sources!r})")
                else:
                    yield LocomoObservation(speaker=speaker, fact=fact.strip(), dia_ids=dia_ids, session=int(match[1]))
