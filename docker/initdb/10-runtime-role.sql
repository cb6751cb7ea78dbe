-- The restricted runtime role; `manage.py grantruntime` (the migrate service) gives it DML only.
-- The image's superuser owns the schema here, so the compose trial runs migrations as it.
CREATE ROLE orquestador_app LOGIN PASSWORD 'app-local';
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
