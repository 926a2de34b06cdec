"""WSGI entry point: pages, the API and hooks are served by gunicorn (see docs/architecture.md)."""

import os

from django.core.wsgi import get_wsgi_application

from config.heap import freeze_startup_heap

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
# Each worker imports this module after the fork: what it loaded is never walked again.
freeze_startup_heap()
