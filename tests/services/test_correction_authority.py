"""Who may correct a memory (docs/corrections.md): the person it is about, the person who said it and
the tenant's operators apply *not true*, *was true, has changed* and *true elsewhere, not here*;
anyone else who was shown it files a report for review, which changes no revision. A correction's
revision carries the corrector's own authority and names them; it never inherits the original's.

The rule is enforced in the service (``rejection_record``), so every surface that records a
rejection gets it; the turn page only words it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from accounts.models import Actor, IdentityLink, OperatorScope, RuntimeAgent, UserActor
from config.errors import Conflict, NotFound, Unprocessable
from demo.management.commands.load_demo import AGENT_NAME, load
from history.models import Conversation, EvidenceMethod, Turn
from history.services import message_ingest
from memory.models import (
    Authority,
    CorrectionRelation,
    EntryStatus,
    EvidenceKind,
    MemoryEntry,
    MemoryEvidence,
    MemoryRevision,
    Portability,
    RecallTraceItem,
    Rejection,
    RejectionKind,
    RevisionOrigin,
)
from memory.rejections import CORRECTION_AUTHORITY, rejection_record
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import form_query
from memory.retrieval.service import RecallResult, recall, task_budget
from memory.selectors import correction_relations
from memory.services import Belief, Provenance, memory_remember
from memory.turns import session_open, turn_start
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, TenantFactory, public_channel

pytestmark = pytest.mark.django_db

FRIDAYS = "Is offline on Friday afternoons (coaches a youth football team)."
REWRITE = "Sam is available all day Friday and loves weekend on-call."
QUESTION = "Is Sam around on Friday afternoons?"
DIRECT = (CorrectionRelation.SUBJECT, CorrectionRelation.SOURCE, CorrectionRelation.OPERATOR)
KINDS = (RejectionKind.NOT_TRUE, RejectionKind.CHANGED, RejectionKind.NOT_HERE)


@dataclass
class Team:
    """Rita told the agent in #team (project atlas) that Sam is offline on Friday afternoons; then Bea
    asked about Sam in #lounge, where the belief was recalled (carried out of atlas). Each of Sam,
    Rita and Bea logs in as themselves; the operator is staff scoped to the tenant."""

    agent: RuntimeAgent
    sam: Actor
    rita: Actor
    bea: Actor
    users: dict[str, User]
    revision: MemoryRevision
    turn: Turn
    item: RecallTraceItem

    def entry(self) -> MemoryEntry:
        return MemoryEntry.objects.get(pk=self.revision.entry_id)

    def recall_in(self, conversation: Conversation, who: Actor, text: str = QUESTION) -> RecallResult:
        return recall(
            perspective=perspective_for_conversation(conversation, requester_id=who.pk),
            query=form_query(
                message=text, requester_id=who.pk, known_actors=list(Actor.objects.filter(connector__agent=self.agent))
            ),
            budget=task_budget(),
        )


def ask(agent: RuntimeAgent, conversation: Conversation, who: Actor, text: str) -> tuple[Turn, RecallResult]:
    """A turn for ``who``'s message, with its in-turn recall traced, as an agent runtime starts one."""
    message = message_ingest(
        conversation=conversation,
        actor=who,
        body=text,
        created_at=timezone.now(),
        evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
    ).message
    session, _ = session_open(agent=agent, conversation_id=conversation.pk, requester_id=who.pk)
    return turn_start(session=session, inbound_message_id=message.pk)


def login(username: str, *actors: Actor) -> User:
    user = User.objects.create_user(username=username)
    for actor in actors:
        UserActor.objects.create(user=user, actor=actor)
    return user


@pytest.fixture
def team(db: None) -> Team:
    agent = AgentFactory.create()
    slack = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    sam, rita, bea = (
        ActorFactory.create(connector=slack, display_name=name, external_id=ext)
        for name, ext in (("Sam", "U1SAM"), ("Rita", "U2RITA"), ("Bea", "U3BEA"))
    )
    channel = public_channel(slack, project="atlas", external_thread_id="C-team")
    lounge = public_channel(slack, external_thread_id="C-lounge")
    said = message_ingest(
        conversation=channel,
        actor=rita,
        body="Sam is offline on Friday afternoons, he coaches football.",
        created_at=timezone.now(),
        evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
    ).message
    revision = memory_remember(
        agent=agent,
        belief=Belief(
            body=FRIDAYS, belief_type="user_model_attr", subject_id=sam.pk, authority="user_stated", confidence=0.9
        ),
        provenance=Provenance(source_message_id=said.pk),
    ).revision
    turn, result = ask(agent, lounge, bea, QUESTION)
    item = RecallTraceItem.objects.get(trace_id=result.trace_id, revision=revision)
    assert item.carried  # learned in atlas, recalled outside it: "not here" has an elsewhere
    operator = User.objects.create_user(username="operator", is_staff=True)
    OperatorScope.objects.create(user=operator, tenant=agent.tenant)
    users: dict[str, User] = {
        CorrectionRelation.SUBJECT: login("sam", sam),
        CorrectionRelation.SOURCE: login("rita", rita),
        CorrectionRelation.OPERATOR: operator,
        CorrectionRelation.BYSTANDER: login("bea", bea),
    }
    return Team(agent, sam, rita, bea, users, revision, turn, item)


def correction_text(kind: str) -> str:
    return REWRITE if kind == RejectionKind.CHANGED else ""


# --- each kind x each relation ------------------------------------------------------------------


def test_the_relation_of_each_login_to_the_belief(team: Team) -> None:
    """The subject, the source, an operator of the tenant and anyone else, each recognised as such."""
    for relation, user in team.users.items():
        assert correction_relations(user, [team.revision]) == {team.revision.pk: relation}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("relation", DIRECT)
def test_the_subject_the_source_and_an_operator_apply_each_correction_directly(
    team: Team, relation: str, kind: str
) -> None:
    """Not true retires; has changed writes the corrector's statement; not here rescopes. The event
    records who did it and by what relation; nothing goes to review."""
    user = team.users[relation]
    rejection = rejection_record(user=user, trace_item_id=team.item.pk, kind=kind, correction=correction_text(kind))
    assert (rejection.kind, rejection.requested_kind, rejection.relation) == (kind, kind, relation)
    assert rejection.user == user
    entry = team.entry()
    assert not entry.flagged_for_review
    if kind == RejectionKind.NOT_TRUE:
        assert entry.status == EntryStatus.FORGOTTEN and rejection.resulting_revision is None
        assert entry.current_revision_id == team.revision.pk
        return
    new = entry.current_revision
    assert new is not None and new.supersedes_id == team.revision.pk and rejection.resulting_revision == new
    assert (entry.status, new.created_by, new.created_by_user) == (
        EntryStatus.LIVE,
        RevisionOrigin.USER_CORRECTION,
        user,
    )
    assert new.audience == team.revision.audience  # disclosed exactly where the belief it replaces was
    if kind == RejectionKind.NOT_HERE:
        assert (new.body, new.portability) == (FRIDAYS, Portability.LOCAL)


@pytest.mark.parametrize("relation", DIRECT)
def test_a_correction_carries_the_correctors_own_authority_never_the_originals(team: Team, relation: str) -> None:
    """The original is user-stated, high (0.9). The correction is written at the corrector's own
    authority, its source actor is the corrector (none for an operator), and its evidence names them."""
    user = team.users[relation]
    rejection_record(user=user, trace_item_id=team.item.pk, kind=RejectionKind.CHANGED, correction=REWRITE)
    new = team.entry().current_revision
    assert new is not None and new.body == REWRITE
    assert (new.authority, new.confidence) == CORRECTION_AUTHORITY[relation]
    assert new.confidence < team.revision.confidence
    correctors: dict[str, Actor] = {CorrectionRelation.SUBJECT: team.sam, CorrectionRelation.SOURCE: team.rita}
    corrector = correctors.get(relation)
    assert new.source_actor == corrector
    evidence = MemoryEvidence.objects.get(revision=new, kind=EvidenceKind.CORRECTION)
    if corrector is not None:
        assert (evidence.actor, evidence.operator) == (corrector, None)
    else:
        assert (evidence.actor, evidence.operator) == (None, user)
    assert evidence.audience == team.revision.audience


def test_a_scope_correction_keeps_the_statement_and_its_author_and_names_the_corrector(team: Team) -> None:
    """ "Not here" changes where the belief applies, not what was said or by whom."""
    operator = team.users[CorrectionRelation.OPERATOR]
    rejection_record(user=operator, trace_item_id=team.item.pk, kind=RejectionKind.NOT_HERE)
    new = team.entry().current_revision
    assert new is not None
    assert (new.body, new.source_actor, new.authority, new.confidence) == (
        FRIDAYS,
        team.rita,
        Authority.USER_STATED,
        0.9,
    )
    evidence = MemoryEvidence.objects.get(revision=new, kind=EvidenceKind.CORRECTION)
    assert (evidence.actor, evidence.operator) == (None, operator)


EXPECTED_RENDER: dict[str, str] = {
    CorrectionRelation.SUBJECT: "(user-stated, high)",
    CorrectionRelation.SOURCE: "(user-stated by Rita (id U2RITA), medium)",
    CorrectionRelation.OPERATOR: "(affirmed, medium)",
}


@pytest.mark.parametrize("relation", DIRECT)
def test_the_agent_is_shown_the_corrections_own_authority(team: Team, relation: str) -> None:
    """What the agent reads next names who stated the correction and at what authority."""
    rejection_record(
        user=team.users[relation], trace_item_id=team.item.pk, kind=RejectionKind.CHANGED, correction=REWRITE
    )
    channel = Conversation.objects.get(agent=team.agent, external_thread_id="C-team")
    rendered = team.recall_in(channel, team.rita).rendered
    line = next(line for line in rendered.splitlines() if REWRITE in line)
    assert line.endswith(f"about Sam (id U1SAM): {REWRITE} {EXPECTED_RENDER[relation]}"), line
    assert FRIDAYS not in rendered


@pytest.mark.parametrize("kind", [*KINDS, RejectionKind.WRONG])
def test_a_bystanders_correction_files_one_review_item_and_changes_no_revision(team: Team, kind: str) -> None:
    """Bea is neither the subject, the source nor an operator: whatever she asks for is recorded as
    the undifferentiated rejection. The entry is flagged and down-weighted, never retired, and the
    agent still recalls the belief as it was."""
    bea = team.users[CorrectionRelation.BYSTANDER]
    revisions_before = MemoryRevision.objects.count()
    utility = team.entry().utility
    rejection = rejection_record(user=bea, trace_item_id=team.item.pk, kind=kind, correction=correction_text(kind))
    assert (rejection.kind, rejection.requested_kind, rejection.relation) == (
        RejectionKind.WRONG,
        kind,
        CorrectionRelation.BYSTANDER,
    )
    assert rejection.resulting_revision is None and rejection.correction == correction_text(kind)
    assert Rejection.objects.count() == 1
    assert MemoryRevision.objects.count() == revisions_before
    entry = team.entry()
    assert entry.status == EntryStatus.LIVE and entry.current_revision_id == team.revision.pk
    assert entry.flagged_for_review and entry.utility == utility - 1.0
    channel = Conversation.objects.get(agent=team.agent, external_thread_id="C-team")
    result = team.recall_in(channel, team.rita)
    assert team.revision.pk in {i.revision_id for i in result.items}
    assert REWRITE not in result.rendered


def test_a_bystanders_report_of_untruth_does_not_block_the_statement(team: Team) -> None:
    """A report decided nothing, so it is not replayed: the statement may still be learned again."""
    rejection_record(user=team.users[CorrectionRelation.BYSTANDER], trace_item_id=team.item.pk, kind="not_true")
    said = MemoryEvidence.objects.get(revision=team.revision, kind=EvidenceKind.SOURCE_MESSAGE).message
    assert said is not None
    again = memory_remember(
        agent=team.agent,
        belief=Belief(body=FRIDAYS, belief_type="user_model_attr", subject_id=team.sam.pk),
        provenance=Provenance(source_message_id=said.pk),
    )
    assert again.revision.body == FRIDAYS


# --- the relation, in detail --------------------------------------------------------------------


def test_a_verified_identity_link_makes_the_subjects_other_account_the_subject(team: Team) -> None:
    """Sam signed in through his email account, verified as the same person, is the subject; once the
    link is revoked he is a bystander again."""
    email = ConnectorFactory.create(agent=team.agent, type="email", name="acme.example")
    sam_mail = ActorFactory.create(connector=email, external_id="sam@acme.example", display_name="Sam")
    user = login("sam-mail", sam_mail)
    first, second = sorted((team.sam, sam_mail), key=lambda a: a.pk)
    link = IdentityLink.objects.create(
        agent=team.agent, actor_a=first, actor_b=second, proof="signed in on both", verified_at=timezone.now()
    )
    assert correction_relations(user, [team.revision])[team.revision.pk] == CorrectionRelation.SUBJECT
    link.revoked_at = timezone.now()
    link.save(update_fields=["revoked_at"])
    assert correction_relations(user, [team.revision])[team.revision.pk] == CorrectionRelation.BYSTANDER


def test_staff_without_the_tenants_scope_is_no_operator_of_it(team: Team) -> None:
    """An operator of another tenant cannot even find the item: the refusal is a 404 and changes nothing."""
    elsewhere = User.objects.create_user(username="elsewhere", is_staff=True)
    OperatorScope.objects.create(user=elsewhere, tenant=TenantFactory.create())
    with pytest.raises(NotFound) as missing:
        rejection_record(user=elsewhere, trace_item_id=team.item.pk, kind=RejectionKind.NOT_TRUE)
    assert missing.value.code == "item_not_found"
    assert not Rejection.objects.exists() and team.entry().status == EntryStatus.LIVE


# --- refused writes -------------------------------------------------------------------------------


def test_refused_writes_answer_a_clear_error_and_change_nothing(team: Team) -> None:
    """An empty correction, an unknown kind, a stale item: each raises with a code and writes nothing."""
    sam = team.users[CorrectionRelation.SUBJECT]
    bea = team.users[CorrectionRelation.BYSTANDER]
    for user in (sam, bea):
        with pytest.raises(Unprocessable) as empty:
            rejection_record(user=user, trace_item_id=team.item.pk, kind=RejectionKind.CHANGED, correction="  ")
        assert empty.value.code == "correction_required"
        with pytest.raises(Unprocessable) as unknown:
            rejection_record(user=user, trace_item_id=team.item.pk, kind="retire_everything")
        assert unknown.value.code == "invalid_kind"
    assert not Rejection.objects.exists() and not team.entry().flagged_for_review
    rejection_record(user=sam, trace_item_id=team.item.pk, kind=RejectionKind.CHANGED, correction=REWRITE)
    current = team.entry().current_revision_id
    with pytest.raises(Conflict) as stale:
        rejection_record(user=bea, trace_item_id=team.item.pk, kind=RejectionKind.NOT_TRUE)
    assert stale.value.code == "memory_changed"
    assert Rejection.objects.count() == 1 and team.entry().current_revision_id == current
    assert not team.entry().flagged_for_review


# --- the page ------------------------------------------------------------------------------------


def test_the_page_tells_a_bystander_their_report_goes_to_review(team: Team) -> None:
    """Bea's page says her choices go to an operator; Sam's and Rita's say theirs apply directly."""
    bea = shown_item(team, CorrectionRelation.BYSTANDER)
    assert "sent to an operator for review" in bea and "Report: not true" in bea
    assert "Send the correction for review" in bea
    sam = shown_item(team, CorrectionRelation.SUBJECT)
    assert "This memory is about you" in sam and "Report:" not in sam and "sent to an operator" not in sam
    rita = shown_item(team, CorrectionRelation.SOURCE)
    assert "You said this" in rita and "Save the correction" in rita and "sent to an operator" not in rita


def shown_item(team: Team, relation: str) -> str:
    """The turn page's block for the traced belief, as ``relation``'s login sees it."""
    client = Client()
    client.force_login(team.users[relation])
    response = client.get(f"/turns/{team.turn.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    start = html.index(f'data-memory-id="{team.item.revision.short_id}"')  # one card per belief
    return html[start : html.index("</li>", start)]


def test_a_bystanders_post_from_the_page_is_reported_and_says_so(team: Team) -> None:
    client = Client()
    client.force_login(team.users[CorrectionRelation.BYSTANDER])
    response = client.post(
        f"/turns/{team.turn.pk}/items/{team.item.pk}/reject/", {"kind": "changed", "correction": REWRITE}, follow=True
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert f"Reported [{team.revision.short_id}] for review" in html and "nothing was changed or retired" in html
    assert "You reported <strong>was true, has changed</strong>" in html
    assert team.entry().current_revision_id == team.revision.pk


# --- the demo: Priya and Sam Okafor -------------------------------------------------------------


@dataclass
class Demo:
    agent: RuntimeAgent
    core: Conversation
    priya: Actor
    sam_o: Actor
    fridays: MemoryRevision
    turn: Turn
    item: RecallTraceItem


@pytest.fixture
def demo(db: None) -> Demo:
    load()
    agent = RuntimeAgent.objects.get(name=AGENT_NAME)
    core = Conversation.objects.get(agent=agent, title="#atlas-core")
    priya = Actor.objects.get(connector__agent=agent, external_id="U01PRIYA")
    sam_o = Actor.objects.get(connector__agent=agent, external_id="U02SAMOK")
    fridays = MemoryRevision.objects.get(agent=agent, body__startswith="Is offline on Friday afternoons")
    assert (fridays.subject, fridays.source_actor) == (sam_o, sam_o)
    turn, result = ask(agent, core, priya, "Is Sam Okafor around on Friday afternoons for the release?")
    item = RecallTraceItem.objects.get(trace_id=result.trace_id, revision=fridays)
    return Demo(agent, core, priya, sam_o, fridays, turn, item)


def test_priya_cannot_rewrite_what_sam_okafor_said_about_himself(demo: Demo) -> None:
    """The tester's case: logged in as priya, "was true, has changed" on Sam's Friday afternoons in
    #atlas-core. It is filed for review: Sam's statement stays current, flagged and down-weighted,
    and the agent never reads Priya's text as Sam's (or as anyone's) user-stated belief."""
    priya = User.objects.get(username="priya")
    utility = MemoryEntry.objects.get(pk=demo.fridays.entry_id).utility
    client = Client()
    client.force_login(priya)
    page = client.get(f"/turns/{demo.turn.pk}/").content.decode()
    shown = page[page.index(f'data-memory-id="{demo.item.revision.short_id}"') :]
    assert "sent to an operator for review" in shown[: shown.index("</li>")]
    response = client.post(
        f"/turns/{demo.turn.pk}/items/{demo.item.pk}/reject/",
        {"kind": "changed", "correction": REWRITE},
        follow=True,
    )
    assert response.status_code == 200 and "Reported" in response.content.decode()

    entry = MemoryEntry.objects.get(pk=demo.fridays.entry_id)
    assert entry.status == EntryStatus.LIVE and entry.current_revision_id == demo.fridays.pk
    assert entry.flagged_for_review and entry.utility == utility - 1.0
    assert not MemoryRevision.objects.filter(entry=entry).exclude(pk=demo.fridays.pk).exists()
    rejection = Rejection.objects.get(revision=demo.fridays)
    assert (rejection.user, rejection.relation, rejection.kind, rejection.requested_kind) == (
        priya,
        CorrectionRelation.BYSTANDER,
        RejectionKind.WRONG,
        RejectionKind.CHANGED,
    )
    marco = Actor.objects.get(connector__agent=demo.agent, external_id="U04MARCO")
    _, later = ask(demo.agent, demo.core, marco, "Can Sam Okafor take the Friday afternoon on-call?")
    assert demo.fridays.pk in {i.revision_id for i in later.items}
    assert "weekend on-call" not in later.rendered and "Is offline on Friday afternoons" in later.rendered

    # The demo's "sam" login is the other Sam (Lindqvist, design): he cannot even see this item.
    with pytest.raises(NotFound):
        rejection_record(user=User.objects.get(username="sam"), trace_item_id=demo.item.pk, kind="not_true")


def test_sam_okafor_himself_corrects_it_at_his_own_authority(demo: Demo) -> None:
    """Signed in as the subject, the same correction applies, stated by him, and the agent reads it so."""
    sam = login("sam.okafor", demo.sam_o)
    rejection_record(user=sam, trace_item_id=demo.item.pk, kind=RejectionKind.CHANGED, correction=REWRITE)
    new = MemoryEntry.objects.get(pk=demo.fridays.entry_id).current_revision
    assert new is not None
    assert (new.body, new.source_actor, new.authority, new.confidence) == (REWRITE, demo.sam_o, "user_stated", 0.8)
    assert MemoryEvidence.objects.get(revision=new, kind=EvidenceKind.CORRECTION).actor == demo.sam_o
    _, later = ask(demo.agent, demo.core, demo.priya, "Can Sam Okafor take the Friday on-call?")
    assert f"about Sam (id U02SAMOK): {REWRITE} (user-stated, high)" in later.rendered


def test_priya_corrects_what_she_said_herself_in_atlas_core(demo: Demo) -> None:
    """Priya is the source of the CSV-first decision: her correction applies, and it reads as hers."""
    csv = MemoryRevision.objects.get(agent=demo.agent, body="CSV export ships before PDF export.")
    _, asked = ask(demo.agent, demo.core, demo.priya, "Does CSV export ship before PDF export?")
    item = RecallTraceItem.objects.get(trace_id=asked.trace_id, revision=csv)
    changed = "PDF export ships first; CSV follows a week later."
    rejection = rejection_record(
        user=User.objects.get(username="priya"), trace_item_id=item.pk, kind="changed", correction=changed
    )
    assert rejection.relation == CorrectionRelation.SOURCE and rejection.resulting_revision is not None
    _, later = ask(demo.agent, demo.core, demo.priya, "Which ships first, CSV export or PDF export?")
    assert f"{changed} (user-stated by Priya Raman (id U01PRIYA), medium)" in later.rendered


# --- the admin's review queue --------------------------------------------------------------------


def test_a_bystanders_report_is_in_the_admins_flag_queue_with_what_was_asked(team: Team) -> None:
    """The operator finds the entry in the flag queue, and on its page who reported what, with the
    suggested correction; an applied correction shows as applied, naming its corrector."""
    rejection_record(
        user=team.users[CorrectionRelation.BYSTANDER],
        trace_item_id=team.item.pk,
        kind=RejectionKind.CHANGED,
        correction=REWRITE,
    )
    operator = Client()
    operator.force_login(User.objects.create_superuser(username="root"))
    queue = operator.get("/admin/memory/memoryentry/", {"flagged_for_review__exact": "1"}).content.decode()
    assert f"/admin/memory/memoryentry/{team.revision.entry_id}/change/" in queue
    page = operator.get(f"/admin/memory/memoryentry/{team.revision.entry_id}/change/").content.decode()
    reports = page[page.index('id="corrections"') : page.index('id="sharing-grants"')]
    assert "bea" in reports and "someone else who was shown it" in reports
    assert "Was true, has changed" in reports and REWRITE in reports and "for review" in reports

    rejection_record(
        user=team.users[CorrectionRelation.SUBJECT],
        trace_item_id=team.item.pk,
        kind="changed",
        correction="Off Fridays.",
    )
    page = operator.get(f"/admin/memory/memoryentry/{team.revision.entry_id}/change/").content.decode()
    assert "applied: r2" in page and "correction by <bdi>Sam (id U1SAM)</bdi>" in page
