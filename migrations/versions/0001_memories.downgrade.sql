-- 0001 downgrade: remove membank from this database.
drop schema if exists membank cascade;
drop schema if exists membank_private cascade;
-- Roles are cluster-wide and may hold grants in other databases; they stay.
