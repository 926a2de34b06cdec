"""Settings of the ACS benchmark's server: the project's own, plus a URLconf with an echo view."""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "bench.acs_urls"
