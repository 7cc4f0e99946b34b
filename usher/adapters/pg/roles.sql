-- PostgreSQL roles of Usher: only the ledger writes; `usher audit` reads.
-- The one copy: deploy/postgres-roles.sql links here, and `usher up` applies it to its own
-- PostgreSQL (usher/local/servers.py) with generated passwords.
-- Run as a superuser or as `usher`, the database owner that runs the migrations
-- (deploy/postgres-cluster.yaml runs it at bootstrap), before or after the migrations: grants
-- cover the tables that exist and, through default privileges, those `usher` creates later.
-- Idempotent. Passwords are set by CloudNativePG's managed roles (or ALTER ROLE ... PASSWORD).
-- The watcher, dequeuers and preemptor have no role: they never touch PostgreSQL.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'usher_ledger') THEN
        CREATE ROLE usher_ledger LOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'usher_audit') THEN
        CREATE ROLE usher_audit LOGIN;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO usher_ledger, usher_audit', current_database());
END
$$;

-- Nobody but the owner creates objects.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA public TO usher;
GRANT USAGE ON SCHEMA public TO usher_ledger, usher_audit;

-- The ledger: rows only (no DDL, no TRUNCATE), and the id sequences.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO usher_ledger;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO usher_ledger;
ALTER DEFAULT PRIVILEGES FOR ROLE usher IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO usher_ledger;
ALTER DEFAULT PRIVILEGES FOR ROLE usher IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO usher_ledger;

-- Audit: read only.
GRANT SELECT ON ALL TABLES IN SCHEMA public TO usher_audit;
ALTER DEFAULT PRIVILEGES FOR ROLE usher IN SCHEMA public GRANT SELECT ON TABLES TO usher_audit;
