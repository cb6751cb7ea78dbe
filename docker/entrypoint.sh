#!/bin/sh
# web: the HTTP server; proxy: nginx in front of it (deploy/proxy, to PROXY_UPSTREAM, default
# web:8000); worker: manage.py runworker; migrate: migrations and runtime grants (run with
# MIGRATION_DATABASE_URL set); anything else is run as given.
set -eu
case "${1:-web}" in
  web)     WEB_BIND=${WEB_BIND:-0.0.0.0:8000} exec gunicorn -c python:orquestador.gunicorn orquestador.wsgi:application ;;
  proxy)   exec deploy/proxy "${PROXY_LISTEN:-0.0.0.0:8000}" "${PROXY_UPSTREAM:-web:8000}" /tmp/proxy ;;
  worker)  exec python manage.py runworker ;;
  migrate) python manage.py migrate --noinput && exec python manage.py grantruntime ;;
  *)       exec "$@" ;;
esac
