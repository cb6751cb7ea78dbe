"""The web server's settings for bench/run's API section: production's, plus one route.

    DJANGO_SETTINGS_MODULE=bench.websettings gunicorn -c python:orquestador.gunicorn ...

Everything is orquestador.settings; only the root URLs differ (bench/weburls.py), to serve the
web ceiling beside the API. Nothing outside bench/ refers to this module, so no deployment can
serve that route.
"""

from orquestador.settings import *  # noqa: F403 (production's settings, all of them)

ROOT_URLCONF = "bench.weburls"
