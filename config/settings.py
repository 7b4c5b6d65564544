"""Engram settings. Every value comes from the environment, read here and only here, with safe
local defaults: with nothing set, Engram runs on an embedded PostgreSQL under ``var/`` and a
filesystem Celery broker, so a fresh checkout needs no server of any kind."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import production

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("ENGRAM_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = _env_bool("ENGRAM_DEBUG", False)
#: Public, so never a secret: the production profile refuses to start with it (config/production.py).
DEVELOPMENT_SECRET_KEY = production.DEVELOPMENT_SECRET_KEY
SECRET_KEY = os.environ.get("ENGRAM_SECRET_KEY", DEVELOPMENT_SECRET_KEY)
# Key for the HMAC digests in audit rows (query text is never stored there). Empty: no digest. Unset,
# it is derived from SECRET_KEY under a label of its own, so it never equals the secret itself; the
# production profile requires a separate random value (docs/operations.md), so that one leaked secret
# does not expose both.
ENGRAM_AUDIT_KEY = os.environ.get("ENGRAM_AUDIT_KEY", production.derived_audit_key(SECRET_KEY))
# ENGRAM_ENV=production switches on the production profile. Its refusals (config/production.py: the
# development or an empty SECRET_KEY, DEBUG on, an audit key that is not a secret of its own) stop
# this module from loading, before anything starts (the embedded server, a worker, gunicorn), with
# ImproperlyConfigured naming each problem and the variable to set; the HTTPS settings further down
# default to on. Each one is overridable; docs/operations.md lists them.
ENGRAM_ENV = os.environ.get("ENGRAM_ENV", "development").strip().lower()
PRODUCTION = ENGRAM_ENV == "production"
if PRODUCTION:
    _refused = production.production_problems(secret_key=SECRET_KEY, debug=DEBUG, audit_key=ENGRAM_AUDIT_KEY)
    if _refused:
        raise ImproperlyConfigured(production.refusal_message(_refused))
ALLOWED_HOSTS = [h for h in os.environ.get("ENGRAM_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("ENGRAM_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "pgtrigger",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "history",
    "memory",
    "pages",  # the pages people see (their turns, what the agent knows about them)
    "demo",  # the first-run demo workspace (commands only)
    "bench",  # benchmark, load and fault commands (not product code)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------------
# DATABASE_URL selects any PostgreSQL >= 15. Without it, the embedded PostgreSQL 16 with pgvector
# (PyPI ``pgserver``) is started on demand with its data in var/postgres; it listens on a unix socket
# in that folder, so HOST is the folder and PORT is empty. ENGRAM_DATABASE_NAME picks another database
# on that server (the test suite points its Celery worker at pytest-django's test database).
EMBEDDED_POSTGRES_DIR = VAR_DIR / "postgres"
if os.environ.get("DATABASE_URL"):
    # The URL's scheme names Django's PostgreSQL backend; Engram's extends it (config/database).
    DATABASES = {
        "default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=60, engine="config.database")
    }
else:
    from config import embedded_postgres

    database_name = os.environ.get("ENGRAM_DATABASE_NAME", embedded_postgres.DATABASE_NAME)
    socket_dir = str(EMBEDDED_POSTGRES_DIR)
    if _env_bool("ENGRAM_EMBEDDED_POSTGRES_AUTOSTART", True):
        socket_dir = embedded_postgres.ensure_running(EMBEDDED_POSTGRES_DIR, database_name)
    DATABASES = {
        "default": {
            "ENGINE": "config.database",  # Django's PostgreSQL backend, timestamps read in C
            "NAME": database_name,
            "USER": "postgres",
            "HOST": socket_dir,
            "PORT": "",
            "CONN_MAX_AGE": 60,
        }
    }
# Engram's statements are short OLTP reads and writes; JIT compilation, when the planner's cost estimate
# crosses its threshold, costs more than it saves (several ms per call of the lineage function alone).
# Its working set is in memory or on SSD, where a random page costs little more than a sequential one;
# at PostgreSQL's default of 4 (spinning disks) the planner joins a few thousand full-text matches to
# their messages by scanning the whole primary key (42 ms) instead of probing it (5 ms).
DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c jit=off -c random_page_cost=1.1"
# psycopg prepares a statement of config.database.prepared_cursor once a connection has run it five
# times. ENGRAM_PREPARED_STATEMENTS=0 turns that off, for a connection pooler in transaction mode that
# cannot carry prepared statements from one transaction to the next.
DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5 if _env_bool("ENGRAM_PREPARED_STATEMENTS", True) else None
# Separate test databases let several test runs share one server.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("ENGRAM_TEST_DATABASE", "test_engram")}
# A persistent connection outlives a database restart: check it before each request's first query, so
# the first request after a restart reconnects instead of failing on the dead socket.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Read replica (scale-out) ---------------------------------------------------------------------
# DATABASE_REPLICA_URL names a streaming (physical) replica of the primary. Read-only work (recall,
# history search, the turn view, the admin's lists) is sent there by config.replica's read scopes and
# config.routers.ReplicaRouter; a scope reads the primary instead when its thread is inside a
# transaction, when the replica has not replayed the primary's WAL position within
# ENGRAM_REPLICA_MAX_LAG_MS (read-your-writes), or when the replica cannot be reached (it is then
# left alone for ENGRAM_REPLICA_RETRY_S). Without the variable there is one database and nothing changes.
if os.environ.get("DATABASE_REPLICA_URL"):
    DATABASES["replica"] = dj_database_url.parse(
        os.environ["DATABASE_REPLICA_URL"], conn_max_age=60, engine="config.database"
    )
    DATABASES["replica"]["OPTIONS"] = dict(DATABASES["default"]["OPTIONS"])
    DATABASES["replica"]["CONN_HEALTH_CHECKS"] = True
    # Tests: the replica alias reads the primary's test database by name, on the replica's server.
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
ENGRAM_READ_REPLICA = "replica" in DATABASES
DATABASE_ROUTERS = ["config.routers.ReplicaRouter"]
ENGRAM_REPLICA_MAX_LAG_MS = float(os.environ.get("ENGRAM_REPLICA_MAX_LAG_MS", "200"))
ENGRAM_REPLICA_RETRY_S = float(os.environ.get("ENGRAM_REPLICA_RETRY_S", "5"))
# --- end of read replica --------------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on every request until it exists
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
STATICFILES_DIRS = [BASE_DIR / "static"]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/turns/"
LOGOUT_REDIRECT_URL = "/login/"

# --- REST API -------------------------------------------------------------------------------------
# The largest request body read into memory; a bigger one answers 413 request_too_large. The default
# fits the largest valid ingest batch (500 messages of 20,000 characters) of mostly ASCII text.
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("ENGRAM_MAX_REQUEST_BYTES", str(16 * 1024 * 1024)))
# The benchmark data folder (LoCoMo under locomo/); empty: looked for beside the checkout (bench/harness/corpus.py).
ENGRAM_BENCH_DIR = os.environ.get("ENGRAM_BENCH_DIR", "")
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["config.api.SafeJSONParser"],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_AUTHENTICATION_CLASSES": ["accounts.authentication.ApiKeyAuthentication"],
    # An endpoint that declares nothing is an agent runtime's: the API key must carry the runtime scope.
    "DEFAULT_PERMISSION_CLASSES": ["accounts.authentication.IsAgent", "accounts.authentication.RuntimeScope"],
    "EXCEPTION_HANDLER": "config.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Engram API",
    "DESCRIPTION": "Memory for LLM agents: remember, recall, amend, forget, share, search history, and "
    "drive turns whose replies may only claim what committed.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc from the installed sidecar package: the docs work with no internet access.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "AudienceKindEnum": "history.audience.AudienceKind",
        # remember's belief_type and recall's type_hints: one enum, one name.
        "BeliefTypeEnum": "memory.models.BeliefType",
    },
    # Each agent operation names the API key scope it requires and documents the 403 without it.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "accounts.authentication.document_scopes",
    ],
    # Row ids in paths (config.api.IdConverter): the bounds the converter enforces. (A memory in a path,
    # memory.apis.data.MemoryIdConverter, is documented by its view's parameter.)
    "PATH_CONVERTER_OVERRIDES": {"id": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 2**63 - 1}},
}

# --- Celery ---------------------------------------------------------------------------------------
# Embedded default: kombu's filesystem transport under var/celery, which needs no server and answers
# `celery inspect ping` because a control folder is configured. CELERY_BROKER_URL=redis://... or
# amqp://... selects a real broker.
# ENGRAM_CELERY_DIR moves that folder (the test suite gives its worker a private one). Not named
# CELERY_*: Celery would read it as one of its own settings.
ENGRAM_CELERY_DIR = Path(os.environ.get("ENGRAM_CELERY_DIR", VAR_DIR / "celery"))
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (ENGRAM_CELERY_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(ENGRAM_CELERY_DIR / "queue"),
        "data_folder_out": str(ENGRAM_CELERY_DIR / "queue"),
        "processed_folder": str(ENGRAM_CELERY_DIR / "processed"),
        "store_processed": False,
        "control_folder": str(ENGRAM_CELERY_DIR / "control"),
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = _env_bool("ENGRAM_TASKS_EAGER", False)
# The periodic drain catches whatever a broker lost; notifications on commit make it prompt.
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "drain-index-outbox": {"task": "memory.tasks.embed_pending", "schedule": 30.0},
    "expire-trace-operator-fields": {"task": "memory.tasks.expire_trace_operator_fields", "schedule": 86_400.0},
    # Each tenant's message and memory retention periods (accounts.Tenant), with the erasure cascade.
    "enforce-retention": {"task": "memory.tasks.enforce_retention", "schedule": 86_400.0},
}

# --- Engram ---------------------------------------------------------------------------------------
ENGRAM_MEMORY_TOKEN_ALLOWANCE = int(os.environ.get("ENGRAM_MEMORY_TOKEN_ALLOWANCE", "4096"))
# Semantic search: "auto" uses pgvector when the server has it, "off" runs lexical-only.
ENGRAM_SEMANTIC = os.environ.get("ENGRAM_SEMANTIC", "auto")
ENGRAM_EMBEDDING_MODEL = os.environ.get("ENGRAM_EMBEDDING_MODEL", "all-MiniLM-L6-v2-onnx-int8")
ENGRAM_EMBEDDING_THREADS = int(os.environ.get("ENGRAM_EMBEDDING_THREADS", "1"))
ENGRAM_EMBEDDING_BATCH = int(os.environ.get("ENGRAM_EMBEDDING_BATCH", "64"))
# Memory recall's source arm (memory/retrieval/sources.py): recall's candidates ranked by the words and
# meaning of the messages they were learned from (each read with the line it answers), in one statement
# over the candidate pool. On by default: LoCoMo observations recall@10 0.601 -> 0.665 with a lower noise
# ratio, for recall's p95 1.12 times and the whole HTTP turn's p95 1.03 times (with vectors, against the
# code without it; docs/performance.md, *12-07e*). It runs only where the semantic arm does
# (docs/quality.md, "The source arm on by default"). Set to 0 to leave it out.
ENGRAM_RECALL_SOURCE_ARM = _env_bool("ENGRAM_RECALL_SOURCE_ARM", True)
# Ask a worker to embed right after each write commits (the periodic drain runs regardless).
ENGRAM_NOTIFY_INDEXER = _env_bool("ENGRAM_NOTIFY_INDEXER", True)
# Operator-only trace fields (query text, arms, candidate and dropped ids) are nulled after this many
# days; what the user is shown lives as long as the session it explains.
ENGRAM_TRACE_OPERATOR_RETENTION_DAYS = int(os.environ.get("ENGRAM_TRACE_OPERATOR_RETENTION_DAYS", "30"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("ENGRAM_LOG_LEVEL", "INFO")},
    # pgserver narrates every handle it opens and closes at INFO.
    "loggers": {"pgserver": {"level": "WARNING"}},
}

# --- Start-up, production profile, login lockout and API rate limits ------------------------------
# The production profile (ENGRAM_ENV, read at the top: its refusals come first) turns these HTTPS
# settings on by default.
SESSION_COOKIE_SECURE = _env_bool("ENGRAM_SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = _env_bool("ENGRAM_CSRF_COOKIE_SECURE", PRODUCTION)
SECURE_SSL_REDIRECT = _env_bool("ENGRAM_SSL_REDIRECT", PRODUCTION)
SECURE_HSTS_SECONDS = int(os.environ.get("ENGRAM_HSTS_SECONDS", "31536000" if PRODUCTION else "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("ENGRAM_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = _env_bool("ENGRAM_HSTS_PRELOAD", PRODUCTION)
# The header a TLS-terminating proxy sets to "https" (and strips from what clients send); empty: none.
_proxy_ssl_header = os.environ.get("ENGRAM_PROXY_SSL_HEADER", "X-Forwarded-Proto" if PRODUCTION else "").strip()
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https") if _proxy_ssl_header else None
)

# The demo superuser and the demo workspace (`manage.py provision_demo`, which scripts/run calls) go
# only into the embedded database, outside the production profile, unless ENGRAM_LOAD_DEMO says
# otherwise: 1 loads them anywhere (an explicit opt-in), 0 never.
ENGRAM_DATABASE_IS_EMBEDDED = not os.environ.get("DATABASE_URL")
_load_demo = os.environ.get("ENGRAM_LOAD_DEMO", "").strip()
ENGRAM_LOAD_DEMO: bool | None = _env_bool("ENGRAM_LOAD_DEMO", False) if _load_demo else None
ENGRAM_ADMIN_PASSWORD = os.environ.get("ENGRAM_ADMIN_PASSWORD", "engram-demo")

# Failed-login lockout (django-axes) on /login/ and /admin/login/: after ENGRAM_LOGIN_FAILURE_LIMIT
# failures a client is refused, the right password included, until the cool-off has passed or
# `manage.py axes_reset` clears it. Attempts live in the database, so every gunicorn worker and host
# sees the same count. ENGRAM_LOGIN_LOCKOUT_BY: comma-separated criteria, each a `+`-joined set of
# username, ip_address, user_agent; the default locks a username from one address (locking a
# username everywhere would let anyone lock its owner out).
INSTALLED_APPS.append("axes")
MIDDLEWARE.append("axes.middleware.AxesMiddleware")  # last, as django-axes requires
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out client before any password check
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = _env_bool("ENGRAM_LOGIN_LOCKOUT", True)
AXES_FAILURE_LIMIT = int(os.environ.get("ENGRAM_LOGIN_FAILURE_LIMIT", "5"))
_cooloff_minutes = float(os.environ.get("ENGRAM_LOGIN_COOLOFF_MINUTES", "15"))
AXES_COOLOFF_TIME = timedelta(minutes=_cooloff_minutes) if _cooloff_minutes > 0 else None  # None: until reset
AXES_LOCKOUT_PARAMETERS = [
    criterion.split("+")
    for criterion in os.environ.get("ENGRAM_LOGIN_LOCKOUT_BY", "username+ip_address").replace(" ", "").split(",")
    if criterion
]
AXES_RESET_ON_SUCCESS = True
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False  # otherwise every process start prints a banner

# Per-API-key request rate (accounts/throttling.py): "N/second|minute|hour|day"; "off" or empty: no
# limit. Counted in one statement on an unlogged PostgreSQL table, shared by every worker and host.
REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] = ["accounts.throttling.ApiKeyRateThrottle"]
ENGRAM_API_RATE = os.environ.get("ENGRAM_API_RATE", "6000/minute")
