"""PostgreSQL adapter: SQLAlchemy models, engine and Alembic migrations."""
