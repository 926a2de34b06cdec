"""The Celery application. Without a broker (the embedded default) tasks run in-process."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("disclosure_desk")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
