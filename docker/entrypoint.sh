#!/bin/sh
# web: the HTTP server; worker: manage.py runworker; migrate: migrations and runtime grants (run
# with MIGRATION_DATABASE_URL set); anything else is run as given.
set -eu
case "${1:-web}" in
  web)     exec gunicorn orquestador.wsgi:application --bind 0.0.0.0:8000 --workers "${WEB_WORKERS:-2}" ;;
  worker)  exec python manage.py runworker ;;
  migrate) python manage.py migrate --noinput && exec python manage.py grantruntime ;;
  *)       exec "$@" ;;
esac
