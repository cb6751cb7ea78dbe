"""The provider's WSGI application, served by gunicorn (tests/support/idp)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.idp.settings")
application = get_wsgi_application()
