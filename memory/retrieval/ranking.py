"""Fusion and ranking: an explicit, versioned weight vector over inspectable features.

Arms are fused by reciprocal rank (``Σ weight/(k + rank)``, k 60, or 10 where the source arm ranked),
so that arms whose scores are not comparable combine without being calibrated to each other (an arm's
weight, ``ARM_WEIGHTS``, is 1 unless named); the fused relevance is one feature among several. Weights are
configuration, recorded as the policy version on every trace; each item keeps its components and a
one-line reason.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from memory.models import Authority, BeliefType, Lifecycle, Portability
from memory.retrieval.candidates import FEATURE_NAMES, Candidate
from memory.retrieval.query import RecallQuery
from memory.retrieval.safety import model_project

POLICY_VERSION = "retrieval@3"
#: Added to the policy of a recall in which the source arm ranked candidates: its fusion and refill
#: bar differ (``ARM_WEIGHTS``, ``SOURCE_RRF_K``, ``collapse.SOURCE_REFILL_MATCH_RATIO``).
SOURCE_POLICY_TAG = "+source@2"
RRF_K = 60
#: The fusion's constant where the source arm ranked candidates, as history search fuses its arms: a
#: small constant lets the first ranks of three agreeing arms stand further above the rest, and the
#: refill bar, a fraction of the best match, then admits fewer look-alikes. On LoCoMo's development split
#: (hybrid, observations; refill bar 0.5 -> 0.4) it raised recall@10 from 0.637 to 0.651 and lowered
#: the noise ratio from 0.9058 to 0.8916, in every conversation (docs/quality.md, "The source fusion at
#: k 10, and the line a reply answers"). Without the source arm the fusion keeps 60: there k 10 and the
#: refill bar of 0.8 returned half the items and lowered lexical recall@10 from 0.574 to 0.521.
SOURCE_RRF_K = 10

#: Arms whose ranks say "this text answers the query". Subject and conversation only boost.
RELEVANCE_ARMS = ("lexical", "semantic", "source")
#: Each relevance arm's weight in the fusion (1 unless named). The source arm ranks a memory by the
#: message it was learned from, and was the strongest single order when it ranked the whole transcript
#: with history search (LoCoMo observations, dev split: recall@10 0.601 without it, 0.634 at weight 1
#: and 0.643 at weight 2 with the same refill bar, docs/quality.md).
ARM_WEIGHTS = {"source": 2.0}
#: Arms whose items bypass the relevance requirement of a non-empty query.
STANDING_ARMS = ("always_on", "delta")


@dataclass(frozen=True)
class Weights:
    match: float
    subject: float
    #: A memory about one of the people the recall was asked about (``RecallQuery.asked_subject_ids``).
    asked_subject: float
    conversation: float
    salience: float
    confidence: float
    reinforce: float
    authority: float
    scope: float
    utility: float
    penalty: float
    floor: float


PROFILES: dict[str, Weights] = {
    # In-turn recall and the recall verb: relevance to the query dominates.
    "task": Weights(
        match=0.50,
        subject=0.10,
        asked_subject=0.10,
        conversation=0.05,
        salience=0.05,
        confidence=0.10,
        reinforce=0.04,
        authority=0.05,
        scope=0.08,
        utility=0.03,
        penalty=0.30,
        floor=0.30,
    ),
    # The session snapshot: there is no query, so durability and authority decide.
    "core": Weights(
        match=0.0,
        subject=0.25,
        asked_subject=0.0,
        conversation=0.05,
        salience=0.20,
        confidence=0.18,
        reinforce=0.08,
        authority=0.12,
        scope=0.09,
        utility=0.03,
        penalty=0.30,
        floor=0.30,
    ),
}

#: The penalty's place among the features: it subtracts, and every feature before it adds.
PENALTY = FEATURE_NAMES.index("penalty")
ASKED_SUBJECT = FEATURE_NAMES.index("asked_subject")
#: Each profile's weights of the adding features, in ``FEATURE_NAMES`` order (the floor is a threshold),
#: computed once: scoring runs for every candidate.
FEATURE_WEIGHTS: dict[str, tuple[float, ...]] = {
    name: tuple(getattr(weights, feature) for feature in FEATURE_NAMES[:PENALTY]) for name, weights in PROFILES.items()
}

LIFECYCLE_WEIGHT: dict[str, float] = {
    Lifecycle.ACTIVE: 1.0,
    Lifecycle.PROVISIONAL: 0.4,
    Lifecycle.SUPERSEDED: 1.0,
    Lifecycle.EXPIRED: 1.0,
}
AUTHORITY_WEIGHT: dict[str, float] = {Authority.USER_STATED: 1.0, Authority.AFFIRMED: 0.7, Authority.INFERRED: 0.4}
#: Scope affinity of a belief carried out of its origin project, by portability class.
CARRIED_AFFINITY: dict[str, float] = {Portability.PORTABLE: 0.9, Portability.CONTEXTUAL: 0.6, Portability.LOCAL: 0.3}
#: Confidence discount applied to carried beliefs' bands, so they never read as local facts.
CARRIED_CONFIDENCE: dict[str, float] = {Portability.PORTABLE: 1.0, Portability.CONTEXTUAL: 0.8, Portability.LOCAL: 0.6}
#: Reinforcement half-life-like decay constant per belief type, in days.
DECAY_DAYS: dict[str, float] = {
    BeliefType.PREFERENCE: 365,
    BeliefType.USER_MODEL_ATTR: 730,
    BeliefType.RELATIONSHIP: 730,
    BeliefType.INSTRUCTION: 365,
    BeliefType.SKILL: 365,
    BeliefType.PROJECT_FACT: 120,
    BeliefType.DECISION: 180,
    BeliefType.RESOURCE: 90,
    BeliefType.STATUS: 14,
    BeliefType.EVENT: 30,
}
EVIDENCE_SATURATION = 10
LOG_EVIDENCE_SATURATION = math.log1p(EVIDENCE_SATURATION)


class Scorer:
    """Scores the candidates of one recall, in place: the features and their weighted sum, and the
    confidence band (the reason is written by :func:`explain`, for the few items that are rendered).

    What does not depend on the candidate (the profile's weights, the requester, which relevance arms
    ran) is worked out once: a recall scores some 200 candidates.
    """

    def __init__(
        self,
        *,
        query: RecallQuery,
        profile: str,
        project: str,
        arms_run: set[str],
        now: datetime,
        unranked: Mapping[str, Collection[int]] | None = None,
    ) -> None:
        self.weights = PROFILES[profile]
        self.feature_weights = FEATURE_WEIGHTS[profile]
        self.requester = query.subject_ids[0] if query.subject_ids else None
        self.named_subject_ids = query.named_subject_ids
        self.asked_subject_ids = frozenset(query.asked_subject_ids)
        self.has_query = not query.empty
        self.project = project
        self.now = now
        #: The relevance arms that ran, and the fused value of an item ranked first in all of them.
        self.relevance = tuple((arm, ARM_WEIGHTS.get(arm, 1.0)) for arm in RELEVANCE_ARMS if arm in arms_run)
        self.rrf_k = SOURCE_RRF_K if "source" in arms_run else RRF_K
        self.best_possible = sum(weight for _, weight in self.relevance) / (self.rrf_k + 1) if self.relevance else 1.0
        #: Per relevance arm, the revisions it cannot rank yet (the semantic arm before the worker has
        #: embedded a revision written a moment ago).
        self.unranked = {arm: ids for arm, ids in (unranked or {}).items() if ids}

    def match(self, candidate: Candidate) -> float:
        """Weighted reciprocal-rank fusion over the relevance arms, normalised to [0, 1], or the anchor
        weight if higher.

        An arm that cannot rank the candidate yet (``unranked``: no vector until the worker embeds it) is
        left out of its scale, as if it had not been asked, rather than counted as a poor match."""
        fused = 0.0
        possible = 0.0
        for arm, weight in self.relevance:
            if self.unranked and candidate.revision_id in self.unranked.get(arm, ()):
                continue
            possible += weight
            rank = candidate.arms.get(arm)
            if rank is not None:
                fused += weight / (self.rrf_k + rank)
        best = possible / (self.rrf_k + 1) if possible else self.best_possible
        return max(fused / best, candidate.arm_scores.get("anchor", 0.0))

    def __call__(self, candidate: Candidate) -> None:
        carried = candidate.carried = bool(candidate.origin_scope) and candidate.origin_scope != self.project
        age_days = max(0.0, (self.now - candidate.recorded_at).total_seconds() / 86_400)
        subject_id = candidate.subject_id
        match = self.match(candidate) if self.has_query else 0.0
        if subject_id is not None and subject_id == self.requester:
            subject = 1.0
        elif subject_id in self.named_subject_ids:
            subject = 0.8
        else:
            subject = 0.0
        # Evidence only: a memory about someone not asked for scores exactly what it would unasked.
        asked_subject = 1.0 if subject_id is not None and subject_id in self.asked_subject_ids else 0.0
        conversation = 1.0 if candidate.in_conversation or "conversation" in candidate.arms else 0.0
        salience = candidate.salience
        confidence = candidate.confidence * LIFECYCLE_WEIGHT.get(candidate.lifecycle, 1.0)
        reinforce = min(1.0, math.log1p(candidate.evidence_count) / LOG_EVIDENCE_SATURATION) * math.exp(
            -age_days / DECAY_DAYS.get(candidate.belief_type, 180)
        )
        authority = AUTHORITY_WEIGHT.get(candidate.authority, 0.4)
        scope = CARRIED_AFFINITY.get(candidate.portability, 0.3) if carried else 1.0
        utility = 1.0 / (1.0 + math.exp(-candidate.utility))
        penalty = min(1.0, (0.5 if candidate.flagged_for_review else 0.0) + (0.5 if candidate.near_duplicate else 0.0))
        features = (
            *(match, subject, asked_subject, conversation, salience, confidence),
            *(reinforce, authority, scope, utility, penalty),
        )
        total = 0.0
        for weight, value in zip(self.feature_weights, features[:PENALTY], strict=True):
            total += weight * value
        total -= self.weights.penalty * penalty
        candidate.features = features
        candidate.score = round(total, 6)
        # The band reads the confidence feature, discounted for a carried belief.
        effective = confidence * CARRIED_CONFIDENCE.get(candidate.portability, 1.0) if carried else confidence
        candidate.band = "high" if effective >= 0.75 else "medium" if effective >= 0.45 else "low"


def passes_relevance(candidate: Candidate, *, query: RecallQuery, profile: str) -> bool:
    """Non-empty task queries need lexical/semantic relevance (or an anchor); standing items are exempt.
    Below the profile's floor an item is dropped even if budget is left.

    The floor is judged without the asked-subject feature: the subjects a recall names reorder what
    is relevant, they never make an item relevant (a recall with subjects returns what it would
    without, when the budget allows)."""
    if any(arm in candidate.arms for arm in STANDING_ARMS):
        return True
    if profile == "task" and not query.empty and round(candidate.match, 4) <= 0.0:
        return False
    weights = PROFILES[profile]
    asked = weights.asked_subject * candidate.features[ASKED_SUBJECT] if candidate.features else 0.0
    return round(candidate.score - asked, 6) >= weights.floor


def explain(candidate: Candidate) -> str:
    """The one-line reason shown with a scored item: its arms and ranks, then the features that moved it."""
    features = candidate.components
    parts = [f"{arm} #{rank}" for arm, rank in sorted(candidate.arms.items(), key=lambda kv: (kv[1], kv[0]))]
    if candidate.paired:
        parts.append("beside the belief it conflicts with")
    if features["subject"] >= 1.0:
        parts.append("about the requester")
    elif features["subject"] > 0:
        parts.append("about someone named")
    if features["asked_subject"]:
        parts.append("about a subject asked for")
    if features["conversation"]:
        parts.append("from this conversation")
    if candidate.carried:
        parts.append(f"carried from {model_project(candidate.origin_scope)}")
    if features["penalty"]:
        parts.append("penalised (flagged or near-duplicate)")
    return ", ".join(parts)[:300]
