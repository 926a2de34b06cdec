"""Settings for Disclosure Desk, read from the environment.

An empty environment plus DJANGO_DEBUG=True runs the embedded default: SQLite, the in-memory
channel layer, Celery tasks run in-process, delegations held in the database. Production turns on
PostgreSQL (DATABASE_URL), Redis (REDIS_URL) and the rest by setting variables; README.md lists
every one of them.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_list, env_secret, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", False)

SECRET_KEY = env_secret("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) must be set unless DJANGO_DEBUG=True"
        )
    SECRET_KEY = "insecure-development-key-used-only-with-DJANGO_DEBUG"  # noqa: S105

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    # First, so that `runserver` serves websockets too (development only; see config/asgi.py).
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "delegations",
    "approvals",
    "api",
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

WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    (BASE_DIR / "var").mkdir(exist_ok=True)
    # Writers wait for each other instead of failing with "database is locked"; write-ahead
    # logging lets pages read while the watcher writes, and synchronous=NORMAL is WAL's
    # recommended durability (a commit survives a crash of the process).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20,
        init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    )
# PostgreSQL: the hot paths' own statements (delegations.sql) are prepared once per connection,
# so the server no longer plans them on every call; Django's own statements are never prepared.
# Turn off behind a pooler in transaction mode that cannot carry prepared statements (PgBouncer
# before 1.21, or without max_prepared_statements).
DATABASE_PREPARED_STATEMENTS = env_bool("DATABASE_PREPARED_STATEMENTS", True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = ["approvals.identity.EmailBackend"]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "approvals:inbox"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Production images run collectstatic into DJANGO_STATIC_ROOT; without it WhiteNoise serves the
# files straight from the finders (the embedded default and tests).
STATIC_ROOT = env_str("DJANGO_STATIC_ROOT") or None
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py's async pool stops at 100 connections and fails the 101st at once; a
            # burst of websocket connects (every group_add) needs more.
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "max_connections": env_int("REDIS_MAX_CONNECTIONS", 1000),
                    }
                ]
            },
        }
    }
    # The API's rate limits count per client across every process.
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Celery: with no broker the embedded default runs every task in-process, after commit.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
if CELERY_TASK_ALWAYS_EAGER:
    CELERY_BROKER_URL = "memory://"
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

REST_FRAMEWORK = {
    # The token first: its WWW-Authenticate header makes a missing credential a 401, not a 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.access.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.CappedJSONParser"],
    "DEFAULT_THROTTLE_CLASSES": ["api.access.PerClientRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Disclosure Desk API",
    "DESCRIPTION": (
        "channelsd-style calls for agent runtimes: cards, interaction requests and decisions, "
        "session lineage and mirrored SubagentRequests. Authenticate with "
        "`Authorization: Bearer <token>` (manage.py create_api_token)."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}
# Requests per client (token or reviewer) and period: N/second, N/minute, N/hour or N/day.
API_RATE_LIMIT = env_str("API_RATE_LIMIT", "600/minute")
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 65536)

# Where delegations live: "database" (the embedded default, no cluster) or "kubernetes".
DELEGATION_BACKEND = env_str("DELEGATION_BACKEND", "database")
if DELEGATION_BACKEND not in {"database", "kubernetes"}:
    raise ImproperlyConfigured(
        f"DELEGATION_BACKEND must be 'database' or 'kubernetes', not {DELEGATION_BACKEND!r}"
    )
# The cluster: a kubeconfig path, or in-cluster configuration when empty.
KUBECONFIG = env_str("KUBECONFIG")
WATCH_NAMESPACES = env_list("WATCH_NAMESPACES")  # empty: every namespace
WATCH_TIMEOUT_SECONDS = env_int("WATCH_TIMEOUT_SECONDS", 300)
WATCH_BACKOFF_CAP_SECONDS = env_int("WATCH_BACKOFF_CAP_SECONDS", 30)
LEASE_NAME = env_str("LEASE_NAME", "disclosure-desk-watcher")
LEASE_NAMESPACE = env_str("LEASE_NAMESPACE")  # empty: the pod's own namespace
LEASE_DURATION_SECONDS = env_int("LEASE_DURATION_SECONDS", 15)

# Who may speak for a tag: "local" (tag -> source resources -> owners, edited in the admin).
AUTHORIZER = env_str("AUTHORIZER", "local")
if AUTHORIZER not in {"local"}:
    raise ImproperlyConfigured(f"AUTHORIZER must be 'local', not {AUTHORIZER!r}")

# Slack: the signing secret verifies interaction callbacks (POST /slack/interactions).
SLACK_SIGNING_SECRET = env_secret("SLACK_SIGNING_SECRET")
# Outbound webhooks: https to public addresses only, unless these say otherwise.
OUTBOUND_ALLOW_HTTP = env_bool("OUTBOUND_ALLOW_HTTP", False)
OUTBOUND_ALLOW_PRIVATE = env_bool("OUTBOUND_ALLOW_PRIVATE", False)
NOTIFY_MAX_ATTEMPTS = env_int("NOTIFY_MAX_ATTEMPTS", 8)
NOTIFY_RETRY_BASE_SECONDS = float(env_str("NOTIFY_RETRY_BASE_SECONDS", "2"))
NOTIFY_RETRY_CAP_SECONDS = float(env_str("NOTIFY_RETRY_CAP_SECONDS", "600"))
# The address people use to reach this desk, for links in Slack messages.
DESK_BASE_URL = env_str("DESK_BASE_URL", "http://127.0.0.1:8000")

# ACS hooks (POST /acs): without a secret of at least 32 bytes the endpoint refuses every session
# (-32000) and `manage.py check` says why (delegations.W002 / E002). See README.md, "ACS hooks".
ACS_HMAC_SECRET = env_secret("ACS_HMAC_SECRET")
ACS_KEY_ID = env_str("ACS_KEY_ID", "disclosure-desk")
ACS_NAMESPACE = env_str("ACS_NAMESPACE", "acs")
ACS_ROOT_CHANNEL = env_str("ACS_ROOT_CHANNEL")  # "KIND/NAME": the channel ACS root sessions read
ACS_SKEW_WINDOW_MS = env_int("ACS_SKEW_WINDOW_MS", 300000)
ACS_MAX_BODY_BYTES = env_int("ACS_MAX_BODY_BYTES", 262144)

CELERY_BEAT_SCHEDULE = {
    "upkeep": {"task": "approvals.tasks.upkeep", "schedule": 15.0},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
