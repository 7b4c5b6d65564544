# The transcript and memory tables read best one row per line, so long lines are allowed here.
# ruff: noqa: E501
"""Load a small, realistic demo workspace: the Acme team building "Atlas".

Everything is fixed (names, text, the times of day), so two installations load the same workspace,
dated relative to the load: the transcript's three weeks end shortly before it (``demo.calendar``), so
the turns the demo then drives follow on from the conversation and the dates people mention are still
ahead. Messages
and memories are written through the same services a connector and an agent use, so audiences,
evidence and the ledger are exactly what production would record: facts told in a direct message
stay private to that person, facts from the private channel stay with its three members.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from accounts.models import Actor, Connector, IdentityLink, RuntimeAgent, Tenant, UserActor
from demo.calendar import DemoCalendar, offset
from demo.turns import Loaded, demo_turns_run
from history.audience import Audience
from history.models import Conversation, EvidenceMethod, Message
from history.services import conversation_upsert, message_ingest
from memory.models import Authority, BeliefType, EntryStatus, MemoryEntry, Portability
from memory.services import Belief, Provenance, entry_forget, memory_remember, revision_amend

TENANT_SLUG = "acme"
AGENT_NAME = "acme-assistant"
DEMO_PASSWORD = "engram-demo"

#: key -> (connector key, external id, display name)
ACTORS: dict[str, tuple[str, str, str]] = {
    "priya": ("slack", "U01PRIYA", "Priya Raman"),
    "sam_o": ("slack", "U02SAMOK", "Sam"),
    "sam_l": ("slack", "U03SAMLI", "Sam"),
    "marco": ("slack", "U04MARCO", "Marco Bianchi"),
    "dana": ("slack", "U05DANAW", "Dana Whitfield"),
    "priya_mail": ("email", "priya.raman@acme.example", "Priya Raman"),
}

#: The people who get an end-user login, and the actors that login is.
USERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "priya": ("Priya", "Raman", ("priya", "priya_mail")),
    "sam": ("Sam", "Lindqvist", ("sam_l",)),
}


@dataclass(frozen=True)
class DemoConversation:
    connector: str
    thread_id: str
    title: str
    #: None: the whole workspace reads it; otherwise the actor keys of its readers.
    readers: tuple[str, ...] | None
    project: str = ""


CONVERSATIONS: dict[str, DemoConversation] = {
    "general": DemoConversation("slack", "C01GENERAL", "#general", None, "atlas"),
    "core": DemoConversation("slack", "G02ATLASCORE", "#atlas-core", ("priya", "sam_o", "marco"), "atlas"),
    "dm_priya": DemoConversation("slack", "D03PRIYA", "DM with Priya Raman", ("priya",)),
    "dm_sam": DemoConversation("slack", "D04SAMLI", "DM with Sam (U03SAMLI)", ("sam_l",)),
    "mail_priya": DemoConversation("email", "thread-atlas-pricing", "Email: Atlas pricing", ("priya_mail",)),
}

#: (conversation, author, day offset, "HH:MM", text, key for memories and turns to name it by, or "").
#: Day 0 is the calendar's first Monday; ``{launch}`` and the like are its dates (DemoCalendar.names).
# fmt: off
TRANSCRIPT: list[tuple[str, str, int, str, str, str]] = [
    ("general", "priya", 0, "09:02", "Morning all! We're kicking off Atlas this week: the new self-serve analytics dashboard for mid-market customers.", "g_kickoff"),
    ("general", "dana", 0, "09:05", "Great news. Northwind and Globex have both been asking for self-serve reporting, I'll let them know it's coming.", ""),
    ("general", "marco", 0, "09:11", "Infra side: Atlas runs on the shared PostgreSQL 16 cluster in eu-west-1, not a new one.", "g_infra"),
    ("general", "sam_o", 0, "09:14", "I'll own the ingestion API. Planning to write it in Go, same as the billing service.", "g_go"),
    ("core", "priya", 0, "11:00", "Private channel for the core team. Atlas cloud spend is capped at 40k EUR this year, please don't share that outside this channel yet.", "c_budget"),
    ("core", "marco", 0, "11:04", "Understood. That rules out a dedicated ClickHouse cluster, we'll use Postgres with partitioned tables.", "c_no_clickhouse"),
    ("core", "sam_o", 0, "11:10", "Fine by me, I'd rather not run another database anyway.", ""),
    ("dm_priya", "priya", 0, "18:10", "Hi! Quick one: I prefer short answers, and please use metric units.", "p_prefs"),
    ("dm_priya", "priya", 0, "18:12", "Also, I'm based in Lisbon, so no meetings before 9:00 WET please.", "p_lisbon"),
    ("general", "priya", 1, "10:20", "Reminder: Atlas standup is every Tuesday and Thursday at 9:30 CET in the #atlas-core huddle.", "g_standup"),
    ("general", "sam_l", 1, "10:22", "First dashboard wireframes are going into Figma today, the file is called 'Atlas - v0 flows'.", "g_figma"),
    ("core", "priya", 1, "09:30", "Standup notes: we agreed to ship CSV export before PDF export.", "c_csv_first"),
    ("dm_sam", "sam_l", 1, "16:00", "Hey, I'm Sam from design. The other Sam is Okafor on backend, people mix us up all the time.", "s_intro"),
    ("dm_sam", "sam_l", 1, "16:03", "I work Tuesday to Friday, Mondays I'm off.", "s_days"),
    ("general", "dana", 2, "14:03", "Globex asked whether Atlas supports SSO on day one. I told them yes for Okta, others later. Priya, correct me if that's wrong.", "g_sso_q"),
    ("general", "priya", 2, "14:30", "Correct: Okta SSO at launch, Azure AD in the quarter after.", "g_sso"),
    ("dm_priya", "priya", 2, "08:50", "I'm vegetarian, in case you're ever helping plan the team offsite dinner.", "p_veg"),
    ("core", "marco", 3, "09:35", "I'm on call this week. Page me on Opsgenie rather than Slack if prod breaks.", "c_oncall"),
    ("core", "sam_o", 3, "09:40", "I'm offline on Friday afternoons, I coach my daughter's football team.", "c_sam_fridays"),
    ("dm_sam", "sam_l", 3, "11:20", "I prefer feedback on designs as numbered lists that reference the Figma frame names.", "s_feedback"),
    ("dm_priya", "priya", 4, "19:30", "Between us: I'm interviewing Jonas Weber for a second PM role on Atlas. Keep it confidential.", "p_hiring"),
    ("general", "marco", 4, "16:45", "Heads up: the staging cluster is down for maintenance on Saturday, 08:00-10:00 UTC.", ""),
    ("core", "priya", 5, "10:12", "Decision: the mobile app is out of the beta scope. Web only until GA.", "c_no_mobile"),
    ("mail_priya", "priya_mail", 5, "07:30", "Draft pricing for Atlas: 12 EUR per seat per month, minimum 10 seats. Finance hasn't signed off yet.", "e_pricing"),
    ("mail_priya", "priya_mail", 5, "07:32", "Please don't mention pricing in Slack channels until finance approves it.", "e_no_pricing"),
    ("dm_priya", "priya", 6, "07:55", "Can you remind me every Monday to review the Atlas risk register?", "p_reminder"),
    ("dm_sam", "sam_l", 6, "14:45", "I'm colour-blind (deuteranopia), so please don't describe charts only by red and green.", "s_colour"),
    ("general", "priya", 7, "09:40", "The Atlas beta launch date is set: {launch}. Customer comms go out the week before.", "g_launch"),
    ("general", "dana", 7, "09:52", "Perfect, I'll line up Northwind as the first beta customer.", "g_northwind"),
    ("general", "sam_o", 8, "11:15", "Ingestion API v1 is merged. The docs are in the repo under docs/ingestion.md.", "g_api_docs"),
    ("core", "marco", 8, "09:31", "The eu-west-1 cluster is at 70% disk. I'll add storage before the beta.", ""),
    ("core", "sam_o", 8, "09:45", "Ingestion p95 latency is 180 ms under the load test; the target was 250 ms.", "c_latency"),
    ("general", "sam_l", 9, "15:00", "Design review for the dashboard is on Thursday at 15:00, everyone welcome.", ""),
    ("dm_priya", "priya", 9, "20:15", "I'm on leave {priya_leave} for my sister's wedding in Porto.", "p_leave"),
    ("dm_sam", "sam_l", 9, "10:10", "I'm thinking of moving to the Copenhagen office next year. It's not public yet.", "s_cph"),
    ("core", "priya", 10, "09:33", "Globex may churn if the Atlas beta slips by more than a month, keep that in mind when we scope.", "c_globex_risk"),
    ("general", "marco", 11, "10:05", "New rule for Atlas services: every deploy sits in the canary stage for at least 30 minutes before full rollout.", "g_canary"),
    ("mail_priya", "priya_mail", 11, "08:00", "Finance approved the Atlas pricing: 12 EUR per seat per month, minimum 10 seats.", "e_pricing_ok"),
    ("core", "marco", 12, "09:30", "I've raised the canary duration to 45 minutes after Tuesday's incident.", "c_canary_45"),
    ("dm_sam", "sam_l", 12, "15:30", "My cat is called Pixel, in case she walks across the keyboard during a call.", "s_cat"),
    ("dm_priya", "priya", 13, "18:40", "My daughter starts school in {school}, so from then I'll leave at 16:30 on Wednesdays.", "p_wednesdays"),
    ("general", "priya", 14, "09:30", "Update: the beta launch moves to {launch_moved}. We need two more weeks for scheduled exports.", "g_launch2"),
    ("general", "dana", 14, "09:41", "Noted, I'll tell Northwind. They're fine with it.", ""),
    ("core", "priya", 14, "09:32", "The export feature is the reason for the slip: CSV is done, scheduled exports need two more weeks.", ""),
    ("core", "sam_o", 15, "09:34", "Please always tag me on PRs touching the ingestion schema, I want to review those.", "c_tag_sam"),
    ("dm_sam", "sam_l", 15, "11:00", "For Atlas I use the 8px spacing grid and Inter as the only typeface.", "s_grid"),
    ("general", "sam_o", 16, "13:20", "Reminder: the Atlas API rate limit is 600 requests per minute per workspace.", "g_ratelimit"),
    ("dm_priya", "priya", 16, "08:05", "Actually, for technical topics I now prefer detailed answers. Short ones are still fine for status updates.", "p_detail"),
    ("core", "marco", 17, "09:31", "Postgres storage upgrade is done, disk is at 35% now.", ""),
    ("mail_priya", "priya_mail", 17, "07:45", "I'm travelling to the Berlin customer summit {berlin}. If anyone asks, book hotels near Alexanderplatz.", "e_berlin"),
    ("general", "priya", 18, "17:05", "Thanks everyone for a great sprint. The demo recording is pinned in the channel.", ""),
    ("dm_sam", "sam_l", 18, "16:20", "I've switched to a standing desk and take calls from home on Fridays now.", "s_fridays"),
    ("core", "priya", 19, "09:30", "Note for the assistant: summaries of this channel should be bullet points, five at most.", "c_bullets"),
    ("general", "dana", 19, "10:00", "Northwind signed the beta agreement today!", "g_northwind_signed"),
    ("general", "marco", 19, "10:03", "Nice. I'll set up their workspace on staging tomorrow.", ""),
    ("general", "sam_o", 20, "09:10", "Heads up: I'm on holiday {sam_o_holiday}, Marco covers ingestion questions.", "g_sam_holiday"),
    ("general", "sam_l", 20, "09:15", "The new dashboard palette is live in Figma, checked for colour-blind readers too.", ""),
    ("general", "priya", 20, "11:00", "The Atlas beta checklist is in Notion under 'Atlas / Launch'. Please tick off your items by Friday.", "g_checklist"),
    ("dm_priya", "priya", 20, "12:00", "The Jonas Weber hire fell through, please forget that.", "p_forget"),
    ("general", "dana", 21, "15:30", "Globex wants a call about Atlas next week. Priya, can you join?", ""),
]
# fmt: on


@dataclass(frozen=True)
class DemoMemory:
    key: str
    source: str
    body: str
    belief_type: str
    subject: str | None = None
    portability: str = Portability.PORTABLE
    inherited: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    #: The belief stops holding the day after this calendar date (DemoCalendar attribute, a span's end).
    valid_through: str = ""


C, L = Portability.CONTEXTUAL, Portability.LOCAL
B = BeliefType

# fmt: off
MEMORIES: list[DemoMemory] = [
    # What people said about themselves in direct messages: each stays with its one reader.
    DemoMemory("priya_answers", "p_prefs", "Prefers short answers.", B.PREFERENCE, "priya", extra={"salience": 0.7}),
    DemoMemory("priya_metric", "p_prefs", "Wants measurements in metric units.", B.PREFERENCE, "priya"),
    DemoMemory("priya_lisbon", "p_lisbon", "Is based in Lisbon and takes no meetings before 9:00 WET.", B.USER_MODEL_ATTR, "priya"),
    DemoMemory("priya_veg", "p_veg", "Is vegetarian.", B.USER_MODEL_ATTR, "priya"),
    DemoMemory("priya_hiring", "p_hiring", "Is interviewing Jonas Weber for a second Atlas PM role; confidential.", B.STATUS, "priya", C),
    DemoMemory("priya_reminder", "p_reminder", "Remind Priya every Monday to review the Atlas risk register.", B.INSTRUCTION, "priya", C),
    DemoMemory("priya_leave", "p_leave", "Is on leave {priya_leave_y} for a family wedding in Porto.", B.STATUS, "priya", valid_through="priya_leave"),
    DemoMemory("priya_wednesdays", "p_wednesdays", "From {school_y} leaves at 16:30 on Wednesdays (school pick-up).", B.USER_MODEL_ATTR, "priya"),
    DemoMemory("sam_design", "s_intro", "Works in design and is often confused with the other Sam (Okafor, backend).", B.USER_MODEL_ATTR, "sam_l"),
    DemoMemory("sam_days", "s_days", "Works Tuesday to Friday; is off on Mondays.", B.USER_MODEL_ATTR, "sam_l"),
    DemoMemory("sam_feedback", "s_feedback", "Prefers design feedback as numbered lists that reference Figma frame names.", B.PREFERENCE, "sam_l"),
    DemoMemory("sam_colour", "s_colour", "Is colour-blind (deuteranopia): never describe charts only by red and green.", B.USER_MODEL_ATTR, "sam_l", extra={"salience": 0.8}),
    DemoMemory("sam_cph", "s_cph", "Is considering a move to the Copenhagen office next year; not public.", B.STATUS, "sam_l"),
    DemoMemory("sam_cat", "s_cat", "Has a cat called Pixel.", B.USER_MODEL_ATTR, "sam_l", extra={"salience": 0.2}),
    DemoMemory("sam_grid", "s_grid", "Designs Atlas on an 8px spacing grid with Inter as the only typeface.", B.SKILL, "sam_l", C),
    DemoMemory("sam_fridays", "s_fridays", "Takes calls from home on Fridays.", B.USER_MODEL_ATTR, "sam_l"),
    DemoMemory("pricing", "e_pricing", "Draft Atlas pricing: 12 EUR per seat per month, minimum 10 seats; not approved by finance yet.", B.PROJECT_FACT, None, C, extra={"origin_scope": "atlas"}),
    DemoMemory("no_pricing_in_slack", "e_no_pricing", "Do not mention Atlas pricing in Slack channels until finance approves it.", B.INSTRUCTION, None, L, extra={"origin_scope": "atlas"}),
    DemoMemory("priya_berlin", "e_berlin", "Travels to the Berlin customer summit {berlin_y}; book hotels near Alexanderplatz.", B.STATUS, "priya_mail"),
    # The private channel: visible to its three members only.
    DemoMemory("budget", "c_budget", "Atlas cloud spend is capped at 40k EUR this year; confidential to the core team.", B.PROJECT_FACT, None, L),
    DemoMemory("no_clickhouse", "c_no_clickhouse", "Atlas uses partitioned PostgreSQL tables, not a dedicated ClickHouse cluster, to stay within budget.", B.DECISION, None, C, ("c_budget",)),
    DemoMemory("csv_first", "c_csv_first", "CSV export ships before PDF export.", B.DECISION, None, C),
    DemoMemory("marco_oncall", "c_oncall", "Wants to be paged through Opsgenie, not Slack, when production breaks.", B.PREFERENCE, "marco", C),
    DemoMemory("sam_o_fridays", "c_sam_fridays", "Is offline on Friday afternoons (coaches a youth football team).", B.USER_MODEL_ATTR, "sam_o"),
    DemoMemory("no_mobile", "c_no_mobile", "The mobile app is out of the Atlas beta scope: web only until GA.", B.DECISION, None, C),
    DemoMemory("latency", "c_latency", "Ingestion p95 latency is 180 ms under load test (target 250 ms).", B.STATUS, None, C),
    DemoMemory("globex_risk", "c_globex_risk", "Globex may churn if the Atlas beta slips by more than a month.", B.PROJECT_FACT, None, C),
    DemoMemory("tag_sam_o", "c_tag_sam", "Tag Sam Okafor on every pull request that touches the ingestion schema.", B.INSTRUCTION, "sam_o", C),
    DemoMemory("core_bullets", "c_bullets", "Summaries of this channel are bullet points, five at most.", B.INSTRUCTION, None, L, extra={"restricted_to": "core"}),
    # The public channel: the whole Slack workspace.
    DemoMemory("atlas_what", "g_kickoff", "Atlas is a self-serve analytics dashboard for mid-market customers.", B.PROJECT_FACT, None, C, extra={"salience": 0.8}),
    DemoMemory("atlas_infra", "g_infra", "Atlas runs on the shared PostgreSQL 16 cluster in eu-west-1.", B.RESOURCE, None, C),
    DemoMemory("ingestion_owner", "g_go", "Owns the Atlas ingestion API, written in Go.", B.PROJECT_FACT, "sam_o", C),
    DemoMemory("standup", "g_standup", "Atlas standup is every Tuesday and Thursday at 9:30 CET.", B.PROJECT_FACT, None, C),
    DemoMemory("figma", "g_figma", "The Atlas wireframes are in the Figma file 'Atlas - v0 flows'.", B.RESOURCE, None, C),
    DemoMemory("sso", "g_sso", "Atlas launches with Okta SSO; Azure AD follows the quarter after launch.", B.PROJECT_FACT, None, C, ("g_sso_q",)),
    DemoMemory("launch", "g_launch", "The Atlas beta launches on {launch_y}.", B.STATUS, None, C, extra={"salience": 0.8}),
    DemoMemory("api_docs", "g_api_docs", "The ingestion API docs are in docs/ingestion.md in the repository.", B.RESOURCE, None, C),
    DemoMemory("canary", "g_canary", "Every Atlas deploy stays in the canary stage for at least 30 minutes before full rollout.", B.INSTRUCTION, None, C, extra={"always_on": True, "salience": 0.9}),
    DemoMemory("rate_limit", "g_ratelimit", "The Atlas API rate limit is 600 requests per minute per workspace.", B.RESOURCE, None, C),
    DemoMemory("northwind", "g_northwind_signed", "Northwind signed the Atlas beta agreement and is the first beta customer.", B.EVENT, None, C, ("g_northwind",)),
    DemoMemory("sam_o_holiday", "g_sam_holiday", "Is on holiday {sam_o_holiday_y}; Marco covers ingestion questions meanwhile.", B.STATUS, "sam_o"),
    DemoMemory("checklist", "g_checklist", "The Atlas beta checklist is in Notion under 'Atlas / Launch'.", B.RESOURCE, None, C),
]
# fmt: on

#: (memory key, message key that corrects it, new body)
AMENDMENTS: list[tuple[str, str, str]] = [
    ("launch", "g_launch2", "The Atlas beta launches on {launch_moved_y}, two weeks later than planned."),
    ("pricing", "e_pricing_ok", "Atlas pricing is 12 EUR per seat per month, minimum 10 seats; approved by finance."),
    ("priya_answers", "p_detail", "Prefers detailed answers on technical topics and short ones for status updates."),
]
#: (memory key, message key asking to forget it)
FORGOTTEN: list[tuple[str, str]] = [("priya_hiring", "p_forget")]


class Command(BaseCommand):
    help = "Load the Acme demo workspace (agent, people, channels, a transcript and memories). Idempotent."

    def handle(self, *args: Any, **options: Any) -> None:
        if Tenant.objects.filter(slug=TENANT_SLUG).exists():
            self.stdout.write(f"The demo workspace is already loaded (tenant {TENANT_SLUG!r}); nothing changed.")
            return
        # One transaction: a failure leaves nothing half-loaded, so "tenant exists" means "loaded".
        with transaction.atomic():
            loaded = load()
        # Then a few real turns through the API, so the end-user view has turns to show.
        agent = RuntimeAgent.objects.get(tenant__slug=TENANT_SLUG, name=AGENT_NAME)
        summary = loaded.summary + demo_turns_run(agent=agent, loaded=loaded)
        self.stdout.write(self.style.SUCCESS("Loaded the Acme demo workspace:"))
        for line in summary:
            self.stdout.write(f"  {line}")


#: The last transcript message's offset from the calendar's start.
TRANSCRIPT_END = max(offset(day, clock) for _, _, day, clock, _, _ in TRANSCRIPT)


def load(*, now: datetime | None = None) -> Loaded:
    """Write the workspace, its transcript ending before ``now`` (default: the current time)."""
    calendar = DemoCalendar.ending_before(now or timezone.now(), last=TRANSCRIPT_END)
    dates = calendar.names()
    tenant = Tenant.objects.create(name="Acme", slug=TENANT_SLUG)
    agent = RuntimeAgent.objects.create(tenant=tenant, name=AGENT_NAME)
    connectors = {
        "slack": Connector.objects.create(agent=agent, type="slack", name="acme"),
        "email": Connector.objects.create(agent=agent, type="email", name="acme.example"),
    }
    actors = {
        key: Actor.objects.create(
            tenant=tenant, connector=connectors[connector], external_id=external_id, display_name=name
        )
        for key, (connector, external_id, name) in ACTORS.items()
    }
    first, second = sorted((actors["priya"], actors["priya_mail"]), key=lambda a: a.pk)
    IdentityLink.objects.create(
        agent=agent,
        actor_a=first,
        actor_b=second,
        proof="Confirmed by Priya while signed in to both Slack and email.",
        verified_at=calendar.at(5, "08:00"),
    )

    conversations: dict[str, Conversation] = {}
    for key, spec in CONVERSATIONS.items():
        connector = connectors[spec.connector]
        audience = (
            Audience.workspace(connector.namespace)
            if spec.readers is None
            else Audience.members(connector.namespace, [actors[r].pk for r in spec.readers])
        )
        conversations[key] = conversation_upsert(
            agent=agent,
            connector=connector,
            external_thread_id=spec.thread_id,
            audience=audience,
            title=spec.title,
            project=spec.project,
        )

    messages: dict[str, Message] = {}
    for index, (conversation, author, day, clock, body, key) in enumerate(TRANSCRIPT):
        created_at = calendar.at(day, clock)
        ingested = message_ingest(
            conversation=conversations[conversation],
            actor=actors[author],
            body=body.format_map(dates),
            created_at=created_at,
            evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
            external_id=f"{int(created_at.timestamp())}.{index:06d}",
        )
        if key:
            messages[key] = ingested.message

    entries: dict[str, MemoryEntry] = {}
    for memory in MEMORIES:
        extra = dict(memory.extra)
        restricted_to = extra.pop("restricted_to", None)
        if memory.valid_through:
            _first, last = getattr(calendar, memory.valid_through)
            extra["valid_to"] = calendar.midnight_after(last)
        source = messages[memory.source]
        belief = Belief(
            body=memory.body.format_map(dates),
            belief_type=memory.belief_type,
            subject_id=actors[memory.subject].pk if memory.subject else None,
            portability=memory.portability,
            authority=Authority.USER_STATED,
            confidence=0.9,
            valid_from=source.created_at,
            restricted_to_conversation_id=conversations[restricted_to].pk if restricted_to else None,
            **extra,
        )
        result = memory_remember(
            agent=agent,
            belief=belief,
            provenance=Provenance(
                source_message_id=source.pk, inherited_message_ids=[messages[k].pk for k in memory.inherited]
            ),
        )
        entries[memory.key] = result.entry

    for memory_key, message_key, body in AMENDMENTS:
        entry = entries[memory_key]
        assert entry.current_revision_id is not None
        revision_amend(
            agent=agent,
            entry_id=entry.pk,
            expected_revision_id=entry.current_revision_id,
            provenance=Provenance(source_message_id=messages[message_key].pk),
            body=body.format_map(dates),
            changes={"valid_from": messages[message_key].created_at},
        )
    for memory_key, _message_key in FORGOTTEN:
        entry_forget(agent=agent, entry_id=entries[memory_key].pk)

    user_model = get_user_model()
    for username, (first_name, last_name, actor_keys) in USERS.items():
        user = user_model.objects.create_user(
            username=username, password=DEMO_PASSWORD, first_name=first_name, last_name=last_name
        )
        for actor_key in actor_keys:
            UserActor.objects.create(user=user, actor=actors[actor_key])

    live = MemoryEntry.objects.filter(agent=agent, status=EntryStatus.LIVE)
    summary = [
        f"tenant {tenant.name!r}, agent {agent.name!r}; "
        f"connectors {', '.join(c.namespace for c in connectors.values())}",
        f"{len(actors)} actors (two named 'Sam': {actors['sam_o'].label} and {actors['sam_l'].label}); "
        f"{actors['priya'].label} is linked to {actors['priya_mail'].label}",
        "conversations: " + "; ".join(f"{c.title} {c.audience}" for c in conversations.values()),
        f"{len(TRANSCRIPT)} messages over {TRANSCRIPT_END.days + 1} days, "
        f"{calendar.start:%d %b %Y} to {calendar.start + TRANSCRIPT_END:%d %b %Y %H:%M} UTC",
        f"{len(MEMORIES)} memories ({live.count()} live, {len(FORGOTTEN)} forgotten, {len(AMENDMENTS)} amended)",
        f"end-user logins: {', '.join(USERS)} (password {DEMO_PASSWORD!r})",
    ]
    current = dict(live.values_list("pk", "current_revision_id"))
    return Loaded(
        summary=summary,
        calendar=calendar,
        revisions={key: current[entry.pk] for key, entry in entries.items() if entry.pk in current},
        messages={key: message.pk for key, message in messages.items()},
    )
